#!/usr/bin/env python3
"""Run pyttb's cp_als / tucker_als from given initial factors and print the fits as JSON.

The cross-check against sptmc's CP-ALS and Tucker-HOOI (tests/integration/peer_pyttb.rs): both
sides start from the same factor matrices, written by sptmc, so their fits must agree
iteration by iteration up to floating-point rounding.

Input tensor: a FROSTT .tns file (optionally gzipped): one nonzero per line, 1-based
indices, value last. The shape is the largest index of each mode (as sptmc reads it).

Initial factors: a folder of factor-<m>.txt files, one matrix per mode, as sptmc's
model files (`numpy.loadtxt`-readable, `#` header lines). pyttb ignores the first
mode's matrix (it is solved for first), as sptmc does.

Output (stdout), one JSON object:
  {"nnz": ..., "dims": [...],
   "cp": {"rank": R, "iters": k, "fit": final fit, "fits": [per-iteration fits],
          "seconds": wall time},
   "tucker": {...same with "ranks"}}
Per-iteration fits are parsed from pyttb's progress lines (7 significant digits); the
final "fit" is pyttb's own full-precision value.

Example:
  python3 scripts/pyttb_check.py ../shared/data/movielens-100k.tns.gz \
      --cp-rank 16 --cp-iters 20 --cp-init cp-init/ \
      --tucker-ranks 8 --tucker-iters 3 --tucker-init tucker-init/
"""

from __future__ import annotations

import argparse
import contextlib
import gzip
import io
import json
import re
import sys
import time
from pathlib import Path

import numpy as np
import pyttb as ttb


def read_tns(path: str) -> ttb.sptensor:
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rt") as f:
        rows = [
            line.split()
            for line in f
            if line.strip() and not line.lstrip().startswith("#")
        ]
    if not rows:
        sys.exit(f"{path}: no nonzeros")
    arr = np.array(rows, dtype=np.float64)
    subs = arr[:, :-1].astype(np.int64) - 1
    vals = arr[:, -1:].copy()
    if (subs < 0).any():
        sys.exit(f"{path}: index 0 in a 1-based file")
    shape = tuple(int(s) for s in subs.max(axis=0) + 1)
    # The shared files hold no duplicate coordinates; aggregate anyway so that a file
    # with repeats is summed as sptmc sums it.
    uniq, inverse = np.unique(subs, axis=0, return_inverse=True)
    if len(uniq) != len(subs):
        summed = np.zeros((len(uniq), 1))
        np.add.at(summed, inverse.reshape(-1), vals)
        subs, vals = uniq, summed
    return ttb.sptensor(subs, vals, shape)


def read_factors(folder: str) -> list[np.ndarray]:
    files = sorted(Path(folder).glob("factor-*.txt"), key=lambda p: int(p.stem.split("-")[1]))
    if not files:
        sys.exit(f"no factor-<m>.txt files in {folder}")
    return [np.loadtxt(p, dtype=np.float64, ndmin=2) for p in files]


def run_captured(fn):
    """Runs fn() with stdout captured; returns (result, captured text, seconds)."""
    buf = io.StringIO()
    t = time.perf_counter()
    with contextlib.redirect_stdout(buf):
        res = fn()
    return res, buf.getvalue(), time.perf_counter() - t


def parse_fits(text: str, key: str) -> list[float]:
    pat = re.compile(r"Iter\s+(\d+):\s+" + key + r"\s*=\s*([-+0-9.eE]+)")
    return [float(m.group(2)) for m in pat.finditer(text)]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("tns")
    ap.add_argument("--cp-rank", type=int)
    ap.add_argument("--cp-iters", type=int, default=20)
    ap.add_argument("--cp-init")
    ap.add_argument("--tucker-ranks", type=int, nargs="+")
    ap.add_argument("--tucker-iters", type=int, default=3)
    ap.add_argument("--tucker-init")
    args = ap.parse_args()

    x = read_tns(args.tns)
    out: dict = {"nnz": int(x.nnz), "dims": list(x.shape)}

    if args.cp_rank:
        if not args.cp_init:
            sys.exit("--cp-rank needs --cp-init")
        init = ttb.ktensor(read_factors(args.cp_init))
        (_, _, info), text, secs = run_captured(
            lambda: ttb.cp_als(
                x,
                args.cp_rank,
                stoptol=0.0,
                maxiters=args.cp_iters,
                init=init,
                printitn=1,
            )
        )
        out["cp"] = {
            "rank": args.cp_rank,
            "iters": int(info["iters"]) + 1,
            "fit": float(info["fit"]),
            "fits": parse_fits(text, "f"),
            "seconds": secs,
        }

    if args.tucker_ranks:
        if not args.tucker_init:
            sys.exit("--tucker-ranks needs --tucker-init")
        ranks = args.tucker_ranks
        if len(ranks) == 1:
            ranks = ranks * x.ndims
        init = read_factors(args.tucker_init)
        (_, _, info), text, secs = run_captured(
            lambda: ttb.tucker_als(
                x,
                ranks,
                stoptol=0.0,
                maxiters=args.tucker_iters,
                init=init,
                printitn=1,
            )
        )
        out["tucker"] = {
            "ranks": ranks,
            "iters": int(info["iters"]) + 1,
            "fit": float(info["fit"]),
            "fits": parse_fits(text, "fit"),
            "seconds": secs,
        }

    json.dump(out, sys.stdout)
    print()


if __name__ == "__main__":
    main()
