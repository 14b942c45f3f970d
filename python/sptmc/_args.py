"""How sptmc reads its scalar arguments: integers, numbers, strings, flags and paths.

One set of rules for every function, the Rust extension's methods included (they call
these):

- An integer is a Python ``int`` or a numpy integer scalar (anything with
  ``__index__``). ``bool`` and ``numpy.bool_`` are refused (``rank=True`` is not a
  rank), and so is every float, an integral one (``3.0``, ``-0.0``) included, as
  Python's own ``range`` and indexing refuse them: :class:`ArgumentTypeError`.
- An integer outside the signed 64-bit range is :class:`ArgumentOverflowError`; one
  inside it but out of the argument's own range is the library's :class:`InputError`,
  worded as the command line words it.
- A number (``tol``) is an int or a float, Python's or numpy's, but not a bool.
- A path is a ``str``, ``bytes`` (the operating system's bytes, any encoding) or an
  ``os.PathLike``.
- An array argument may not be a numpy masked array: ``numpy.asarray`` would drop
  its mask and read the masked entries' hidden data (:func:`not_masked`).
"""

from __future__ import annotations

import operator
import os
import sys
import types
import warnings
from typing import Any, Optional, Union

import numpy as np

from ._errors import ArgumentOverflowError, ArgumentTypeError, InputError

_I64_MIN = -(1 << 63)
_I64_MAX = (1 << 63) - 1


def _show(value: Any) -> str:
    """``value`` for a message: its repr and, when that does not say it, its type."""
    text = repr(value)
    if len(text) > 60:
        text = text[:57] + "..."
    kind = type(value).__name__
    return text if kind in ("str", "bytes", "NoneType") else f"{text} ({kind})"


def integer(name: str, value: Any) -> int:
    """``value`` as an int that fits 64 bits, by the rules above; ``name`` names the
    argument in the error."""
    if isinstance(value, (bool, np.bool_, float, np.floating, complex, np.complexfloating)):
        raise ArgumentTypeError(f"{name} must be an integer, got {_show(value)}")
    try:
        i = operator.index(value)
    except TypeError:
        raise ArgumentTypeError(f"{name} must be an integer, got {_show(value)}") from None
    if not _I64_MIN <= i <= _I64_MAX:
        raise ArgumentOverflowError(
            f"{name} is {i}, which does not fit a 64-bit integer"
        )
    return i


def optional_integer(name: str, value: Any) -> Optional[int]:
    """:func:`integer`, with ``None`` kept as ``None``."""
    return None if value is None else integer(name, value)


def integers(name: str, values: Any) -> list:
    """A sequence of integers (``shape``, ``ranks``) as a list of ints, each read by
    :func:`integer` and named ``name[m]``."""
    if isinstance(values, (str, bytes)) or not hasattr(values, "__iter__"):
        raise ArgumentTypeError(f"{name} must be a sequence of integers, got {_show(values)}")
    return [integer(f"{name}[{m}]", v) for m, v in enumerate(values)]


def number(name: str, value: Any) -> float:
    """``value`` (an int or float, not a bool) as a float."""
    if isinstance(value, (bool, np.bool_)) or not isinstance(
        value, (int, float, np.integer, np.floating)
    ):
        raise ArgumentTypeError(f"{name} must be a number, got {_show(value)}")
    try:
        return float(value)
    except OverflowError:
        raise ArgumentOverflowError(f"{name} does not fit a 64-bit float") from None


def text(name: str, value: Any) -> str:
    """``value``, which must be a ``str``."""
    if not isinstance(value, str):
        raise ArgumentTypeError(f"{name} must be a string, got {_show(value)}")
    return value


def flag(name: str, value: Any) -> bool:
    """``value``, which must be a ``bool`` (or ``numpy.bool_``)."""
    if not isinstance(value, (bool, np.bool_)):
        raise ArgumentTypeError(f"{name} must be True or False, got {_show(value)}")
    return bool(value)


def path(value: Any) -> str:
    """A path as the ``str`` the extension reads: a ``bytes`` path (or a PathLike
    giving bytes) is decoded as ``os.fsdecode`` does, so that bytes that are not valid
    in the file system's encoding come back unchanged when the path is opened."""
    if not isinstance(value, (str, bytes, os.PathLike)):
        raise ArgumentTypeError(
            f"path must be a str, bytes or os.PathLike, got {_show(value)}"
        )
    p: Union[str, bytes] = os.fspath(value)
    return os.fsdecode(p)


def not_masked(name: str, value: Any) -> None:
    """Refuses a numpy masked array (:class:`InputError` naming ``name``), whose mask
    every numpy conversion would drop."""
    if isinstance(value, np.ma.MaskedArray):
        raise InputError(
            f"{name}: masked arrays are not supported: pass .filled() or drop the "
            "masked entries"
        )


_PACKAGE = os.path.dirname(os.path.abspath(__file__)) + os.sep


def warn(message: str, category: type = UserWarning) -> None:
    """Issues ``message`` at the first caller outside this package (the user's line,
    however many of the package's functions lie between), so that the location shown
    and ``warnings.filterwarnings(module=...)`` point at the user's code. The Rust
    extension calls it too (its own frames are not Python's)."""
    frame: Optional[types.FrameType] = sys._getframe(1)
    level = 2  # 1 is this function; 2 its caller
    while frame is not None and os.path.abspath(frame.f_code.co_filename).startswith(_PACKAGE):
        frame = frame.f_back
        level += 1
    warnings.warn(message, category, stacklevel=level)
