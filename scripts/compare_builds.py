#!/usr/bin/env python3
"""Two sptmc builds side by side on the CPU: did a change keep the speed?

For every tensor file given, the two binaries run alternately for ROUNDS rounds (A, B,
A, B, ...), each round timing on both:
  - `sptmc bench FILE --ranks 32 --ttmc-ranks 8`: all-mode MTTKRP r32 and TTMc r8
    (sum over modes of each kernel's median seconds);
  - `sptmc cp FILE --rank 16 --iters ITERS --tol 0`: CP-ALS seconds per iteration;
  - `sptmc tucker FILE --ranks 8,8,... --iters ITERS --tol 0` (ranks capped at the modes'
    lengths): Tucker-HOOI seconds per iteration after the first (median), and the
    first on its own (it also builds the TTMc's row groups).
Each side's median over the rounds is compared (after / before: below 1 is faster).
Alternating puts both sides through the same swings of a shared machine's speed.

  scripts/compare_builds.py --before OLD/sptmc --after NEW/sptmc [--rounds 3]
      [--threads 2] [--iters 10] [--before-args ARGS] [--after-args ARGS] [--out DIR] FILE...

--before-args / --after-args add options to every run of that side (one string, split
on spaces): one build against itself with `--before-args "--values f16" --after-args
"--values f32"` measures what an option costs.

Writes DIR/results.json (every run) and DIR/README.md (the table) when --out is given,
and prints the table.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import time


def run_json(cmd):
    p = subprocess.run(cmd, capture_output=True, text=True)
    if p.returncode != 0:
        raise SystemExit(f"failed ({p.returncode}): {' '.join(cmd)}\n{p.stderr[-2000:]}")
    return json.loads(p.stdout)


def measure(binary, f, threads, iters, extra=()):
    common = ["--backend", "cpu", "--threads", str(threads), "--json", *extra]
    bench = run_json([binary, "bench", f, "--ranks", "32", "--ttmc-ranks", "8", "--reps", "5", *common])
    kernels = bench["tensors"][0]["kernels"]
    mttkrp = sum(k["median_s"] for k in kernels if k["op"] == "mttkrp")
    ttmc = sum(k["median_s"] for k in kernels if k["op"] == "ttmc")
    cp = run_json([binary, "cp", f, "--rank", "16", "--iters", str(iters), "--tol", "0", "--seed", "1", *common])
    ranks = ",".join(str(min(8, d)) for d in bench["tensors"][0]["dims"])
    tk = run_json([binary, "tucker", f, "--ranks", ranks, "--iters", str(iters), "--tol", "0", "--seed", "1",
                   *common])
    tk_its = [i["seconds_kernel"] + i["seconds_linalg"] + i["seconds_other"] for i in tk["iterations"]]
    return {"mttkrp_r32_all_modes_s": mttkrp, "ttmc_r8_all_modes_s": ttmc,
            "cp_r16_s_per_iter": cp["seconds_per_iter"], "cp_final_fit": cp["final_fit"],
            # Iterations after the first (which also builds a kernel's row groups), and the first.
            "tucker_r8_s_per_iter": statistics.median(tk_its[1:] or tk_its), "tucker_first_iter_s": tk_its[0],
            "tucker_final_fit": tk["final_fit"],
            "values": (cp.get("values") or {}).get("type")}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--before", required=True)
    ap.add_argument("--after", required=True)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--iters", type=int, default=10)
    ap.add_argument("--before-args", default="")
    ap.add_argument("--after-args", default="")
    ap.add_argument("--out")
    ap.add_argument("files", nargs="+")
    a = ap.parse_args()
    sides = {"before": a.before, "after": a.after}
    extra = {"before": a.before_args.split(), "after": a.after_args.split()}
    runs = []
    for f in a.files:
        for b in sides.values():  # warm the .sptb cache and the page cache
            run_json([b, "info", f, "--json"])
        for r in range(a.rounds):
            for side, b in sides.items():
                m = measure(b, f, a.threads, a.iters, extra[side])
                m.update(tensor=os.path.basename(f), side=side, round=r, at=time.time())
                runs.append(m)
                print(json.dumps(m), file=sys.stderr)
    keys = ["mttkrp_r32_all_modes_s", "ttmc_r8_all_modes_s", "cp_r16_s_per_iter", "tucker_r8_s_per_iter",
            "tucker_first_iter_s"]
    lines = ["| tensor | " + " | ".join(f"{k} before | after | after/before" for k in keys)
             + " | CP fit before / after | Tucker fit before / after | values before / after |",
             "|---|" + "---|---|---|" * len(keys) + "---|---|---|"]
    rows = []
    for f in a.files:
        name = os.path.basename(f)
        med = {s: {k: statistics.median(x[k] for x in runs if x["tensor"] == name and x["side"] == s) for k in keys}
               for s in sides}
        fit = {s: next(x["cp_final_fit"] for x in runs if x["tensor"] == name and x["side"] == s) for s in sides}
        vals = {s: next(x["values"] for x in runs if x["tensor"] == name and x["side"] == s) for s in sides}
        tfit = {s: next(x["tucker_final_fit"] for x in runs if x["tensor"] == name and x["side"] == s)
                for s in sides}
        cells = []
        for k in keys:
            cells.append(f"{med['before'][k]:.4g} | {med['after'][k]:.4g} | {med['after'][k] / med['before'][k]:.3f}")
        lines.append(f"| {name} | " + " | ".join(cells) + f" | {fit['before']:.6f} / {fit['after']:.6f} |"
                     + f" {tfit['before']:.9f} / {tfit['after']:.9f} | {vals['before']} / {vals['after']} |")
        rows.append({"tensor": name, "median": med, "fit": fit, "tucker_fit": tfit, "values": vals})
    table = "\n".join(lines)
    print(table)
    if a.out:
        os.makedirs(a.out, exist_ok=True)
        with open(os.path.join(a.out, "results.json"), "w") as fh:
            json.dump({"before": a.before, "after": a.after, "before_args": a.before_args,
                       "after_args": a.after_args, "rounds": a.rounds, "threads": a.threads,
                       "iters": a.iters, "runs": runs, "medians": rows}, fh, indent=1)
        with open(os.path.join(a.out, "README.md"), "w") as fh:
            fh.write(f"# Two builds side by side (CPU, {a.threads} threads, {a.rounds} alternating rounds)\n\n"
                     f"Command: `scripts/compare_builds.py --before {a.before} --after {a.after} "
                     f"--rounds {a.rounds} --threads {a.threads} --iters {a.iters} "
                     + (f"--before-args '{a.before_args}' " if a.before_args else "")
                     + (f"--after-args '{a.after_args}' " if a.after_args else "")
                     + f"{' '.join(a.files)}`\n\n"
                     "Each cell is the median over the rounds; after/before below 1 is faster.\n\n"
                     + table + "\n")


if __name__ == "__main__":
    main()
