#!/usr/bin/env python3
"""The table of scripts/gpu-run.sh's `gcp` and `dist` steps, from the JSON they wrote.

    python3 scripts/gpu_gcp_dist_table.py OUT_DIR

GCP: per tensor and loss, both backends' final loss estimate, their relative difference
and seconds per epoch. Distributed: per tensor and model, the final fit (CP-ALS) or
log-likelihood (CP-APR) of the single process and of `mpirun -np 1|2` on each backend,
each run's relative difference from the single process on the same backend, and per rank
its nonzeros, peak memory and bytes sent per iteration. A run that wrote no JSON shows
its error line (or the last line of its log). Exits 1 when a number is NaN or a
comparison is missing a side.
"""
import json
import math
import os
import re
import sys


def load(out, name):
    """The JSON of `name` under `out`, or (None, why)."""
    path = os.path.join(out, name)
    try:
        with open(path) as f:
            return json.load(f), ""
    except (OSError, ValueError):
        why = ""
        log = path + ".log"
        if os.path.exists(log):
            lines = [l.strip() for l in open(log, errors="replace") if l.strip()]
            # The program's own error line, else the log's last line.
            said = [l for l in lines if l.startswith("sptmc: error")] or lines[-1:]
            if said:
                why += (": " if why else "") + said[0][:160]
        return None, why or "absent"


def rel(a, b):
    if a is None or b is None:
        return None
    return abs(a - b) / max(abs(b), 1e-300)


def fmt(x, spec=".6e"):
    return "—" if x is None else format(x, spec)


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else "gpu-results"
    names = sorted(os.listdir(out))
    bad = False

    gcp = sorted({m.group(1) for n in names if (m := re.match(r"gcp-(.+)-(cuda|cpu)\.json$", n))})
    if gcp:
        print("GCP-SGD, rank 16, 5 epochs, seed 1: cuda vs cpu")
        print("| tensor-loss | cuda loss | cpu loss | rel. diff | cuda s/epoch | cpu s/epoch | cpu/cuda |")
        print("|---|---|---|---|---|---|---|")
        for case in gcp:
            (c, cwhy), (p, pwhy) = load(out, f"gcp-{case}-cuda.json"), load(out, f"gcp-{case}-cpu.json")
            lc = c and c.get("final_loss")
            lp = p and p.get("final_loss")
            sc = c and c.get("seconds_per_iter")
            sp = p and p.get("seconds_per_iter")
            for v in (lc, lp):
                if v is None or (isinstance(v, float) and math.isnan(v)):
                    bad = True
            ratio = sp / sc if sc and sp else None
            print(f"| {case} | {fmt(lc) if c else cwhy} | {fmt(lp) if p else pwhy} | {fmt(rel(lc, lp), '.2e')} "
                  f"| {fmt(sc, '.3f')} | {fmt(sp, '.3f')} | {fmt(ratio, '.2f')} |")
        print()

    dist = sorted({(m.group(1), m.group(2)) for n in names
                   if (m := re.match(r"dist-(cp-apr|cp)-(.+?)-single-(cuda|cpu)\.json$", n))})
    if dist:
        print("Distributed (20 iterations, seed 1): final fit / log-likelihood, rel. diff from the "
              "single process on the same backend")
        print("| model | tensor | backend | run | value | rel. diff | per rank: nnz, peak MiB, bytes/iter |")
        print("|---|---|---|---|---|---|---|")
        for model, tag in dist:
            key = "final_fit" if model == "cp" else "log_likelihood"
            for b in ("cuda", "cpu"):
                single, swhy = load(out, f"dist-{model}-{tag}-single-{b}.json")
                base = single and single.get(key)
                runs = [("single", single, swhy)]
                for r in ("np1", "np2", "np2-coarse"):
                    name = f"dist-{model}-{tag}-{r}-{b}.json"
                    if name in names:
                        d, why = load(out, name)
                        runs.append((r, d, why))
                for r, d, why in runs:
                    v = d and d.get(key)
                    if d is not None and (v is None or math.isnan(v)):
                        bad = True
                    ranks = ""
                    if d and "distributed" in d:
                        ranks = "; ".join(
                            f"{x['nnz']}, {x['peak_bytes'] / 2**20:.0f}, {x['bytes_per_iter']}"
                            for x in d["distributed"]["per_rank"])
                    diff = rel(v, base) if r != "single" else None
                    print(f"| {model} | {tag} | {b} | {r} | {fmt(v) if d else why} | {fmt(diff, '.2e')} | {ranks} |")
        print()
    if not gcp and not dist:
        print(f"no gcp-*.json or dist-*.json under {out}")
        bad = True
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
