"""Bad input raises the exception a Python user expects, with a message naming the
problem; every class is also a sptmc.Error."""

from __future__ import annotations

import errno

import numpy as np
import pytest
import sptmc

from conftest import random_coo

SHAPE = (12, 10, 8)


@pytest.fixture(scope="module")
def X():
    subs, vals = random_coo(SHAPE, 200, seed=1)
    return sptmc.from_coo(subs, vals, SHAPE)


def raises(cls, match):
    """pytest.raises for ``cls`` that also checks sptmc.Error."""

    class Both:
        def __enter__(self):
            self.ctx = pytest.raises(cls, match=match)
            self.info = self.ctx.__enter__()
            return self.info

        def __exit__(self, *exc):
            handled = self.ctx.__exit__(*exc)
            assert isinstance(self.info.value, sptmc.Error), type(self.info.value)
            return handled

    return Both()


def test_the_hierarchy():
    assert issubclass(sptmc.InputError, ValueError)
    assert issubclass(sptmc.FormatError, ValueError)
    assert issubclass(sptmc.FileError, OSError)
    assert issubclass(sptmc.MissingFileError, FileNotFoundError)
    assert issubclass(sptmc.OutOfMemoryError, MemoryError)
    assert issubclass(sptmc.DeviceError, RuntimeError)
    assert issubclass(sptmc.NumericalError, ArithmeticError)
    for cls in (sptmc.InputError, sptmc.FormatError, sptmc.FileError, sptmc.DeviceError):
        assert issubclass(cls, sptmc.Error)
    assert sptmc.InputError.__module__ == "sptmc"


def test_wrong_shapes_of_coordinates_and_values():
    subs = np.array([[0, 1, 2], [1, 0, 0]])
    with raises(ValueError, r"subs has shape \(2, 3\); with 4 values it must be 4 x N or N x 4"):
        sptmc.from_coo(subs, np.ones(4))
    with raises(ValueError, r"subs has shape \(2, 3\); with 2 values it must be 2 x 2 or 2 x 2"):
        sptmc.from_coo(subs, np.ones(2), shape=(3, 3))
    with raises(ValueError, r"vals must be 1-D \(or nnz x 1\)"):
        sptmc.from_coo(subs, np.ones((2, 2)))
    with raises(ValueError, r"subs must be 2-D"):
        sptmc.from_coo(np.arange(3), np.ones(3))
    with raises(ValueError, "subs must hold integers, got dtype float64"):
        sptmc.from_coo(subs.astype(float), np.ones(2))
    with raises(ValueError, r"shape \[3, 3, 3\] has 3 modes, subs has 2"):
        sptmc.from_coo((subs[0], subs[1]), np.ones(3), shape=(3, 3, 3))
    with raises(ValueError, "subs of mode 1 has 2 indices, vals has 3"):
        sptmc.from_coo((np.array([0, 1, 2]), np.array([0, 1])), np.ones(3))
    with raises(ValueError, r"shape\[1\] is 0"):
        sptmc.from_coo(subs, np.ones(3), shape=(3, 0))
    with raises(ValueError, "an empty tensor needs its shape"):
        sptmc.from_coo(np.zeros((0, 3), dtype=np.int64), np.zeros(0))
    with raises(ValueError, "cannot make a sptmc tensor from a int"):
        sptmc.tensor(3)


def test_negative_and_out_of_range_indices():
    subs = np.array([[0, 1], [2, -1], [1, 1]])
    with raises(ValueError, "index -1 of nonzero 1 in mode 1 is negative"):
        sptmc.from_coo(subs, np.ones(3))
    subs = np.array([[0, 1], [2, 5], [1, 1]])
    with raises(ValueError, r"index 5 of nonzero 1 in mode 1 is out of range for shape\[1\] = 4"):
        sptmc.from_coo(subs, np.ones(3), shape=(3, 4))
    with raises(ValueError, "index 0 of nonzero 0 in mode 0 is below index_base=1"):
        sptmc.from_coo(subs, np.ones(3), index_base=1)
    with raises(ValueError, "index_base must be 0 or 1"):
        sptmc.from_coo(subs, np.ones(3), index_base=2)
    with raises(ValueError, "too large"):
        sptmc.from_coo(np.array([[0, 2**33]]), np.ones(1))


def test_nan_and_infinite_values():
    subs = np.array([[0, 1], [2, 0], [1, 1]])
    with raises(ValueError, "the value of nonzero 1 is NaN; values must be finite"):
        sptmc.from_coo(subs, np.array([1.0, np.nan, 2.0]))
    with raises(ValueError, "the value of nonzero 2 is -inf"):
        sptmc.from_coo(subs, np.array([1.0, 2.0, -np.inf], dtype=np.float32))
    with raises(ValueError, "vals must be numbers"):
        sptmc.from_coo(subs, np.array(["a", "b", "c"]))


def test_rank_mode_and_factor_errors(X):
    with raises(ValueError, "rank must be at least 1, got 0"):
        sptmc.cp_als(X, 0)
    with raises(ValueError, "rank must be an integer"):
        sptmc.cp_als(X, 2.5)
    with raises(ValueError, r"ranks\[1\] must be at least 1, got 0"):
        sptmc.tucker_hooi(X, [2, 0, 2])
    with raises(ValueError, "ranks must be an integer or one integer per mode, got 2.5"):
        sptmc.tucker_hooi(X, 2.5)
    with raises(ValueError, r"Tucker needs one rank per mode \(or one for every mode\): 2 ranks for a tensor of order 3"):
        sptmc.tucker_hooi(X, [2, 2])
    with raises(ValueError, "rank of mode 2 is 9; it must be between 1 and the mode's length 8"):
        sptmc.tucker_hooi(X, [2, 5, 9])
    f = [np.ones((d, 3)) for d in SHAPE]
    with raises(ValueError, r"mode 3 is out of range for a tensor of order 3"):
        X.mttkrp(f, 3)
    with raises(ValueError, r"mode -1 is out of range for a tensor of order 3"):
        X.mttkrp(f, -1)
    with raises(ValueError, "factor of mode 1: expected 10 rows"):
        X.mttkrp([f[0], np.ones((9, 3)), f[2]], 0)
    with raises(ValueError, "factor of mode 2: expected 3 columns"):
        X.mttkrp([f[0], f[1], np.ones((8, 4))], 0)
    with raises(ValueError, "factors: expected 3 matrices"):
        X.mttkrp(f[:2], 0)
    with raises(ValueError, r"factors\[0\] is None; only the target mode's \(1\) may be"):
        X.ttmc([None, None, f[2]], 1)
    with raises(ValueError, r"factors\[2\]: expected a 2-D float64 or float32 array, got a 1-D"):
        X.mttkrp([f[0], f[1], np.ones(8)], 0)
    with raises(ValueError, r"initial factor of mode 1: expected 10×3"):
        sptmc.cp_als(X, 3, init=[f[0], np.ones((10, 2)), f[2]])
    bad = [f[0], f[1], f[2].copy()]
    bad[2][4, 1] = np.nan
    with raises(ValueError, r"initial factor of mode 2, entry \(4, 1\) is NaN"):
        sptmc.cp_als(X, 3, init=bad)


def test_option_errors(X):
    with raises(ValueError, "iters must be at least 1, got 0"):
        sptmc.cp_als(X, 2, iters=0)
    with raises(ValueError, "tol must be a number ≥ 0"):
        sptmc.cp_als(X, 2, tol=-1.0)
    with raises(ValueError, "tol must be a number ≥ 0"):
        sptmc.tucker_hooi(X, 2, tol=float("nan"))
    with raises(ValueError, "threads must be at least 1, got 0"):
        sptmc.cp_als(X, 2, threads=0)
    with raises(ValueError, "threads must be at least 1"):
        X.mttkrp([np.ones((d, 2)) for d in SHAPE], 0, threads=0)
    with raises(ValueError, 'backend must be "auto", "cpu" or "cuda", got "gpu"'):
        sptmc.cp_als(X, 2, backend="gpu")
    with raises(ValueError, 'op must be "mttkrp" or "ttmc"'):
        X.info(op="cp")


def test_file_errors(tmp_path):
    missing = tmp_path / "none.tns"
    with raises(FileNotFoundError, "none.tns: no such file") as e:
        sptmc.read(missing)
    assert e.value.errno == errno.ENOENT
    assert e.value.filename == str(missing)
    bad = tmp_path / "bad.tns"
    bad.write_text("1 1 1 1.0\n2 x 1 2.0\n")
    with raises(ValueError, "bad.tns:2: ") as e:
        sptmc.read(bad, cache=False)
    assert isinstance(e.value, sptmc.FormatError)
    zero = tmp_path / "zero.tns"
    zero.write_text("0 1 1 1.0\n")
    with raises(ValueError, "zero.tns:1: "):
        sptmc.read(zero, cache=False)
    with raises(OSError, "is a directory|Is a directory"):
        sptmc.read(tmp_path, cache=False)


def test_no_cuda_is_a_device_error_or_runs(X):
    """backend="cuda" without a usable GPU raises DeviceError; with one, it runs."""
    f = [np.ones((d, 2)) for d in SHAPE]
    try:
        out = X.mttkrp(f, 0, backend="cuda")
    except sptmc.DeviceError as e:
        assert isinstance(e, RuntimeError)
        assert "CUDA" in str(e)
    else:
        np.testing.assert_allclose(out, X.mttkrp(f, 0, backend="cpu"), rtol=1e-3)


def test_runs_too_large_for_memory_raise_memory_error():
    """The run's memory plan is checked before anything is allocated for it."""
    # As many nonzeros as components: fewer would be refused by the rank check first.
    subs = np.stack([np.arange(1000), np.arange(1000), np.arange(1000) % 10], axis=1)
    huge = sptmc.from_coo(subs, np.ones(1000), shape=(2**31, 2**31, 10))
    with raises(MemoryError, "not enough memory: CP-ALS rank 1000 needs"):
        sptmc.cp_als(huge, 1000)
    with raises(MemoryError, r"not enough memory: Tucker-HOOI ranks \[100, 100, 10\] needs"):
        sptmc.tucker_hooi(huge, [100, 100, 10])


def test_gcp_and_completion_on_modes_too_long_for_memory_raise_memory_error():
    """A mode near 2^32 rows: GCP's model and completion's model on the tensor's own rows
    do not fit, which is a MemoryError before anything is drawn, not an abort (the
    baselines and the compacted run follow the entries, not the extents)."""
    subs = np.array([[0, 0, 0], [2**32 - 1, 5, 7], [3, 4, 6], [0, 5, 4]])
    far = sptmc.from_coo(subs, np.array([1.0, 2.0, 3.0, 4.0]))
    with raises(MemoryError, "not enough memory: GCP rank 2 needs"):
        sptmc.gcp(far, 2)
    with raises(MemoryError, "not enough memory: GCP rank 2 needs"):
        sptmc.gcp(far, 2, method="lbfgs")
    with raises(MemoryError, "not enough memory: completion rank 1 needs .*; at rank 1 already"):
        sptmc.complete(far, 1, split=(0.5, 0.25, 0.25))


def test_a_model_too_large_to_return_is_refused_before_the_run():
    """The float64 arrays a model is returned in are part of the run's memory plan: a
    model that fits the run but not its copy for Python is refused up front, never an
    allocation failure that aborts the interpreter after the run."""
    # Two modes of 2^32 rows: the run is on their used rows (renumbered), the model
    # handed back on all of them (64 GiB of float64 at rank 1).
    subs = np.array([[0, 0, 0], [1, 2**32 - 1, 2**32 - 1]])
    long = sptmc.from_coo(subs, np.array([1.0, 2.0]), shape=(2, 2**32, 2**32))
    for run in (
        lambda: sptmc.cp_als(long, 1, iters=1),
        lambda: sptmc.cp_apr(long, 1, iters=1),
    ):
        with raises(MemoryError, "the largest part is the model returned as float64 arrays"):
            run()


def test_gcp_counts_its_rank_squared_grams():
    """GCP's model norm holds R x R Gram matrices: a rank whose Grams cannot fit is
    refused by the plan, not an abort."""
    subs, vals = random_coo(SHAPE, 200, seed=3)
    X = sptmc.from_coo(subs, np.round(vals * 4) + 1, SHAPE)
    for method in ("sgd", "lbfgs"):
        with raises(MemoryError, r"the largest part is the model's Gram matrices \(1000000 ×"):
            sptmc.gcp(X, 10**6, method=method)


def test_completion_ranks_beyond_any_machine_are_refused():
    subs, vals = random_coo(SHAPE, 200, seed=4)
    X = sptmc.from_coo(subs, vals, SHAPE)
    for rank in (2**40, 2**62):
        with raises(ValueError, f"completion rank {rank} overflows"):
            sptmc.complete(X, rank)


def test_factors_holding_inf_or_past_f32_are_named():
    """An inf factor entry is named as NaN is; a finite float64 past f32's range is
    refused before it would turn into inf unseen."""
    subs, vals = random_coo(SHAPE, 200, seed=5)
    X = sptmc.from_coo(subs, vals, SHAPE)
    base = [np.ones((d, 3)) for d in SHAPE]
    for op in ("mttkrp", "ttmc"):
        f = [m.copy() for m in base]
        f[1][2, 1] = np.inf
        with raises(ValueError, r"factor 1 holds inf at \(2, 1\)"):
            getattr(X, op)(f, 0)
        for big in (1e39, -1e300):
            f = [m.copy() for m in base]
            f[2][4, 0] = big
            with raises(ValueError, r"holds -?1e(39|300) at \(4, 0\), past the f32 range"):
                getattr(X, op)(f, 0)
