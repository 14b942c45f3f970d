"""The exceptions sptmc raises.

Every one derives from :class:`sptmc.Error` and from the built-in exception a Python
user would catch for the same problem, so ``except ValueError`` and
``except sptmc.Error`` both work. The message is the library's own, one line that
names the problem.
"""

from __future__ import annotations

__all__ = [
    "Error",
    "InputError",
    "ArgumentTypeError",
    "ArgumentOverflowError",
    "FormatError",
    "FileError",
    "MissingFileError",
    "OutOfMemoryError",
    "DeviceError",
    "NumericalError",
]


class Error(Exception):
    """Base class of every error sptmc raises."""


class InputError(Error, ValueError):
    """A bad argument: a shape, rank or mode that does not fit, an index out of range,
    a NaN value, an option out of its range."""


class ArgumentTypeError(InputError, TypeError):
    """An argument of the wrong type: a float, bool, string or None where an integer is
    expected (``rank=2.5``, ``rank=True``, ``mode=3.0``), a non-number ``tol``, a path
    that is not a ``str``, ``bytes`` or ``os.PathLike``. Also a ``TypeError`` (and, as
    an :class:`InputError`, a ``ValueError``)."""


class ArgumentOverflowError(InputError, OverflowError):
    """An integer argument too large (or too negative) for a 64-bit integer
    (``rank=2**64``, ``mode=-2**63 - 1``). Also an ``OverflowError`` (and, as an
    :class:`InputError`, a ``ValueError``). An integer that fits but is out of the
    argument's own range (``rank=0``, ``mode=7`` for a 3-way tensor) is a plain
    :class:`InputError`."""


class FormatError(Error, ValueError):
    """A file whose content is not a valid tensor (or tuning profile); the message
    names the file, and the line for text."""


class FileError(Error, OSError):
    """A file that cannot be read or written; ``errno`` and ``filename`` are set as
    for any ``OSError``."""

    def __str__(self) -> str:
        # OSError would render "[Errno N] strerror: 'filename'"; the library's message
        # already names the file and the reason.
        return str(self.args[0]) if self.args else super().__str__()


class MissingFileError(FileError, FileNotFoundError):
    """A file that does not exist (also a ``FileNotFoundError``)."""


class OutOfMemoryError(Error, MemoryError):
    """A run whose memory plan needs more than this process may allocate, or more
    than the GPU has."""


class DeviceError(Error, RuntimeError):
    """No usable CUDA device for ``backend="cuda"``, or a driver or kernel compile
    error."""


class NumericalError(Error, ArithmeticError):
    """Dense linear algebra that did not converge, or a fit that cannot be computed."""


# Shown as sptmc.InputError etc. in tracebacks: the public name.
for _cls in (Error, InputError, ArgumentTypeError, ArgumentOverflowError, FormatError,
             FileError, MissingFileError, OutOfMemoryError, DeviceError, NumericalError):
    _cls.__module__ = "sptmc"
del _cls
