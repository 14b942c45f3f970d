#!/usr/bin/env python3
"""Run pyttb's cp_apr(algorithm="mu") from given initial factors; print JSON.

The peer of sptmc's CP-APR (tests/integration/peer_pyttb_cp_apr.rs, scripts/cp-apr-vs-pyttb.sh):
both sides start from the same factor matrices, written by sptmc (factor-<m>.txt, as
`sptmc cp-apr --out` writes them; the weights start at 1), and run the same
multiplicative updates, so their log-likelihoods must agree iteration by iteration up
to floating-point rounding.

pyttb reports the log-likelihood only at the end. With --trace this script records it
after every outer iteration as well: it wraps ktensor.normalize, which pyttb calls once
per mode at the end of each mode's updates, and after the last mode's call evaluates
pyttb's own tt_loglikelihood on a copy of the model (tt_loglikelihood normalizes its
argument in place). The wrapper changes nothing in pyttb's computation; it only adds
time, so timings are taken without --trace.

Output (stdout), one JSON object:
  {"nnz": ..., "dims": [...], "rank": R, "iters": outer iterations run,
   "log_likelihood": final value (pyttb's output["obj"]),
   "log_likelihoods": [after each iteration, pyttb's tt_loglikelihood] (with --trace),
   "log_likelihoods_floored": [the same with model values below eps counted as eps,
                               as sptmc reports them] (with --trace),
   "kkt_violations": [...], "inner_iters": [...], "n_violations": [...],
   "seconds": wall time of cp_apr, "seconds_per_iter": seconds / iters}

Example:
  python3 scripts/pyttb_cp_apr.py ../shared/data/movielens-100k.tns.gz \
      --rank 16 --iters 20 --init init/ --tol 0 --trace
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import io
import json
import math
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import pyttb as ttb  # noqa: E402
from pyttb_check import read_factors, read_tns  # noqa: E402

# The module, not the function of the same name that pyttb's package exports.
cp_apr_module = importlib.import_module("pyttb.cp_apr")


def finite_or_name(v):
    """v with every non-finite float replaced by str(v) ("-inf", "nan")."""
    if isinstance(v, float) and not math.isfinite(v):
        return str(v)
    if isinstance(v, dict):
        return {k: finite_or_name(x) for k, x in v.items()}
    if isinstance(v, list):
        return [finite_or_name(x) for x in v]
    return v


def floored_loglikelihood(x, model, eps: float) -> float:
    """sum x log max(m, eps) - sum m of the ktensor `model` (m its value; the first sum
    over x's nonzeros, the second over every cell as a product of column sums): the
    log-likelihood as sptmc reports it, where a model value below eps counts as eps
    (pyttb's tt_loglikelihood takes the log unfloored, -inf where m is 0)."""
    rows = np.tile(np.asarray(model.weights, dtype=np.float64), (x.nnz, 1))
    for m, f in enumerate(model.factor_matrices):
        rows *= f[x.subs[:, m], :]
    mu = np.maximum(rows.sum(axis=1), eps)
    data = float(np.sum(x.vals[:, 0] * np.log(mu)))
    total = float(np.sum(np.prod([f.sum(axis=0) for f in model.factor_matrices], axis=0) * model.weights))
    return data - total


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("tns")
    ap.add_argument("--rank", type=int, required=True)
    ap.add_argument("--init", required=True, help="folder of factor-<m>.txt files")
    ap.add_argument("--iters", type=int, default=1000, help="maxiters")
    ap.add_argument("--inner", type=int, default=10, help="maxinneriters")
    ap.add_argument("--tol", type=float, default=1e-4, help="stoptol")
    ap.add_argument("--eps", type=float, default=1e-10, help="epsDivZero")
    ap.add_argument("--trace", action="store_true", help="log-likelihood per iteration")
    args = ap.parse_args()

    x = read_tns(args.tns)
    factors = read_factors(args.init)
    if len(factors) != x.ndims:
        sys.exit(f"{args.init}: {len(factors)} factors for a tensor of order {x.ndims}")
    init = ttb.ktensor(factors)

    traced: list[float] = []
    original = ttb.ktensor.normalize
    last_mode = x.ndims - 1

    floored: list[float] = []

    def normalize_and_trace(self, *a, **kw):
        out = original(self, *a, **kw)
        if kw.get("mode") == last_mode and kw.get("normtype") == 1:
            traced.append(float(cp_apr_module.tt_loglikelihood(x, self.copy())))
            floored.append(floored_loglikelihood(x, self, args.eps))
        return out

    if args.trace:
        ttb.ktensor.normalize = normalize_and_trace
    buf = io.StringIO()
    t = time.perf_counter()
    try:
        with contextlib.redirect_stdout(buf):
            _, _, info = ttb.cp_apr(
                x,
                args.rank,
                algorithm="mu",
                stoptol=args.tol,
                maxiters=args.iters,
                maxinneriters=args.inner,
                epsDivZero=args.eps,
                init=init,
                printitn=1,
            )
    finally:
        ttb.ktensor.normalize = original
    secs = time.perf_counter() - t
    iters = len(info["kktViolations"])
    out = {
        "nnz": int(x.nnz),
        "dims": list(x.shape),
        "rank": args.rank,
        "iters": iters,
        "log_likelihood": float(info["obj"]),
        "kkt_violations": [float(v) for v in info["kktViolations"]],
        "inner_iters": [int(v) for v in info["nInnerIters"]],
        "n_violations": [int(v) for v in info["nViolations"]],
        "seconds": secs,
        "seconds_per_iter": secs / max(iters, 1),
    }
    if args.trace:
        out["log_likelihoods"] = traced
        out["log_likelihoods_floored"] = floored
    # Strict JSON: a non-finite number (pyttb's log-likelihood is -inf when the model is
    # 0 at a nonzero) becomes its name as a string.
    json.dump(finite_or_name(out), sys.stdout, allow_nan=False)
    print()


if __name__ == "__main__":
    main()
