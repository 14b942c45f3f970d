#!/usr/bin/env python3
"""Time pyttb's all-mode MTTKRP on a FROSTT .tns(.gz) file for the side-by-side
comparison (scripts/compare_splatt.py; its CP-ALS side is scripts/peer_cp_time.py).
Prints one JSON object: {"rank", "seconds" (median of reps), "runs"}.

  peer_pyttb_time.py FILE --rank 32 [--reps 3]
"""
import argparse
import json
import statistics
import time

import numpy as np

from peer_cp_time import read_tns


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("file")
    ap.add_argument("--rank", type=int, required=True)
    ap.add_argument("--reps", type=int, default=3)
    a = ap.parse_args()
    x = read_tns(a.file)
    rng = np.random.default_rng(1)
    u = [rng.random((n, a.rank)) for n in x.shape]
    runs = []
    for _ in range(a.reps):
        t = time.perf_counter()
        for n in range(x.ndims):
            x.mttkrp(u, n)
        runs.append(time.perf_counter() - t)
    print(json.dumps({"rank": a.rank, "seconds": statistics.median(runs), "runs": runs}))


if __name__ == "__main__":
    main()
