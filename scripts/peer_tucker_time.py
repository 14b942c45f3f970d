#!/usr/bin/env python3
"""Time pyttb's tucker_als per iteration on a FROSTT .tns(.gz) file, for the side-by-side
Tucker comparison (scripts/compare-tucker.sh). Prints one JSON object:
{"file", "ranks", "iters", "seconds", "seconds_per_iter", "fit"}, or, when pyttb cannot
allocate its dense intermediates, {"file", "ranks", "error"}.

  peer_tucker_time.py FILE --ranks 8,8,8 --iters 2
"""
import argparse, json, time

import numpy as np
import pyttb as ttb

from peer_cp_time import read_tns


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("file")
    ap.add_argument("--ranks", required=True)
    ap.add_argument("--iters", type=int, default=2)
    a = ap.parse_args()
    ranks = [int(r) for r in a.ranks.split(",")]
    x = read_tns(a.file)
    np.random.seed(1)
    t = time.perf_counter()
    try:
        _, _, info = ttb.tucker_als(x, ranks, stoptol=0.0, maxiters=a.iters, printitn=0)
    except MemoryError as e:
        print(json.dumps({"file": a.file, "ranks": ranks, "error": f"MemoryError: {e}"}))
        return
    s = time.perf_counter() - t
    print(json.dumps({"file": a.file, "ranks": ranks, "iters": a.iters, "seconds": s,
                      "seconds_per_iter": s / a.iters, "fit": float(info.get("fit", float("nan")))}))


if __name__ == "__main__":
    main()
