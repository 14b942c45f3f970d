#!/usr/bin/env python3
"""Run pyttb's gcp_opt with its L-BFGS-B optimizer (scipy's) from given initial
factors on a small tensor, made dense; print JSON.

The peer of sptmc's full-gradient GCP (`sptmc gcp --method lbfgs`,
tests/integration/peer_pyttb_gcp.rs): gcp_opt first rescales the initial factors
(ktensor.normalize("all"): unit columns, each component's weight spread evenly over
the modes), so this script runs gcp_opt with pyttb's defaults (scipy's m=10,
pgtol=1e-5, factr=1e7, at most 1000 iterations) and then writes the factors it
actually started from (gcp_opt's M0) into --start, for sptmc to start from the same
point.

Output (stdout), one JSON object:
  {"final_f": gcp_opt's final loss, "initial_f": the loss at the start,
   "nit": iterations, "funcalls": loss and gradient evaluations,
   "task": scipy's stopping message, "seconds": wall time of gcp_opt}

Example:
  python3 scripts/pyttb_gcp_opt.py slice.tns --shape 60,100,31 --loss poisson \
      --init init/ --start start/
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import pyttb as ttb  # noqa: E402
from pyttb.gcp.fg_setup import setup  # noqa: E402
from pyttb.gcp.handles import Objectives  # noqa: E402
from pyttb.gcp.optimizers import LBFGSB  # noqa: E402
from pyttb_check import read_factors  # noqa: E402

OBJECTIVES = {
    "gaussian": Objectives.GAUSSIAN,
    "poisson": Objectives.POISSON,
    "bernoulli-odds": Objectives.BERNOULLI_ODDS,
    "bernoulli-logit": Objectives.BERNOULLI_LOGIT,
    "gamma": Objectives.GAMMA,
    "rayleigh": Objectives.RAYLEIGH,
}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("tns", help="1-based .tns file")
    p.add_argument("--shape", required=True, help="extents, comma-separated")
    p.add_argument("--loss", required=True, choices=sorted(OBJECTIVES))
    p.add_argument("--init", required=True, help="folder of factor-<m>.txt")
    p.add_argument("--start", required=True, help="folder to write the start into")
    p.add_argument("--factr", type=float, default=1e7, help="scipy's factr (pyttb: 1e7)")
    p.add_argument("--pgtol", type=float, default=None, help="scipy's pgtol (default 1e-5)")
    p.add_argument("--maxiter", type=int, default=1000, help="scipy's maxiter (pyttb: 1000)")
    a = p.parse_args()
    shape = tuple(int(s) for s in a.shape.split(","))
    rows = np.loadtxt(a.tns, dtype=np.float64, ndmin=2, comments="#")
    full = np.zeros(shape)
    full[tuple((rows[:, :-1].astype(np.int64) - 1).T)] = rows[:, -1]
    X = ttb.tensor(full)
    init = ttb.ktensor([f.copy() for f in read_factors(a.init)])
    t = time.perf_counter()
    _, M0, info = ttb.gcp_opt(
        X, init.ncomponents, objective=OBJECTIVES[a.loss], optimizer=LBFGSB(factr=a.factr, pgtol=a.pgtol, maxiter=a.maxiter), init=init,
        printitn=0,
    )
    seconds = time.perf_counter() - t
    # M0 is the start after gcp_opt's normalization (its optimizer works on a copy);
    # the weights are 1 after normalize("all").
    if not np.all(M0.weights == 1.0):
        sys.exit(f"gcp_opt's start has weights {M0.weights}, not ones")
    Path(a.start).mkdir(parents=True, exist_ok=True)
    for m, f in enumerate(M0.factor_matrices):
        np.savetxt(Path(a.start) / f"factor-{m}.txt", f, fmt="%.17g")
    # The loss at the start, by gcp_opt's own handles.
    fh, _, _ = setup(OBJECTIVES[a.loss], X)
    initial = float(np.sum(fh(X.data, M0.full().data)))
    task = info.get("task", "")
    print(json.dumps({
        "final_f": float(info["final_f"]),
        "initial_f": initial,
        "nit": int(info.get("nit", -1)),
        "funcalls": int(info.get("funcalls", -1)),
        "task": task.decode() if isinstance(task, bytes) else str(task),
        "seconds": seconds,
    }))


if __name__ == "__main__":
    main()
