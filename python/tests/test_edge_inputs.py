"""Inputs at the edges of what the package takes: GCP's method options under the
argument rules, empty and masked arrays, duplicates summing past f64, initial factors
that are not factors, out-of-range predictions, inconsistent model folders, empty
tensors, and where a warning from the extension points."""

from __future__ import annotations

import json
import os
import warnings
from types import SimpleNamespace

import numpy as np
import pytest
import sptmc

from conftest import pyttb


@pytest.fixture(scope="module")
def small():
    rng = np.random.default_rng(0)
    subs = np.unique(np.stack([rng.integers(0, k, 200) for k in (8, 7, 6)], 1), axis=0)[:80]
    return sptmc.from_coo(subs, rng.integers(1, 5, len(subs)).astype(float), shape=(8, 7, 6))


@pytest.fixture(scope="module")
def completion():
    rng = np.random.default_rng(0)
    subs = np.unique(np.stack([rng.integers(0, k, 3000) for k in (30, 25, 5)], 1), axis=0)
    subs = subs[:1500]
    X = sptmc.from_coo(subs, rng.integers(1, 6, len(subs)).astype(float), shape=(30, 25, 5))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return sptmc.complete(X, 3, epochs=3, lambda_=0.1)


def empty() -> sptmc.Tensor:
    return sptmc.from_coo(np.zeros((0, 3), dtype=int), np.zeros(0), shape=(3, 4, 5))


# GCP's options follow the rules rank and seed follow.


@pytest.mark.parametrize(
    "option, value, error, words",
    [
        ("epochs", True, sptmc.ArgumentTypeError, "epochs must be an integer"),
        ("epochs", 2.0, sptmc.ArgumentTypeError, "epochs must be an integer"),
        ("epochs", 2.5, sptmc.ArgumentTypeError, "epochs must be an integer"),
        ("epochs", None, sptmc.ArgumentTypeError, "epochs must be an integer"),
        ("epochs", 2**64, sptmc.ArgumentOverflowError, "epochs is 18446744073709551616"),
        ("epoch_iters", np.True_, sptmc.ArgumentTypeError, "epoch_iters must be an integer"),
        ("max_fails", 1.0, sptmc.ArgumentTypeError, "max_fails must be an integer"),
        ("grad_zeros", -(2**70), sptmc.ArgumentOverflowError, "grad_zeros is"),
        ("max_iters", True, sptmc.ArgumentTypeError, "max_iters must be an integer"),
        ("rate", True, sptmc.ArgumentTypeError, "rate must be a number"),
        ("rate", "0.01", sptmc.ArgumentTypeError, "rate must be a number"),
        ("decay", None, sptmc.ArgumentTypeError, "decay must be a number"),
        ("dense_limit", True, sptmc.ArgumentTypeError, "dense_limit must be a number"),
    ],
)
def test_gcp_options_follow_the_argument_rules(small, option, value, error, words):
    with pytest.raises(error, match=words):
        sptmc.gcp(small, 2, **{option: value})


def test_gcp_options_of_the_right_types_are_used(small):
    # A numpy integer and an int for a number are fine, and reach the run.
    r = sptmc.gcp(small, 2, epochs=np.int64(3), epoch_iters=5, rate=np.float32(0.01), decay=1)
    assert r.iterations == 3
    with pytest.raises(sptmc.InputError, match="gcp has no option"):
        sptmc.gcp(small, 2, epoch=3)


# Empty pyttb sptensors.


def test_an_empty_pyttb_sptensor_is_a_tensor_without_nonzeros():
    ttb = pyttb()
    S = ttb.sptensor(shape=(3, 4, 5))
    for make in (sptmc.from_pyttb, sptmc.tensor):
        X = make(S)
        assert (X.shape, X.nnz) == ((3, 4, 5), 0)
    assert sptmc.from_pyttb(S).to_pyttb().shape == (3, 4, 5)


@pytest.mark.parametrize(
    "subs, vals",
    [
        (np.zeros((1, 0), dtype=np.int64), np.zeros((1, 0))),  # pyttb's empty arrays
        (np.zeros((0, 3), dtype=np.int64), np.zeros((0, 1))),
        (np.zeros((0, 3), dtype=np.int64), np.zeros(0)),
    ],
)
def test_empty_subs_and_vals_of_either_layout_are_no_entries(subs, vals):
    like = SimpleNamespace(subs=subs, vals=vals, shape=(3, 4, 5))
    for make in (sptmc.from_pyttb, sptmc.tensor):
        X = make(like)
        assert (X.shape, X.nnz) == ((3, 4, 5), 0)


def test_empty_vals_with_entries_in_subs_are_still_refused():
    like = SimpleNamespace(subs=np.array([[0, 1, 2]]), vals=np.zeros((1, 0)), shape=(3, 4, 5))
    with pytest.raises(sptmc.InputError, match="vals must be 1-D"):
        sptmc.from_pyttb(like)


# Duplicates whose sum is past f64.


@pytest.mark.parametrize("base", [0, 1])
def test_duplicates_summing_past_f64_are_refused_by_their_coordinates(base):
    subs = np.array([[1, 1, 1], [0, 2, 1], [1, 1, 1], [2, 2, 2]]) + base
    with pytest.raises(sptmc.InputError, match=rf"\[{1 + base}, {1 + base}, {1 + base}\] "
                       rf"\({base}-based\) sum to inf"):
        sptmc.from_coo(subs, np.array([1e308, 5.0, 1e308, 4.0]), index_base=base)
    # Those that cancel, or stay below f64's largest, are summed as before.
    X = sptmc.from_coo(subs, np.array([1e308, 5.0, -1e308, 4.0]), index_base=base)
    assert (X.nnz, X.duplicates_summed) == (3, 1)


def test_a_tns_file_whose_duplicates_sum_past_f64_names_the_file_and_coordinates(tmp_path):
    p = tmp_path / "inf.tns"
    p.write_text("1 1 1 1e308\n2 2 2 1.0\n1 1 1 1e308\n")
    with pytest.raises(sptmc.InputError, match=r"inf\.tns: .*\[1, 1, 1\] \(1-based\) sum to inf"):
        sptmc.read(p, cache=False)


# Initial factors that are not a sequence of arrays, or a start that cannot move.


@pytest.mark.parametrize("init, kind", [("random", "str"), ({"a": 1}, "dict"), (3, "int")])
@pytest.mark.parametrize("fit", ["cp_als", "gcp"])
def test_init_that_is_not_a_sequence_of_arrays_says_so(small, init, kind, fit):
    with pytest.raises(sptmc.InputError, match=f"init must be a sequence of arrays.*got an? {kind}"):
        getattr(sptmc, fit)(small, 2, init=init)


def test_gcp_refuses_an_all_zero_start_as_cp_als_does(small):
    zeros = [np.zeros((k, 2)) for k in small.shape]
    with pytest.raises(sptmc.InputError, match="all zero"):
        sptmc.cp_als(small, 2, init=zeros)
    with pytest.raises(sptmc.InputError, match="modes 0 and 1 are all zero"):
        sptmc.gcp(small, 2, epochs=3, init=zeros)


def test_a_nan_in_gcps_init_is_a_non_finite_value_not_an_option(small):
    init = [np.ones((k, 2)) for k in small.shape]
    init[2][1, 0] = np.nan
    with pytest.raises(sptmc.InputError) as e:
        sptmc.gcp(small, 2, epochs=3, init=init)
    assert str(e.value) == "non-finite value: initial factor of mode 2 holds NaN"


# Predictions at coordinates beyond the model.


@pytest.mark.parametrize("index", [2**64 - 1, 2**63, 30])
def test_predict_names_the_index_passed(completion, index):
    coords = np.array([[0, 0, 0], [3, 2, 1], [index, 0, 0]], dtype=np.uint64)
    with pytest.raises(sptmc.InputError) as e:
        completion.predict(coords)
    assert str(e.value) == (
        f"coords[2] index {index} in mode 0 is beyond the model's extent 30 (indices are 0-based)"
    )


def test_predict_out_of_range_words_it_without_invalid_option(completion):
    with pytest.raises(sptmc.InputError) as e:
        completion.predict([[1, 26, 1]], index_base=1)
    assert "invalid option" not in str(e.value)
    assert "index 26 in mode 1 is beyond the model's extent 25 (indices are 1-based)" in str(e.value)
    assert completion.predict([[1, 25, 1]], index_base=1).shape == (1,)
    # The extension's own check, past the package's, says the same without the prefix.
    with pytest.raises(sptmc.InputError) as e:
        completion._raw.predict(np.array([[0, 25, 0]], dtype=np.int64))
    assert str(e.value).startswith("coords[0] index 25 in mode 1 is outside 0..25")
    # In range: predicted.
    assert completion.predict([[29, 24, 4]]).shape == (1,)


# A model folder whose model.json disagrees with its factor files.


def test_load_completion_refuses_a_rank_that_disagrees_with_the_factors(completion, tmp_path):
    folder = tmp_path / "m"
    completion.save(folder)
    assert sptmc.load_completion(folder).rank == 3
    summary = json.loads((folder / "model.json").read_text())
    for rank in (7, "3", None):
        summary["rank"] = rank
        (folder / "model.json").write_text(json.dumps(summary))
        with pytest.raises(sptmc.FormatError, match=r"model\.json: rank is .*factor files have 3"):
            sptmc.load_completion(folder)
        with pytest.raises(sptmc.FormatError) as e:
            sptmc.load_completion(folder)
        assert str(folder / "model.json") in str(e.value)


# Empty tensors.


def test_an_empty_tensors_norm_is_positive_zero():
    n = empty().norm()
    assert n == 0.0 and np.copysign(1.0, n) == 1.0


@pytest.mark.parametrize("fit", ["cp_als", "tucker_hooi", "cp_apr"])
def test_every_model_says_an_empty_tensor_has_no_nonzeros(fit):
    with pytest.raises(sptmc.InputError, match="the tensor has no nonzeros"):
        getattr(sptmc, fit)(empty(), 1)


# Masked arrays.


def test_masked_values_are_refused_not_unmasked():
    subs = np.array([[0, 0], [1, 1], [2, 2]])
    vals = np.ma.array([1.0, 2.0, 3.0], mask=[0, 1, 0])
    with pytest.raises(sptmc.InputError, match="vals: masked arrays are not supported"):
        sptmc.from_coo(subs, vals, modes_first=False)
    # No mask set: refused the same, by type.
    with pytest.raises(sptmc.InputError, match="masked arrays are not supported"):
        sptmc.from_coo(subs, np.ma.array([1.0, 2.0, 3.0]), modes_first=False)
    # What the message suggests works.
    X = sptmc.from_coo(subs, vals.filled(0.0), modes_first=False)
    assert X.to_coo()[1].tolist() == [1.0, 0.0, 3.0]


def test_masked_subs_are_refused_in_every_layout():
    vals = np.array([1.0, 2.0, 3.0])
    subs = np.ma.array([[0, 0], [1, 1], [2, 2]], mask=[[0, 0], [1, 0], [0, 0]])
    with pytest.raises(sptmc.InputError, match="subs: masked arrays are not supported"):
        sptmc.from_coo(subs, vals, modes_first=False)
    cols = (np.ma.array([0, 1, 2], mask=[0, 1, 0]), np.array([0, 1, 2]))
    with pytest.raises(sptmc.InputError, match=r"subs\[0\]: masked arrays are not supported"):
        sptmc.from_coo(cols, vals)
    with pytest.raises(sptmc.InputError, match="subs.*masked arrays are not supported"):
        sptmc.from_pyttb(SimpleNamespace(subs=subs, vals=vals, shape=(3, 3)))


def test_masked_coords_and_init_are_refused(completion, small):
    with pytest.raises(sptmc.InputError, match="coords: masked arrays are not supported"):
        completion.predict(np.ma.array([[0, 0, 0]], mask=[[0, 1, 0]]))
    init = [np.ones((k, 2)) for k in small.shape]
    init[1] = np.ma.array(init[1])
    with pytest.raises(sptmc.InputError, match=r"init\[1\]: masked arrays are not supported"):
        sptmc.cp_als(small, 2, init=init)


# Warnings from the extension point at the caller.


def test_a_warning_from_the_extension_points_at_the_callers_line(tmp_path):
    p = tmp_path / "tiny.tns"
    p.write_text("1 1 1 1e-400\n2 2 2 2.0\n")
    for read in (lambda: sptmc.read(p, cache=False), lambda: sptmc.tensor(str(p))):
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            read()
        assert [w.category for w in caught] == [UserWarning]
        assert "below the smallest f64" in str(caught[0].message)
        assert os.path.samefile(caught[0].filename, __file__), caught[0].filename
