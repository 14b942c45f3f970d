#!/usr/bin/env python3
"""sptmc's CPU engine beside SPLATT (and optionally pyttb), side by side in one run.

For every plain FROSTT .tns file given, both sides run alternately for ROUNDS rounds,
2 threads each, and each side's median over rounds is compared:

- all-mode sparse MTTKRP at rank 32: `sptmc bench FILE --ranks 32 --no-ttmc` (median of
  the per-mode medians summed) against `splatt bench FILE -a csf -r 32 -t 2 -i ITS`
  (median of its per-iteration all-mode times);
- CP-ALS at rank 16, seconds per iteration over a whole run (first iteration included
  on both sides): `sptmc cp FILE --rank 16 --tol 0 --iters N` (`seconds / N`) against
  `splatt cpd FILE -r 16 --tol=0 -t 2 -i N` (its `CPD` time / N).

SPLATT prints milliseconds: a SPLATT time under 5 ms is marked, and the README says
such a ratio counts in the geometric mean only. With --pyttb PYTHON the same Python
(with pyttb installed) times pyttb's all-mode MTTKRP and cp_als on files up to
--pyttb-max-nnz nonzeros, in the same alternation.

Writes OUT/results.json and OUT/README.md (machine, commits, commands, table).

  scripts/compare_splatt.py --splatt PATH/TO/splatt --sptmc target/release/sptmc \
      [--pyttb .venv/bin/python] [--rounds 3] --out bench/results/DATE-cpu-splatt FILES...
"""
import argparse
import json
import math
import os
import platform
import re
import statistics
import subprocess
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

HERE = Path(__file__).resolve().parent
ENV = dict(os.environ, RAYON_NUM_THREADS="2", OMP_NUM_THREADS="2",
           OPENBLAS_NUM_THREADS="2", MKL_NUM_THREADS="2")
SPLATT_RESOLUTION_S = 0.005


SETTLE_S = 0.0


def run(cmd):
    """Runs `cmd` after `SETTLE_S` seconds idle, returning its stdout; fails loudly with
    its stderr."""
    time.sleep(SETTLE_S)
    p = subprocess.run(cmd, capture_output=True, text=True, env=ENV)
    if p.returncode != 0:
        sys.exit(f"command failed ({p.returncode}): {' '.join(map(str, cmd))}\n{p.stderr[-2000:]}")
    return p.stdout


def sptmc_mttkrp(a, f):
    out = run([a.sptmc, "bench", f, "--ranks", "32", "--no-ttmc", "--reps", str(a.reps),
               "--backend", "cpu", "--json"])
    t = json.loads(out)["tensors"][0]
    s = next(s for s in t["summaries"] if s["op"] == "mttkrp" and s["rank"] == 32)
    return s["all_modes_median_s"], t["prepare"]["seconds"]


def splatt_mttkrp(a, f):
    out = run([a.splatt, "bench", f, "-a", "csf", "-r", "32", "-t", "2", "-i", str(a.reps)])
    its = [float(m) for m in re.findall(r"its =\s*\d+ \(([0-9.]+)s\)", out)]
    if not its:
        sys.exit(f"no iteration times in splatt bench output for {f}")
    return statistics.median(its)


def sptmc_cp(a, f, iters):
    out = json.loads(run([a.sptmc, "cp", f, "--rank", "16", "--iters", str(iters), "--tol", "0",
                          "--seed", "1", "--backend", "cpu", "--json"]))
    return out["seconds"] / len(out["iterations"]), out["final_fit"]


def splatt_cp(a, f, iters):
    out = run([a.splatt, "cpd", f, "-r", "16", "--tol=0", "-t", "2", "-i", str(iters),
               "--seed=1", "--nowrite"])
    m = re.search(r"^\s*CPD\s+([0-9.]+)s", out, re.M)
    fit = re.search(r"Final fit:\s*([0-9.eE+-]+)", out)
    if not m:
        sys.exit(f"no CPD time in splatt cpd output for {f}")
    return float(m.group(1)) / iters, float(fit.group(1)) if fit else None


def pyttb_mttkrp(a, f):
    out = run([a.pyttb, str(HERE / "peer_pyttb_time.py"), f, "--rank", "32", "--reps", "3"])
    return json.loads(out)["seconds"]


def pyttb_cp(a, f, iters):
    out = run([a.pyttb, str(HERE / "peer_cp_time.py"), f, "--rank", "16",
               "--iters", str(iters)])
    return json.loads(out)["seconds_per_iter"]


def nnz_of(f):
    n = 0
    with open(f, "rb") as h:
        for line in h:
            if line.strip() and not line.startswith(b"#"):
                n += 1
    return n


def geomean(xs):
    xs = [x for x in xs if x and x > 0]
    return math.exp(sum(map(math.log, xs)) / len(xs)) if xs else float("nan")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("files", nargs="+", help="plain (uncompressed) FROSTT .tns files")
    ap.add_argument("--splatt", required=True, help="the splatt binary")
    ap.add_argument("--sptmc", default="target/release/sptmc")
    ap.add_argument("--pyttb", help="a python with pyttb installed (optional)")
    ap.add_argument("--pyttb-max-nnz", type=int, default=3_000_000)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--reps", type=int, default=7, help="MTTKRP repetitions per run, each side")
    ap.add_argument("--cp-seconds", type=float, default=2.0,
                    help="aim each CP run at about this long (iterations chosen from a first run)")
    ap.add_argument("--settle", type=float, default=0.0,
                    help="seconds idle before every run: on a VM whose two-thread runs slow "
                         "down under sustained load (a CPU quota), this gives every side the "
                         "same rested machine")
    ap.add_argument("--out", required=True)
    a = ap.parse_args()
    global SETTLE_S
    SETTLE_S = a.settle
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    load_before = open("/proc/loadavg").read().split()[:3]
    rows = []
    for f in a.files:
        name = Path(f).name.removesuffix(".tns")
        nnz = nnz_of(f)
        print(f"== {name} ({nnz} nnz)", file=sys.stderr)
        sptmc_cp(a, f, 2)  # warms the binary cache, like SPLATT's page cache
        per_iter, _ = sptmc_cp(a, f, 5)
        iters = max(10, min(200, int(a.cp_seconds / max(per_iter, 1e-4))))
        with_pyttb = a.pyttb and nnz <= a.pyttb_max_nnz
        r = {"tensor": name, "file": f, "nnz": nnz, "cp_iters": iters,
             "sptmc_mttkrp": [], "splatt_mttkrp": [], "sptmc_cp": [], "splatt_cp": [],
             "sptmc_prepare": [], "pyttb_mttkrp": [], "pyttb_cp": []}
        for k in range(a.rounds):
            # Alternate which side goes first in each round; pyttb, where it runs, is
            # measured every round too, at the other end from sptmc, so a phase of
            # this machine's speed (it swings by up to 2x for minutes) falls on all
            # sides alike.
            sides = ["sptmc", "splatt"] + (["pyttb"] if with_pyttb else [])
            for side in sides if k % 2 == 0 else reversed(sides):
                if side == "sptmc":
                    t, prep = sptmc_mttkrp(a, f)
                    r["sptmc_mttkrp"].append(t)
                    r["sptmc_prepare"].append(prep)
                    t, fit = sptmc_cp(a, f, iters)
                    r["sptmc_cp"].append(t)
                    r["sptmc_fit"] = fit
                elif side == "splatt":
                    r["splatt_mttkrp"].append(splatt_mttkrp(a, f))
                    t, fit = splatt_cp(a, f, iters)
                    r["splatt_cp"].append(t)
                    r["splatt_fit"] = fit
                else:
                    r["pyttb_mttkrp"].append(pyttb_mttkrp(a, f))
                    r["pyttb_cp"].append(pyttb_cp(a, f, min(iters, 5)))
        for key in ["sptmc_mttkrp", "splatt_mttkrp", "sptmc_cp", "splatt_cp", "sptmc_prepare",
                    "pyttb_mttkrp", "pyttb_cp"]:
            r[key + "_median"] = statistics.median(r[key]) if r[key] else None
        r["mttkrp_ratio"] = r["splatt_mttkrp_median"] / r["sptmc_mttkrp_median"]
        r["cp_ratio"] = r["splatt_cp_median"] / r["sptmc_cp_median"]
        r["mttkrp_splatt_coarse"] = r["splatt_mttkrp_median"] < SPLATT_RESOLUTION_S
        r["cp_splatt_coarse"] = r["splatt_cp_median"] * iters < SPLATT_RESOLUTION_S * 10
        if r["pyttb_mttkrp_median"]:
            r["pyttb_mttkrp_ratio"] = r["pyttb_mttkrp_median"] / r["sptmc_mttkrp_median"]
            r["pyttb_cp_ratio"] = r["pyttb_cp_median"] / r["sptmc_cp_median"]
        # Iterations of CP-ALS after which the prepare has paid for itself against SPLATT.
        gain = r["splatt_cp_median"] - r["sptmc_cp_median"]
        r["prepare_pays_after_iters"] = (r["sptmc_prepare_median"] / gain) if gain > 0 else None
        rows.append(r)
        print(f"   mttkrp r32 {r['sptmc_mttkrp_median']*1e3:.2f} ms vs splatt "
              f"{r['splatt_mttkrp_median']*1e3:.2f} ms ({r['mttkrp_ratio']:.2f}x); "
              f"cp r16 {r['sptmc_cp_median']*1e3:.2f} vs {r['splatt_cp_median']*1e3:.2f} ms/iter "
              f"({r['cp_ratio']:.2f}x)", file=sys.stderr)
    load_after = open("/proc/loadavg").read().split()[:3]

    def commit(path):
        try:
            return subprocess.run(["git", "-C", str(path), "rev-parse", "--short", "HEAD"],
                                  capture_output=True, text=True).stdout.strip()
        except OSError:
            return "?"

    cpu = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")), "?")
    splatt_version = run([a.splatt, "--version"]).strip().splitlines()[0]
    meta = {"date": datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"), "cpu": cpu,
            "cores": os.cpu_count(), "host": platform.node(), "sptmc_commit": commit(HERE.parent),
            "sptmc_version": run([a.sptmc, "--version"]).strip(), "splatt": splatt_version,
            "rounds": a.rounds, "reps": a.reps, "load_before": load_before,
            "load_after": load_after, "command": " ".join(sys.argv)}
    (out / "results.json").write_text(json.dumps({"meta": meta, "rows": rows}, indent=1))

    def ms(x):
        return f"{x*1e3:.2f}" if x is not None else "–"

    def times(x):
        return f"{x:.0f}×" if x else "–"

    def mark(r, key):
        return "¹" if r[key] else ""

    lines = ["| tensor | nnz | MTTKRP r32 sptmc ms | SPLATT ms | SPLATT/sptmc | "
             "CP r16 sptmc ms/iter | SPLATT ms/iter | SPLATT/sptmc | CP iters | "
             "prepare s | pays after (CP iters) | pyttb/sptmc MTTKRP | pyttb/sptmc CP |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        pays = r["prepare_pays_after_iters"]
        lines.append(
            f"| {r['tensor']} | {r['nnz']} | {ms(r['sptmc_mttkrp_median'])} | "
            f"{ms(r['splatt_mttkrp_median'])} | {r['mttkrp_ratio']:.2f}{mark(r, 'mttkrp_splatt_coarse')} | "
            f"{ms(r['sptmc_cp_median'])} | {ms(r['splatt_cp_median'])} | "
            f"{r['cp_ratio']:.2f}{mark(r, 'cp_splatt_coarse')} | {r['cp_iters']} | "
            f"{r['sptmc_prepare_median']:.3f} | {'never' if pays is None else f'{pays:.1f}'} | "
            f"{times(r.get('pyttb_mttkrp_ratio'))} | {times(r.get('pyttb_cp_ratio'))} |")
    gm_m = geomean([r["mttkrp_ratio"] for r in rows])
    gm_c = geomean([r["cp_ratio"] for r in rows])
    fine_m = [r["mttkrp_ratio"] for r in rows if not r["mttkrp_splatt_coarse"]]
    fine_c = [r["cp_ratio"] for r in rows if not r["cp_splatt_coarse"]]
    readme = f"""# sptmc CPU engine beside SPLATT, side by side

- Date (UTC): {meta['date']}
- Machine: {cpu}, {meta['cores']} cores visible; 2 threads on every side
  (RAYON_NUM_THREADS = OMP_NUM_THREADS = OPENBLAS_NUM_THREADS = 2, `-t 2` for SPLATT)
- sptmc: {meta['sptmc_version']} (repository commit {meta['sptmc_commit']})
- SPLATT: {meta['splatt']}, built from its public source in a scratch folder
- Load average before: {' '.join(load_before)}; after: {' '.join(load_after)}
- {a.rounds} rounds per tensor, the sides alternating (sptmc, SPLATT, pyttb where
  it runs, then the reverse order the next round); each cell is the median over
  rounds. MTTKRP: all modes, rank 32, {a.reps} repetitions per run (pyttb: 3).
  CP-ALS: rank 16, tol 0, seconds of the whole run / iterations (pyttb: 5
  iterations, or fewer where the others run fewer). {a.settle} s idle before every
  run.

## Command

```
{meta['command']}
```

## Results

{chr(10).join(lines)}

Geometric mean of SPLATT/sptmc: MTTKRP r32 **{gm_m:.2f}×**, CP-ALS r16 **{gm_c:.2f}×**
(lowest where SPLATT's time is above its 5 ms resolution: MTTKRP
{min(fine_m) if fine_m else float('nan'):.2f}×, CP-ALS {min(fine_c) if fine_c else float('nan'):.2f}×).

¹ SPLATT's time (per all-mode MTTKRP, or the whole CP run) is under 5 ms, at its
millisecond resolution: the ratio counts in the geometric mean only.

"Pays after" is the sptmc prepare time divided by the per-iteration CP-ALS time saved
against SPLATT: the iterations after which building the HLS form has paid for itself.
"""
    (out / "README.md").write_text(readme)
    print(f"wrote {out}/README.md and results.json", file=sys.stderr)


if __name__ == "__main__":
    main()
