#!/usr/bin/env python3
"""Time pyttb on a FROSTT .tns(.gz) file for the side-by-side comparisons
(scripts/compare_splatt.py). Prints one JSON object with "seconds":

  peer_pyttb_time.py mttkrp FILE --rank 32 [--reps 3]   all-mode MTTKRP, median of reps
  peer_pyttb_time.py cp FILE --rank 16 --iters 5        cp_als seconds per iteration
"""
import argparse
import gzip
import json
import statistics
import time

import numpy as np
import pyttb as ttb


def read_tns(path):
    opener = gzip.open if open(path, "rb").read(2) == b"\x1f\x8b" else open
    with opener(path, "rt") as f:
        a = np.loadtxt(f, comments="#", ndmin=2)
    subs = a[:, :-1].astype(np.int64) - 1
    shape = tuple(int(x) for x in subs.max(axis=0) + 1)
    return ttb.sptensor(subs, a[:, -1:], shape)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("what", choices=["mttkrp", "cp"])
    ap.add_argument("file")
    ap.add_argument("--rank", type=int, required=True)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--iters", type=int, default=5)
    a = ap.parse_args()
    x = read_tns(a.file)
    rng = np.random.default_rng(1)
    if a.what == "mttkrp":
        u = [rng.random((n, a.rank)) for n in x.shape]
        runs = []
        for _ in range(a.reps):
            t = time.perf_counter()
            for n in range(x.ndims):
                x.mttkrp(u, n)
            runs.append(time.perf_counter() - t)
        print(json.dumps({"what": "mttkrp", "rank": a.rank, "seconds": statistics.median(runs),
                          "runs": runs}))
    else:
        np.random.seed(1)
        t = time.perf_counter()
        ttb.cp_als(x, a.rank, stoptol=0.0, maxiters=a.iters, printitn=0)
        s = time.perf_counter() - t
        print(json.dumps({"what": "cp", "rank": a.rank, "iters": a.iters, "seconds": s / a.iters}))


if __name__ == "__main__":
    main()
