#!/usr/bin/env python3
"""Time pyttb's cp_als per iteration on a FROSTT .tns(.gz) file, for the side-by-side
CP-ALS comparison (scripts/compare-cp.sh). Prints one JSON object:
{"file", "rank", "iters", "seconds", "seconds_per_iter", "fit"}.

  peer_cp_time.py FILE --rank 16 --iters 20
"""
import argparse, gzip, json, time

import numpy as np
import pyttb as ttb


def read_tns(path):
    opener = gzip.open if open(path, "rb").read(2) == b"\x1f\x8b" else open
    with opener(path, "rt") as f:
        a = np.loadtxt(f, comments="#")
    subs = a[:, :-1].astype(np.int64) - 1
    shape = tuple(int(x) for x in subs.max(axis=0) + 1)
    return ttb.sptensor(subs, a[:, -1:], shape)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("file")
    ap.add_argument("--rank", type=int, default=16)
    ap.add_argument("--iters", type=int, default=20)
    a = ap.parse_args()
    x = read_tns(a.file)
    np.random.seed(1)
    t = time.perf_counter()
    m, _, info = ttb.cp_als(x, a.rank, stoptol=0.0, maxiters=a.iters, printitn=0)
    s = time.perf_counter() - t
    print(json.dumps({"file": a.file, "rank": a.rank, "iters": info["iters"] + 1 if "iters" in info else a.iters,
                      "seconds": s, "seconds_per_iter": s / a.iters, "fit": float(info.get("fit", float("nan")))}))


if __name__ == "__main__":
    main()
