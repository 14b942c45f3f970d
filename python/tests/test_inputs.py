"""Tensors in: every layout and source gives the same tensor, arrays are read in place,
repeated coordinates are summed and counted."""

from __future__ import annotations

import gzip
import tracemalloc

import numpy as np
import pytest
import sptmc

from conftest import pyttb, random_coo

SHAPE = (30, 20, 10)


@pytest.fixture(scope="module")
def coo():
    return random_coo(SHAPE, 800, seed=3)


def same(a: sptmc.Tensor, b: sptmc.Tensor) -> None:
    assert a.shape == b.shape
    sa, va = a.to_coo()
    sb, vb = b.to_coo()
    np.testing.assert_array_equal(sa, sb)
    np.testing.assert_array_equal(va, vb)


def layouts(subs, vals):
    """The same tensor's coordinates in every layout and dtype from_coo accepts."""
    yield "nnz x N", subs, vals
    yield "N x nnz", np.ascontiguousarray(subs.T), vals
    yield "N x nnz view of nnz x N", subs.T, vals
    yield "Fortran nnz x N", np.asfortranarray(subs), vals
    yield "tuple of modes", tuple(np.ascontiguousarray(subs[:, m]) for m in range(3)), vals
    yield "int32", subs.astype(np.int32), vals
    yield "uint16", subs.astype(np.uint16), vals
    yield "nested lists", subs.tolist(), vals.tolist()
    yield "float32 values", subs, vals.astype(np.float32)
    yield "nnz x 1 values", subs, vals[:, None]
    yield "strided values", subs, np.repeat(vals, 2)[::2]
    # Every other row of a twice-as-long array: a strided view of both.
    big = np.repeat(subs, 2, axis=0)
    yield "strided subs rows", big[::2], vals


def test_every_layout_gives_the_same_tensor_and_results(coo):
    subs, vals = coo
    ref = sptmc.from_coo(subs, vals, SHAPE)
    factors = [np.random.default_rng(m).random((d, 4)) for m, d in enumerate(SHAPE)]
    want = ref.mttkrp(factors, 1)
    for name, s, v in layouts(subs, vals):
        x = sptmc.from_coo(s, v, SHAPE)
        same(ref, x)
        np.testing.assert_array_equal(x.mttkrp(factors, 1), want, err_msg=name)


def test_one_based_coordinates_and_inferred_shape(coo):
    subs, vals = coo
    ref = sptmc.from_coo(subs, vals, SHAPE)
    same(ref, sptmc.from_coo(subs + 1, vals, SHAPE, index_base=1))
    inferred = sptmc.from_coo(subs, vals)
    assert inferred.shape == tuple(int(m) + 1 for m in subs.max(axis=0))


def test_square_subs_need_their_layout_named():
    """Three nonzeros of a 3-way tensor fit both layouts: refused unless
    ``modes_first`` says which, then read that way; a layout named against the array's
    shape is refused too."""
    subs = np.array([[0, 1, 2], [2, 0, 1], [1, 1, 0]])
    vals = np.array([1.0, 2.0, 3.0])
    for shape in (None, (3, 3, 3)):
        with pytest.raises(sptmc.InputError, match="fits both layouts.*modes_first"):
            sptmc.from_coo(subs, vals, shape)
    for first, coords in ((False, subs), (True, subs.T)):
        s, _ = sptmc.from_coo(subs, vals, modes_first=first).to_coo()
        np.testing.assert_array_equal(s, coords[np.lexsort(coords.T[::-1])])
    # A non-square subs needs no name, and a wrong one is refused.
    tall = np.array([[0, 1], [2, 0], [1, 1]])
    inferred = sptmc.from_coo(tall, vals)
    same(inferred, sptmc.from_coo(tall, vals, modes_first=False))
    same(inferred, sptmc.from_coo(tall.T, vals, modes_first=True))
    with pytest.raises(sptmc.InputError, match=r"3 x N \(modes_first=False\)"):
        sptmc.from_coo(tall.T, vals, modes_first=False)
    with pytest.raises(sptmc.ArgumentTypeError, match="modes_first"):
        sptmc.from_coo(tall, vals, modes_first="rows")


def test_duck_typed_objects_and_pyttb_give_the_same_tensor(coo):
    subs, vals = coo
    ref = sptmc.from_coo(subs, vals, SHAPE)

    class PydataLike:  # .coords (N x nnz), .data, .shape
        coords = subs.T
        data = vals
        shape = SHAPE

    class PyttbLike:  # .subs (nnz x N), .vals (nnz x 1), .shape
        subs = coo[0]
        vals = coo[1][:, None]
        shape = SHAPE

    same(ref, sptmc.tensor(PydataLike()))
    same(ref, sptmc.tensor(PyttbLike()))
    assert sptmc.tensor(ref) is ref
    ttb = pyttb()
    X = ttb.sptensor(subs, vals[:, None], SHAPE)
    same(ref, sptmc.from_pyttb(X))
    same(ref, sptmc.tensor(X))
    # And back: the pyttb tensor of ours is the same tensor.
    back = ref.to_pyttb()
    assert tuple(back.shape) == SHAPE
    same(ref, sptmc.from_pyttb(back))


def test_duck_typed_layouts_are_not_guessed_when_nnz_equals_the_order():
    """Three nonzeros of a 3-way tensor: ``coords`` is N x nnz by definition, ``subs``
    nnz x N, although either square array would fit the other layout."""
    s3 = np.array([[0, 1, 2], [3, 0, 1], [1, 2, 0]])
    v3 = np.array([1.0, 2.0, 3.0])
    ref = sptmc.from_coo(s3, v3, (4, 3, 3), modes_first=False)

    class PydataLike:
        coords = s3.T
        data = v3
        shape = (4, 3, 3)

    class PyttbLike:
        subs = np.asfortranarray(s3)
        vals = v3[:, None]
        shape = (4, 3, 3)

    same(ref, sptmc.tensor(PydataLike()))
    same(ref, sptmc.tensor(PyttbLike()))
    same(ref, sptmc.from_pyttb(PyttbLike()))


def test_pydata_sparse_coo():
    sparse = pytest.importorskip("sparse")
    subs, vals = random_coo(SHAPE, 500, seed=4)
    s = sparse.COO(subs.T, vals, shape=SHAPE)
    same(sptmc.from_coo(subs, vals, SHAPE), sptmc.tensor(s))


def test_scipy_sparse_arrays_and_matrices():
    scipy_sparse = pytest.importorskip("scipy.sparse")
    subs, vals = random_coo((40, 25), 300, seed=5)
    ref = sptmc.from_coo(subs, vals, (40, 25))
    coo = scipy_sparse.coo_array((vals, (subs[:, 0], subs[:, 1])), shape=(40, 25))
    same(ref, sptmc.tensor(coo))
    same(ref, sptmc.tensor(coo.tocsr()))
    same(ref, sptmc.tensor(scipy_sparse.coo_matrix(coo)))


def test_duplicates_are_summed_and_counted():
    subs = np.array([[0, 1], [2, 0], [0, 1], [1, 1], [0, 1]])
    vals = np.array([1.0, 2.0, 3.0, 4.0, 5.0])
    x = sptmc.from_coo(subs, vals, (3, 2))
    assert x.nnz == 3
    assert x.duplicates_summed == 2
    s, v = x.to_coo()
    np.testing.assert_array_equal(s, [[0, 1], [1, 1], [2, 0]])
    np.testing.assert_array_equal(v, [9.0, 4.0, 2.0])
    assert x.info()["duplicates_summed"] == 2


def test_read_matches_the_arrays_and_the_cache(tmp_path, coo):
    subs, vals = coo
    path = tmp_path / "t.tns.gz"
    with gzip.open(path, "wt") as f:
        for s, v in zip(subs + 1, vals):
            f.write(" ".join(map(str, s)) + f" {v}\n")
    ref = sptmc.from_coo(subs, vals)
    first = sptmc.read(path)
    again = sptmc.read(str(path))
    plain = sptmc.read(path, cache=False)
    assert "parsed" in first.source and "cache" in again.source
    for x in (first, again, plain):
        same(ref, x)


def test_values_below_the_smallest_double_are_read_as_zero_with_a_warning(tmp_path):
    words = r"2 values below the smallest f64 read as 0 \(the first on line 2\)"
    path = tmp_path / "tiny.tns"
    path.write_text("1 1 1 2.5\n2 2 1 1e-400\n1 2 2 -3E-999\n2 1 2 1\n")
    # Parsed without the cache, parsed into it, and read back from it.
    for kwargs in ({"cache": False}, {}, {}):
        with pytest.warns(UserWarning, match=words):
            x = sptmc.read(path, **kwargs)
        # Kept as stored entries whose value is 0.
        _, v = x.to_coo()
        assert x.nnz == 4 and np.count_nonzero(v) == 2
    assert "cache" in x.source


def test_the_tensor_keeps_its_own_copy(coo):
    subs, vals = coo
    s, v = subs.copy(), vals.copy()
    x = sptmc.from_coo(s, v, SHAPE)
    s[:] = 0
    v[:] = -1.0
    same(sptmc.from_coo(subs, vals, SHAPE), x)


def numpy_peak_during(f) -> int:
    """Bytes numpy allocated (and tracemalloc saw) at the peak of ``f()``, above what
    was allocated before: numpy reports its array buffers to tracemalloc, so a copy of
    an input array shows here, while the tensor's own form (made in Rust) does not."""
    tracemalloc.start()
    try:
        before, _ = tracemalloc.get_traced_memory()
        tracemalloc.reset_peak()
        f()
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    return peak - before


@pytest.mark.parametrize("layout", ["nnz x N", "N x nnz", "N x nnz view"])
def test_no_copy_of_int64_and_float64_inputs(layout):
    subs, vals = random_coo((200, 300, 400), 200_000, seed=6)
    subs = {
        "nnz x N": subs,
        "N x nnz": np.ascontiguousarray(subs.T),
        "N x nnz view": subs.T,
    }[layout]
    nbytes = subs.nbytes  # 4.8 MB: any copy of subs (or of vals, 1.6 MB) shows
    grown = numpy_peak_during(lambda: sptmc.from_coo(subs, vals, (200, 300, 400)))
    assert grown < vals.nbytes // 4, f"{grown} bytes allocated through numpy"
    # The check sees a copy when there is one.
    seen = numpy_peak_during(lambda: np.array(subs, copy=True).sum())
    assert seen >= nbytes


def test_byte_swapped_indices_and_values_read_as_native_ones():
    subs = np.array([[0, 1, 2], [2, 0, 1], [1, 1, 0]])
    vals = np.array([1.5, -2.0, 4.0])
    want = sptmc.from_coo(subs, vals, (3, 3, 3), modes_first=False).to_coo()
    for dt in (">i8", ">u4", ">i2"):
        swapped = (subs.astype(dt), vals.astype(">f8"), (3, 3, 3))
        got = sptmc.from_coo(*swapped, modes_first=False).to_coo()
        np.testing.assert_array_equal(got[0], want[0])
        np.testing.assert_array_equal(got[1], want[1])
        per_mode = tuple(subs.astype(dt)[:, m] for m in range(3))
        got = sptmc.from_coo(per_mode, vals, (3, 3, 3)).to_coo()
        np.testing.assert_array_equal(got[0], want[0])

