#!/usr/bin/env python3
"""Time GenTen's CP-ALS (pygenten, its default MTTKRP method) per iteration on a FROSTT
.tns(.gz) file, for the side-by-side CP-ALS comparison (scripts/compare_floor.py).
Prints one JSON object: {"file", "rank", "iters", "seconds", "seconds_per_iter", "fit"}.

GenTen's own timer ("CP-ALS completed N iterations in T seconds") is read, so reading
the file and building GenTen's permutation arrays are not counted (they are its prepare).
Threads: OMP_NUM_THREADS (set by the caller); OMP_PROC_BIND=false as GenTen's unit
tests run. pygenten aborts in Kokkos' finalization at interpreter exit, after printing:
the run is judged by its output, so this script runs GenTen in a child interpreter.

  peer_genten_cp.py FILE --rank 16 --iters 20
"""
import argparse, json, os, re, subprocess, sys

CHILD = r"""
import sys, gzip, numpy as np, pyttb as ttb, pygenten
path, rank, iters = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
opener = gzip.open if open(path, "rb").read(2) == b"\x1f\x8b" else open
with opener(path, "rb") as f:
    lines = [l for l in f.read().splitlines() if l.strip() and not l.startswith(b"#")]
width = len(lines[0].split())
a = np.array(b" ".join(lines).split(), dtype=np.float64).reshape(-1, width)
subs = a[:, :-1].astype(np.int64) - 1
X = ttb.sptensor(subs, a[:, -1:], tuple(int(s) for s in subs.max(axis=0) + 1))
pygenten.cp_als(X, rank=rank, maxiters=iters, tol=0, timings=True)
sys.stdout.flush()
"""


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("file")
    ap.add_argument("--rank", type=int, default=16)
    ap.add_argument("--iters", type=int, default=20)
    a = ap.parse_args()
    env = dict(os.environ, OMP_PROC_BIND="false")
    p = subprocess.run([sys.executable, "-c", CHILD, a.file, str(a.rank), str(a.iters)],
                       capture_output=True, text=True, env=env)
    m = re.search(r"CP-ALS completed (\d+) iterations in ([0-9.eE+-]+) seconds", p.stdout)
    fit = re.search(r"Final fit =\s*([0-9.eE+-]+)", p.stdout)
    if not m:
        sys.exit(f"no CP-ALS time in GenTen's output for {a.file}:\n{p.stdout[-1500:]}\n{p.stderr[-1500:]}")
    iters, seconds = int(m.group(1)), float(m.group(2))
    print(json.dumps({"file": a.file, "rank": a.rank, "iters": iters, "seconds": seconds,
                      "seconds_per_iter": seconds / iters,
                      "fit": float(fit.group(1)) if fit else None}))


if __name__ == "__main__":
    main()
