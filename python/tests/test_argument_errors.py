"""Arguments of the wrong type or out of range raise sptmc's documented classes, which
are also the built-in a Python user catches: a wrong type is ``sptmc.ArgumentTypeError``
(an ``InputError`` and a ``TypeError``), an integer beyond 64 bits
``sptmc.ArgumentOverflowError`` (an ``InputError`` and an ``OverflowError``), an integer
that fits but is out of the argument's range a plain ``InputError``; paths may be
``str``, ``bytes`` or ``os.PathLike``, UTF-8 or not."""

from __future__ import annotations

import os
import pathlib

import numpy as np
import pytest
import sptmc

SHAPE = (5, 4, 3)
SUBS = np.array([[0, 0, 0], [1, 2, 0], [4, 3, 2], [2, 1, 1]])
VALS = np.array([1.0, 2.0, 3.0, 4.0])

INT_DTYPES = [np.int8, np.int16, np.int32, np.int64, np.uint8, np.uint16, np.uint32, np.uint64]
FLOAT_DTYPES = [np.float16, np.float32, np.float64, np.longdouble]

# Not integers, whatever their value: bools, floats (integral ones too), strings, ...
NOT_INTEGERS = (
    [True, False, np.bool_(True), 2.0, 2.7, -0.0, float("nan"), float("inf"), "2", b"2",
     None, 2 + 0j, [2]]
    + [t(2) for t in FLOAT_DTYPES]
)
# Beyond a 64-bit integer, as Python ints and as numpy's one scalar that can be.
TOO_LARGE = [2**64, 2**63, -(2**63) - 1, 10**30, -(10**30)]


@pytest.fixture(scope="module")
def X():
    return sptmc.from_coo(SUBS, VALS, SHAPE)


def factors(rank=2):
    return [np.ones((d, rank)) for d in SHAPE]


def check_type_error(call, name):
    """``call()`` raises ArgumentTypeError, which is every class it promises to be,
    naming ``name``."""
    with pytest.raises(sptmc.ArgumentTypeError, match=name) as info:
        call()
    e = info.value
    assert isinstance(e, TypeError) and isinstance(e, ValueError)
    assert isinstance(e, sptmc.InputError) and isinstance(e, sptmc.Error)
    assert type(e).__module__ == "sptmc"


def check_overflow(call, name):
    with pytest.raises(sptmc.ArgumentOverflowError, match=name) as info:
        call()
    e = info.value
    assert isinstance(e, OverflowError) and isinstance(e, ValueError)
    assert isinstance(e, sptmc.InputError) and isinstance(e, sptmc.Error)
    assert "64-bit" in str(e)


# Every integer argument, as a function of the value under test.
INTEGER_ARGUMENTS = {
    "rank": lambda X, v: sptmc.cp_als(X, v, iters=1, backend="cpu"),
    "iters": lambda X, v: sptmc.cp_als(X, 2, iters=v, backend="cpu"),
    "seed": lambda X, v: sptmc.cp_als(X, 2, iters=1, seed=v, backend="cpu"),
    "threads": lambda X, v: sptmc.cp_als(X, 2, iters=1, threads=v, backend="cpu"),
    r"ranks\[1\]": lambda X, v: sptmc.tucker_hooi(X, [2, v, 2], iters=1, backend="cpu"),
    "mode": lambda X, v: X.mttkrp(factors(), v, backend="cpu"),
    "mode ": lambda X, v: X.ttmc(factors(), v, backend="cpu"),
    "threads ": lambda X, v: X.mttkrp(factors(), 0, backend="cpu", threads=v),
    "rank ": lambda X, v: X.info(rank=v, backend="cpu"),
    "threshold": lambda X, v: X.info(threshold=v),
    "threads  ": lambda X, v: sptmc.backend_info("cpu", threads=v),
    r"shape\[0\]": lambda X, v: sptmc.from_coo(SUBS, VALS, (v, 4, 3)),
    r"shape\[2\]": lambda X, v: sptmc.from_coo(SUBS, VALS, [5, 4, v]),
    "index_base": lambda X, v: sptmc.from_coo(SUBS, VALS, SHAPE, index_base=v),
}
# Where None is allowed (it means the default).
NONE_ALLOWED = {"threads", "threads ", "threads  ", "threshold"}


@pytest.mark.parametrize("arg", sorted(INTEGER_ARGUMENTS))
@pytest.mark.parametrize("value", NOT_INTEGERS, ids=repr)
def test_a_non_integer_is_a_type_error(X, arg, value):
    if value is None and arg in NONE_ALLOWED:
        pytest.skip("None is this argument's default")
    check_type_error(lambda: INTEGER_ARGUMENTS[arg](X, value), arg.strip())


@pytest.mark.parametrize("arg", sorted(INTEGER_ARGUMENTS))
@pytest.mark.parametrize("value", TOO_LARGE, ids=repr)
def test_an_integer_beyond_64_bits_is_an_overflow(X, arg, value):
    check_overflow(lambda: INTEGER_ARGUMENTS[arg](X, value), arg.strip())


@pytest.mark.parametrize("arg", sorted(INTEGER_ARGUMENTS))
def test_a_uint64_beyond_int64_is_an_overflow(X, arg):
    check_overflow(lambda: INTEGER_ARGUMENTS[arg](X, np.uint64(2**64 - 1)), arg.strip())


def test_a_fitting_integer_out_of_range_is_a_plain_input_error(X):
    cases = [
        (lambda: sptmc.cp_als(X, 0), "rank must be at least 1, got 0"),
        (lambda: sptmc.cp_als(X, -(2**63)), "rank"),
        (lambda: X.mttkrp(factors(), 2**63 - 1), "mode 9223372036854775807 is out of range"),
        (lambda: X.mttkrp(factors(), -1), "mode -1 is out of range"),
        (lambda: X.info(rank=0), "rank must be at least 1, got 0"),
        (lambda: X.info(threshold=2**32), "threshold must be between 0 and 4294967295"),
        (lambda: X.info(threshold=-1), "threshold must be between 0 and 4294967295"),
        (lambda: sptmc.from_coo(SUBS, VALS, SHAPE, index_base=2), "index_base must be 0 or 1"),
        (lambda: sptmc.from_coo(SUBS, VALS, (0, 4, 3)), r"shape\[0\] is 0"),
        (lambda: sptmc.cp_als(X, 2, threads=0), "threads must be at least 1, got 0"),
        (lambda: sptmc.cp_als(X, 2, threads=10**6, backend="cpu"), "at most .* threads"),
        (lambda: X.mttkrp(factors(), 0, backend="cpu", threads=10**6), "4 per core"),
    ]
    for call, words in cases:
        with pytest.raises(sptmc.InputError, match=words) as info:
            call()
        assert not isinstance(info.value, (TypeError, OverflowError)), type(info.value)


@pytest.mark.parametrize("dtype", INT_DTYPES, ids=lambda t: t.__name__)
def test_numpy_integers_of_every_dtype_are_integers(X, dtype):
    two, one, zero = dtype(2), dtype(1), dtype(0)
    m = sptmc.cp_als(X, two, iters=dtype(2), seed=dtype(3), threads=one, tol=0, backend="cpu")
    assert m.weights.shape == (2,) and m.iterations == 2
    t = sptmc.tucker_hooi(X, [two, two, one], iters=one, backend="cpu")
    assert t.core.shape == (2, 2, 1)
    assert X.mttkrp(factors(), one, backend="cpu", threads=one).shape == (4, 2)
    assert X.ttmc(factors(), zero, backend="cpu").shape == (5, 4)
    assert X.info(rank=two, threshold=one)["threshold"] == 1
    Y = sptmc.from_coo(SUBS + 1, VALS, (dtype(5), dtype(4), dtype(3)), index_base=one)
    assert Y.shape == SHAPE
    np.testing.assert_array_equal(Y.to_coo()[0], X.to_coo()[0])


def test_python_ints_still_work_and_ranks_may_be_one_int(X):
    assert sptmc.tucker_hooi(X, 2, iters=1, backend="cpu").core.shape == (2, 2, 2)
    assert sptmc.tucker_hooi(X, np.int32(2), iters=1, backend="cpu").core.shape == (2, 2, 2)
    assert sptmc.tucker_hooi(X, (2, 2, 2), iters=1, backend="cpu").core.shape == (2, 2, 2)


@pytest.mark.parametrize(
    "value", [True, np.bool_(False), 2.0, 2.5, -0.0, "2", b"2", None, np.float32(2)], ids=repr
)
def test_ranks_of_the_wrong_type(X, value):
    check_type_error(lambda: sptmc.tucker_hooi(X, value, iters=1, backend="cpu"), "ranks")


@pytest.mark.parametrize("shape", ["543", b"543", 5, 5.0, (5.0, 4, 3), (2.7, 3, 3), (True, 4, 3)],
                         ids=repr)
def test_a_shape_of_the_wrong_type_is_refused_not_truncated(shape):
    check_type_error(lambda: sptmc.from_coo(SUBS, VALS, shape), "shape")


@pytest.mark.parametrize(
    "value", [True, False, np.bool_(True), "1e-5", b"0", None, 1j, [0.1]], ids=repr
)
def test_tol_of_the_wrong_type(X, value):
    check_type_error(lambda: sptmc.cp_als(X, 2, tol=value, backend="cpu"), "tol")


@pytest.mark.parametrize("dtype", FLOAT_DTYPES + INT_DTYPES, ids=lambda t: t.__name__)
def test_tol_takes_numpy_numbers(X, dtype):
    m = sptmc.cp_als(X, 2, iters=3, tol=dtype(0), backend="cpu")
    assert m.iterations == 3


def test_tol_beyond_a_float_is_an_overflow(X):
    check_overflow(lambda: sptmc.cp_als(X, 2, tol=10**400, backend="cpu"), "tol")


@pytest.mark.parametrize("value", [None, b"cpu", 1, True, ["cpu"]], ids=repr)
def test_a_backend_that_is_not_a_string(X, value):
    check_type_error(lambda: sptmc.cp_als(X, 2, backend=value), "backend")
    check_type_error(lambda: sptmc.tucker_hooi(X, 2, backend=value), "backend")
    check_type_error(lambda: X.mttkrp(factors(), 0, backend=value), "backend")
    check_type_error(lambda: X.info(backend=value), "backend")
    check_type_error(lambda: sptmc.backend_info(value), "backend")


@pytest.mark.parametrize("value", [None, b"ttmc", 0, True], ids=repr)
def test_an_op_that_is_not_a_string(X, value):
    check_type_error(lambda: X.info(op=value), "op")


def test_unknown_strings_stay_plain_input_errors(X):
    for call in (lambda: X.info(op="gemm"), lambda: X.mttkrp(factors(), 0, backend="gpu")):
        with pytest.raises(sptmc.InputError) as info:
            call()
        assert not isinstance(info.value, TypeError)


# ---- paths


TNS = "1 1 1 1.5\n2 3 1 2.0\n3 2 2 -1.0\n"


@pytest.fixture()
def odd_dir(tmp_path):
    """A folder whose name is not valid UTF-8, holding ``x.tns``."""
    base = os.fsencode(tmp_path) + b"/caf\xe9-\xff"
    try:
        os.mkdir(base)
    except (OSError, UnicodeError) as e:  # a file system that refuses such names
        pytest.skip(f"cannot make a non-UTF-8 folder here: {e}")
    with open(base + b"/x.tns", "w") as f:
        f.write(TNS)
    return base


@pytest.mark.parametrize("cache", [True, False])
def test_every_kind_of_path_reads(tmp_path, odd_dir, cache, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    (tmp_path / "y.tns").write_text(TNS)
    good = tmp_path / "y.tns"
    for p in (str(good), good, os.fsencode(good), pathlib.PurePath(good),
              odd_dir + b"/x.tns", os.fsdecode(odd_dir + b"/x.tns"),
              pathlib.Path(os.fsdecode(odd_dir + b"/x.tns"))):
        X = sptmc.read(p, cache=cache)
        assert X.shape == (3, 3, 2) and X.nnz == 3, p
    assert sptmc.tensor(odd_dir + b"/x.tns").nnz == 3


def test_a_missing_non_utf8_path_is_a_missing_file_error_naming_it(odd_dir):
    for p in (odd_dir + b"/nope.tns", os.fsdecode(odd_dir + b"/nope.tns")):
        with pytest.raises(sptmc.MissingFileError) as info:
            sptmc.read(p)
        e = info.value
        assert isinstance(e, FileNotFoundError) and isinstance(e, sptmc.FileError)
        assert "nope.tns" in str(e) and "caf" in str(e)
        assert "internal error" not in str(e) and "panicked" not in str(e)


def test_an_unreadable_non_utf8_path_is_a_file_error_naming_it(odd_dir):
    # A folder where a file is expected: readable by nobody as a tensor.
    with pytest.raises(sptmc.Error) as info:
        sptmc.read(odd_dir)
    e = info.value
    assert isinstance(e, (sptmc.FileError, sptmc.FormatError)), type(e)
    assert "caf" in str(e) and "internal error" not in str(e)


@pytest.mark.parametrize("value", [None, 3, 3.0, True, ["x.tns"], bytearray(b"x.tns")], ids=repr)
def test_a_path_of_the_wrong_type(value):
    check_type_error(lambda: sptmc.read(value), "path")


@pytest.mark.parametrize("value", [1, "yes", None, 1.0], ids=repr)
def test_cache_must_be_a_bool(tmp_path, value):
    (tmp_path / "y.tns").write_text(TNS)
    check_type_error(lambda: sptmc.read(tmp_path / "y.tns", cache=value), "cache")


@pytest.mark.parametrize(
    "value",
    [np.ones((5, 2)), np.ones((3, 5, 2)), "factors", None, 3, {0: np.ones((5, 2))}],
    ids=lambda v: type(v).__name__,
)
def test_factors_that_are_not_a_list(X, value):
    check_type_error(lambda: X.mttkrp(value, 0, backend="cpu"), "factors")
    check_type_error(lambda: X.ttmc(value, 0, backend="cpu"), "factors")


def test_factors_as_a_tuple_with_the_target_mode_none(X):
    f = factors()
    assert X.mttkrp((None, f[1], f[2]), 0, backend="cpu").shape == (5, 2)
