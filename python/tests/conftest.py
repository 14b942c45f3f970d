"""Helpers shared by the tests: the shared data sets and the peers, found or skipped
as the Rust tests do.

- The shared tensors: ``$SPTMC_DATA_DIR``, else ``shared/data`` beside the repository
  (``../../shared/data`` from this folder's parent). Without them a test is skipped
  with a visible reason; with ``SPTMC_REQUIRE_DATA=1`` (set by CI) it fails instead.
- pyttb: skipped when it cannot be imported; ``SPTMC_REQUIRE_PYTTB=1`` makes that a
  failure.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest

HERE = Path(__file__).resolve().parent
SHARED_FILES = [
    "atp-matches-4d.tns.gz",
    "movielens-100k.tns.gz",
    "movielens-10m-tags-4d.tns.gz",
    "movielens-latest-small-4d.tns.gz",
    "uboot-commitwords-3d.tns.gz",
]


def _missing(require: str, why: str):
    if os.environ.get(require) == "1":
        pytest.fail(f"{require}=1 but {why}")
    pytest.skip(why)


def data_dir() -> Path:
    env = os.environ.get("SPTMC_DATA_DIR")
    return Path(env) if env else HERE.parent.parent.parent / "shared" / "data"


def shared_file(name: str) -> Path:
    """The shared data set ``name``, or a skip (a failure under SPTMC_REQUIRE_DATA=1)."""
    path = data_dir() / name
    if not path.is_file():
        _missing("SPTMC_REQUIRE_DATA", f"the shared data set {path} is absent")
    return path


def pyttb():
    """The pyttb module, or a skip (a failure under SPTMC_REQUIRE_PYTTB=1)."""
    try:
        import pyttb as ttb
    except ImportError as e:
        _missing("SPTMC_REQUIRE_PYTTB", f"pyttb cannot be imported: {e}")
    return ttb


@pytest.fixture(autouse=True)
def _private_cache(tmp_path_factory, monkeypatch):
    """Every test reads through a cache folder of its session, not the user's."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path_factory.getbasetemp() / "cache"))


def random_coo(shape, nnz, seed, *, integer=True):
    """``(subs, vals)``: ``nnz`` distinct random coordinates (nnz x N, int64) of a
    tensor of ``shape`` and their values (small integers, exact in fp16, unless
    ``integer=False``)."""
    rng = np.random.default_rng(seed)
    cells = int(np.prod(shape))
    lin = rng.choice(cells, size=nnz, replace=False)
    subs = np.stack(np.unravel_index(lin, shape), axis=1).astype(np.int64)
    if integer:
        vals = rng.integers(1, 6, size=nnz).astype(np.float64)
    else:
        vals = rng.random(nnz) + 0.1
    return subs, vals
