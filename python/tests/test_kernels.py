"""MTTKRP and TTMc against an FP64 numpy reference, on generated tensors of orders 2
to 4 and on a shared data set."""

from __future__ import annotations

import numpy as np
import pytest
import sptmc

from conftest import random_coo, shared_file


def ref_mttkrp(subs, vals, shape, factors, mode):
    """``M[i, r] = sum x * prod_{m != mode} F_m[i_m, r]`` in float64."""
    rank = next(f.shape[1] for m, f in enumerate(factors) if m != mode)
    prod = np.repeat(vals[:, None].astype(np.float64), rank, axis=1)
    for m, f in enumerate(factors):
        if m != mode:
            prod *= np.asarray(f, dtype=np.float64)[subs[:, m]]
    out = np.zeros((shape[mode], rank))
    np.add.at(out, subs[:, mode], prod)
    return out


def ref_ttmc(subs, vals, shape, factors, mode):
    """``Y[i, (r_a, r_b, ...)] = sum x * prod_{m != mode} F_m[i_m, r_m]``, the other
    modes' ranks in increasing mode order, the last fastest, in float64."""
    prod = vals[:, None].astype(np.float64)
    for m, f in enumerate(factors):
        if m != mode:
            rows = np.asarray(f, dtype=np.float64)[subs[:, m]]
            prod = (prod[:, :, None] * rows[:, None, :]).reshape(len(vals), -1)
    out = np.zeros((shape[mode], prod.shape[1]))
    np.add.at(out, subs[:, mode], prod)
    return out


def smape_percent(want, got):
    want, got = np.asarray(want, np.float64), np.asarray(got, np.float64)
    den = np.abs(want) + np.abs(got)
    terms = np.divide(np.abs(want - got), den, out=np.zeros_like(den), where=den > 0)
    return 100.0 * terms.mean()


def rel_frobenius(want, got):
    return np.linalg.norm(np.asarray(got, np.float64) - want) / np.linalg.norm(want)


CASES = [
    ((50, 40), 600, 5),
    ((30, 20, 10), 2000, 8),
    # Dense enough that some 16^3 tiles are dense (HLS-D) at the CPU thresholds.
    ((32, 32, 32), 20000, 6),
    ((9, 8, 7, 6), 1500, 3),
]


@pytest.mark.parametrize("shape,nnz,rank", CASES)
def test_kernels_match_the_fp64_reference(shape, nnz, rank):
    subs, vals = random_coo(shape, nnz, seed=nnz)
    X = sptmc.from_coo(subs, vals, shape)
    rng = np.random.default_rng(1)
    factors = [rng.random((d, rank)) for d in shape]
    small = [rng.random((d, min(rank, 3))) for d in shape]
    for mode in range(len(shape)):
        got = X.mttkrp(factors, mode)
        assert got.dtype == np.float32 and got.shape == (shape[mode], rank)
        want = ref_mttkrp(subs, vals, shape, factors, mode)
        # Integer values are exact in fp16: only f32 arithmetic is left.
        assert rel_frobenius(want, got) < 1e-5
        got = X.ttmc(small, mode)
        want = ref_ttmc(subs, vals, shape, small, mode)
        assert got.shape == want.shape
        assert rel_frobenius(want, got) < 1e-5


def test_dense_tiles_are_exercised():
    subs, vals = random_coo((32, 32, 32), 20000, seed=20000)
    info = sptmc.from_coo(subs, vals).info(threshold=8)
    assert info["hls"]["dense_tiles"] > 0
    assert 0 < info["dense_share"] <= 1


def test_real_values_within_the_accuracy_contract():
    shape = (40, 30, 20)
    subs, vals = random_coo(shape, 5000, seed=9, integer=False)
    X = sptmc.from_coo(subs, vals, shape)
    factors = [np.random.default_rng(m).random((d, 8)) for m, d in enumerate(shape)]
    for mode in range(3):
        want = ref_mttkrp(subs, vals, shape, factors, mode)
        assert smape_percent(want, X.mttkrp(factors, mode)) <= 0.1


def test_factor_dtypes_layouts_and_the_ignored_target():
    shape = (20, 15, 10)
    subs, vals = random_coo(shape, 600, seed=2)
    X = sptmc.from_coo(subs, vals, shape)
    f = [np.random.default_rng(m).random((d, 4)) for m, d in enumerate(shape)]
    want = X.mttkrp(f, 0)
    np.testing.assert_array_equal(X.mttkrp([None, f[1], f[2]], 0), want)
    np.testing.assert_array_equal(X.mttkrp([np.zeros((0, 0)), f[1], f[2]], 0), want)
    as32 = [a.astype(np.float32) for a in f]
    np.testing.assert_array_equal(X.mttkrp(as32, 0), want)
    fortran = [np.asfortranarray(a) for a in f]
    np.testing.assert_array_equal(X.mttkrp(fortran, 0), want)
    lists = [a.tolist() for a in f]
    np.testing.assert_array_equal(X.mttkrp(lists, 0), want)


def test_one_thread_and_two_agree():
    shape = (30, 20, 10)
    subs, vals = random_coo(shape, 2000, seed=4)
    X = sptmc.from_coo(subs, vals, shape)
    f = [np.random.default_rng(m).random((d, 8)) for m, d in enumerate(shape)]
    for mode in range(3):
        a = X.mttkrp(f, mode, threads=1, backend="cpu")
        b = X.mttkrp(f, mode, threads=2, backend="cpu")
        np.testing.assert_allclose(a, b, rtol=1e-5)


def test_shared_tensor_matches_the_reference():
    X = sptmc.read(shared_file("movielens-100k.tns.gz"))
    subs, vals = X.to_coo()
    assert X.nnz == 100_000
    rng = np.random.default_rng(7)
    f32 = [rng.random((d, 16)) for d in X.shape]
    f8 = [rng.random((d, 8)) for d in X.shape]
    for mode in range(X.ndim):
        want = ref_mttkrp(subs, vals, X.shape, f32, mode)
        got = X.mttkrp(f32, mode)
        assert smape_percent(want, got) <= 0.1
        assert rel_frobenius(want, got) < 1e-5
        want = ref_ttmc(subs, vals, X.shape, f8, mode)
        got = X.ttmc(f8, mode)
        assert smape_percent(want, got) <= 0.1
        assert rel_frobenius(want, got) < 1e-5
