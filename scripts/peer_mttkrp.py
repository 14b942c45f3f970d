#!/usr/bin/env python3
"""pyttb's sparse MTTKRP on every mode of a FROSTT .tns(.gz) file, as a peer for sptmc.

The factors come from sptmc (``--factors DIR`` holds ``factor-<m>.txt``, one text
matrix per mode, loadable with ``numpy.loadtxt``), so both sides compute on the same
numbers. The tensor's shape is taken from the factors' row counts (the .tns file has no
header). Writes into ``--out DIR``:

- ``mttkrp-<m>.npy``: pyttb's result for mode m (float64, C order);
- ``timings.json``: seconds of every repetition of the all-mode loop, their median and
  minimum, per-mode medians, load time, and the pyttb/numpy versions.

Timing covers ``X.mttkrp(U, n)`` for every mode n, nothing else (no file I/O), median
of ``--reps`` repetitions.

Usage: peer_mttkrp.py FILE.tns[.gz] --rank R --seed S --factors DIR --out DIR [--reps N]
"""

import argparse
import gzip
import json
import statistics
import sys
import time
from pathlib import Path

import numpy as np
import pyttb as ttb


def read_tns(path: Path, order: int) -> tuple[np.ndarray, np.ndarray]:
    """1-based indices then the value, one nonzero per line; '#' lines are comments."""
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt") as f:
        lines = [ln for ln in f if ln.strip() and not ln.lstrip().startswith("#")]
    table = np.array(" ".join(lines).split(), dtype=np.float64).reshape(-1, order + 1)
    subs = table[:, :order].astype(np.int64) - 1
    vals = table[:, order:].copy()
    return subs, vals


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("tensor", type=Path)
    ap.add_argument("--rank", type=int, required=True)
    ap.add_argument("--seed", type=int, required=True, help="recorded only: sptmc drew the factors")
    ap.add_argument("--factors", type=Path, required=True)
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--reps", type=int, default=3)
    args = ap.parse_args()

    files = sorted(args.factors.glob("factor-*.txt"), key=lambda p: int(p.stem.split("-")[1]))
    if not files:
        print(f"no factor-<m>.txt files in {args.factors}", file=sys.stderr)
        return 2
    U = [np.loadtxt(p, dtype=np.float64, ndmin=2) for p in files]
    for m, u in enumerate(U):
        if u.shape[1] != args.rank:
            print(f"factor {m} has {u.shape[1]} columns, expected rank {args.rank}", file=sys.stderr)
            return 2
    shape = tuple(u.shape[0] for u in U)

    t0 = time.perf_counter()
    subs, vals = read_tns(args.tensor, len(U))
    X = ttb.sptensor(subs, vals, shape)
    load_s = time.perf_counter() - t0

    totals, per_mode = [], [[] for _ in U]
    results = None
    for _ in range(max(1, args.reps)):
        out = []
        t_all = time.perf_counter()
        for n in range(len(U)):
            t = time.perf_counter()
            out.append(X.mttkrp(U, n))
            per_mode[n].append(time.perf_counter() - t)
        totals.append(time.perf_counter() - t_all)
        results = out

    args.out.mkdir(parents=True, exist_ok=True)
    for n, r in enumerate(results):
        np.save(args.out / f"mttkrp-{n}.npy", np.ascontiguousarray(r, dtype=np.float64))
    report = {
        "tensor": str(args.tensor),
        "shape": list(shape),
        "nnz": int(vals.shape[0]),
        "rank": args.rank,
        "seed": args.seed,
        "reps": len(totals),
        "load_s": load_s,
        "all_modes_s": totals,
        "all_modes_median_s": statistics.median(totals),
        "all_modes_min_s": min(totals),
        "per_mode_median_s": [statistics.median(t) for t in per_mode],
        "pyttb": ttb.__version__,
        "numpy": np.__version__,
    }
    (args.out / "timings.json").write_text(json.dumps(report, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
