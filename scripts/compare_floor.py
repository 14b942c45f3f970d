#!/usr/bin/env python3
"""sptmc's CPU engine beside SPLATT and GenTen, and against its own memory floor, in one
alternating run (2 threads every side).

For every plain FROSTT .tns file given, the sides run in turn for ROUNDS rounds (the
order reversed every other round, so drift of a shared machine falls on all alike):

- all-mode sparse MTTKRP at rank 32: `sptmc bench FILE --ranks 32 --no-ttmc` (sum of
  the per-mode medians; it also reports each mode's fraction of its memory floor and
  the prepare time) against `splatt bench FILE -a csf -r 32 -t 2 -i REPS` (median of its
  per-iteration all-mode times);
- CP-ALS at rank 16, seconds per iteration: `sptmc cp FILE --rank 16 --tol 0 --iters N`
  (median of its per-iteration times) against `splatt cpd FILE -r 16 --tol=0 -t 2 -i N`
  (median of its per-iteration times) and GenTen's cp_als through pygenten
  (scripts/peer_genten_cp.py; its own timer over all iterations / their count, as it
  prints no per-iteration times; its default MTTKRP method), N iterations each.
  Medians per iteration, because on a loaded machine an OpenMP peer's iterations swing
  by 100× (threads spinning at barriers while descheduled).

Each side's median over rounds is compared (peer / sptmc: above 1, sptmc is faster).
The prepare pays after `prepare / (SPLATT's s/iter − sptmc's s/iter)` CP iterations.
Writes OUT/results.json and OUT/README.md.

  scripts/compare_floor.py --splatt PATH/splatt --sptmc target/release/sptmc \
      --genten /work/venv-bench/bin/python [--rounds 3] [--iters 10] --out DIR FILES...
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
from datetime import datetime, timezone
from pathlib import Path

HERE = Path(__file__).resolve().parent
ENV = dict(os.environ, RAYON_NUM_THREADS="2", OMP_NUM_THREADS="2", OPENBLAS_NUM_THREADS="2",
           MKL_NUM_THREADS="2", OMP_PROC_BIND="false")
SPLATT_RESOLUTION_S = 0.005


def run(cmd):
    p = subprocess.run([str(c) for c in cmd], capture_output=True, text=True, env=ENV)
    if p.returncode != 0:
        sys.exit(f"command failed ({p.returncode}): {' '.join(map(str, cmd))}\n{p.stderr[-2000:]}")
    return p.stdout


def sptmc_mttkrp(a, f):
    t = json.loads(run([a.sptmc, "bench", f, "--ranks", "32", "--no-ttmc", "--reps", a.reps,
                        "--backend", "cpu", "--threads", "2", "--json"]))
    copy = t["copy_rate"]["bytes_per_s"] if t.get("copy_rate") else None
    t = t["tensors"][0]
    s = next(s for s in t["summaries"] if s["op"] == "mttkrp" and s["rank"] == 32)
    modes = [{"mode": k["mode"], "median_s": k["median_s"], "floor_s": k["floor_s"],
              "floor_fraction": k["floor_fraction"], "floor_bytes": k["floor_bytes"]}
             for k in t["kernels"] if k["op"] == "mttkrp" and k["rank"] == 32]
    return {"all_modes_s": s["all_modes_median_s"], "floor_s": s["all_modes_floor_s"],
            "prepare_s": t["prepare"]["seconds"], "copy_bytes_per_s": copy, "modes": modes,
            "dims": t["dims"]}


def splatt_mttkrp(a, f):
    out = run([a.splatt, "bench", f, "-a", "csf", "-r", "32", "-t", "2", "-i", a.reps])
    its = [float(m) for m in re.findall(r"its =\s*\d+ \(([0-9.]+)s\)", out)]
    if not its:
        sys.exit(f"no iteration times in splatt bench output for {f}")
    return statistics.median(its)


def sptmc_cp(a, f):
    out = json.loads(run([a.sptmc, "cp", f, "--rank", "16", "--iters", a.iters, "--tol", "0",
                          "--seed", "1", "--backend", "cpu", "--threads", "2", "--json"]))
    its = [i["seconds_kernel"] + i["seconds_linalg"] + i["seconds_other"]
           for i in out["iterations"]]
    return statistics.median(its), out["final_fit"]


def splatt_cp(a, f):
    out = run([a.splatt, "cpd", f, "-r", "16", "--tol=0", "-t", "2", "-i", a.iters,
               "--seed=1", "--nowrite"])
    its = [float(m) for m in re.findall(r"its =\s*\d+ \(([0-9.]+)s\)", out)]
    if not its:
        sys.exit(f"no iteration times in splatt cpd output for {f}")
    return statistics.median(its)


def genten_cp(a, f):
    out = json.loads(run([a.genten, HERE / "peer_genten_cp.py", f, "--rank", "16",
                          "--iters", a.iters]))
    return out["seconds_per_iter"], out["fit"]


def geomean(xs):
    xs = [x for x in xs if x and x > 0]
    return math.exp(sum(map(math.log, xs)) / len(xs)) if xs else float("nan")


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("files", nargs="+", help="plain (uncompressed) FROSTT .tns files")
    ap.add_argument("--splatt", required=True)
    ap.add_argument("--sptmc", default="target/release/sptmc")
    ap.add_argument("--genten", required=True, help="a python with pygenten and pyttb")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--reps", default="7", help="MTTKRP repetitions per run, each side")
    ap.add_argument("--iters", default="10", help="CP-ALS iterations per run, each side")
    ap.add_argument("--omp-wait-policy", choices=["active", "passive"],
                    help="OMP_WAIT_POLICY for the OpenMP peers (default: theirs). On a "
                         "machine loaded by other work, spinning OpenMP threads that are "
                         "descheduled stall every barrier; passive waiting shows the "
                         "peers without that")
    ap.add_argument("--out", required=True)
    a = ap.parse_args()
    if a.omp_wait_policy:
        ENV["OMP_WAIT_POLICY"] = a.omp_wait_policy
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    load_before = open("/proc/loadavg").read().split()[:3]
    rows = []
    for f in a.files:
        name = Path(f).name.removesuffix(".tns")
        print(f"== {name}", file=sys.stderr)
        run([a.sptmc, "info", f])  # writes the .sptb cache, as SPLATT has the page cache
        r = {"tensor": name, "file": f, "sptmc_mttkrp": [], "splatt_mttkrp": [],
             "sptmc_cp": [], "splatt_cp": [], "genten_cp": [], "bench": []}
        sides = ["sptmc", "splatt", "genten"]
        for k in range(a.rounds):
            for side in sides if k % 2 == 0 else reversed(sides):
                if side == "sptmc":
                    b = sptmc_mttkrp(a, f)
                    r["bench"].append(b)
                    r["sptmc_mttkrp"].append(b["all_modes_s"])
                    t, r["sptmc_fit"] = sptmc_cp(a, f)
                    r["sptmc_cp"].append(t)
                elif side == "splatt":
                    r["splatt_mttkrp"].append(splatt_mttkrp(a, f))
                    r["splatt_cp"].append(splatt_cp(a, f))
                else:
                    t, r["genten_fit"] = genten_cp(a, f)
                    r["genten_cp"].append(t)
        med = {k: statistics.median(r[k]) for k in
               ["sptmc_mttkrp", "splatt_mttkrp", "sptmc_cp", "splatt_cp", "genten_cp"]}
        r.update({k + "_median": v for k, v in med.items()})
        r["dims"] = r["bench"][0]["dims"]
        r["prepare_s"] = statistics.median(b["prepare_s"] for b in r["bench"])
        nmodes = len(r["bench"][0]["modes"])
        r["floor_fraction"] = [statistics.median(b["modes"][m]["floor_fraction"] for b in r["bench"])
                               for m in range(nmodes)]
        r["floor_fraction_all_modes"] = statistics.median(
            b["floor_s"] / b["all_modes_s"] for b in r["bench"])
        r["mttkrp_vs_splatt"] = med["splatt_mttkrp"] / med["sptmc_mttkrp"]
        r["cp_vs_splatt"] = med["splatt_cp"] / med["sptmc_cp"]
        r["cp_vs_genten"] = med["genten_cp"] / med["sptmc_cp"]
        gain = med["splatt_cp"] - med["sptmc_cp"]
        r["prepare_pays_after_iters"] = r["prepare_s"] / gain if gain > 0 else None
        rows.append(r)
        print(f"   mttkrp {r['mttkrp_vs_splatt']:.2f}x splatt; cp {r['cp_vs_splatt']:.2f}x "
              f"splatt, {r['cp_vs_genten']:.2f}x genten; floor {r['floor_fraction']}",
              file=sys.stderr)
    load_after = open("/proc/loadavg").read().split()[:3]
    commit = subprocess.run(["git", "-C", str(HERE.parent), "rev-parse", "--short", "HEAD"],
                            capture_output=True, text=True).stdout.strip()
    cpu = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo")
                if l.startswith("model name")), "?")
    meta = {"date": datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"), "cpu": cpu,
            "cores": os.cpu_count(), "host": platform.node(), "sptmc_commit": commit,
            "sptmc_version": run([a.sptmc, "--version"]).strip(),
            "copy_rate_bytes_per_s": [b["copy_bytes_per_s"] for r in rows for b in r["bench"]],
            "load_before": load_before, "load_after": load_after, "rounds": a.rounds,
            "reps": a.reps, "iters": a.iters, "omp_wait_policy": a.omp_wait_policy,
            "argv": sys.argv}
    (out / "results.json").write_text(json.dumps({"meta": meta, "rows": rows}, indent=1))
    lines = ["| tensor | dims | MTTKRP r32 all modes sptmc / SPLATT (ms) | × SPLATT | "
             "CP r16 s/iter sptmc / SPLATT / GenTen (ms) | × SPLATT | × GenTen | "
             "fraction of floor per mode | prepare (s) | pays after (CP iters vs SPLATT) |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        coarse = " (SPLATT < 5 ms)" if r["splatt_mttkrp_median"] < SPLATT_RESOLUTION_S else ""
        pays = f"{r['prepare_pays_after_iters']:.1f}" if r["prepare_pays_after_iters"] else "never"
        lines.append(
            f"| {r['tensor']} | {'×'.join(map(str, r['dims']))} | "
            f"{r['sptmc_mttkrp_median']*1e3:.1f} / {r['splatt_mttkrp_median']*1e3:.1f} | "
            f"{r['mttkrp_vs_splatt']:.2f}×{coarse} | "
            f"{r['sptmc_cp_median']*1e3:.1f} / {r['splatt_cp_median']*1e3:.1f} / "
            f"{r['genten_cp_median']*1e3:.1f} | {r['cp_vs_splatt']:.2f}× | "
            f"{r['cp_vs_genten']:.2f}× | "
            f"{' / '.join(f'{100*x:.0f}%' for x in r['floor_fraction'])} | "
            f"{r['prepare_s']:.2f} | {pays} |")
    gm = {k: geomean([r[k] for r in rows]) for k in ["mttkrp_vs_splatt", "cp_vs_splatt",
                                                     "cp_vs_genten"]}
    lines.append("")
    lines.append(f"Geometric means: MTTKRP r32 {gm['mttkrp_vs_splatt']:.2f}× SPLATT; CP-ALS r16 "
                 f"{gm['cp_vs_splatt']:.2f}× SPLATT, {gm['cp_vs_genten']:.2f}× GenTen.")
    (out / "results.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
