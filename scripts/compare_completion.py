#!/usr/bin/env python3
"""Completion by ALS: sptmc beside SPLATT's `complete` (its sc16 branch), side by side.

Both sides read the same train / validation / test .tns files (plain, 1-based) and run
ALS at one rank with 2 threads. Two phases:

1. Quality: every regularization given for each side (sptmc: --lambda, with and without
   centering; SPLATT: --reg) runs once; each run's best validation RMSE (the model
   both tools return) and its test RMSE are recorded. Early stopping is matched:
   sptmc runs with --patience 20, SPLATT stops after its 20 epochs without a
   validation gain.
2. Speed: each side's best configuration (lowest validation RMSE) runs ROUNDS times,
   alternating with the other. Time per epoch: sptmc, the mean of its per-epoch
   `seconds` over the run (the first epoch, which groups the nonzeros by row, and the
   validation RMSE of every epoch included); SPLATT, its cumulative `time:` after the
   last epoch divided by the epochs run (its timer covers the updates and the training
   loss, not the validation RMSE). The table shows each side's median over rounds.

Writes OUT/results.json and OUT/README.md (machine, commit, commands, tables).

  scripts/compare_completion.py --splatt PATH/TO/sc16/splatt --sptmc target/release/sptmc \
      --train train.tns --validation val.tns --test test.tns --out bench/results/DIR
"""
import argparse
import json
import os
import platform
import re
import statistics
import subprocess
import sys
from datetime import datetime, timezone
from pathlib import Path

ENV = dict(os.environ, RAYON_NUM_THREADS="2", OMP_NUM_THREADS="2",
           OPENBLAS_NUM_THREADS="2")


def run(cmd):
    p = subprocess.run(cmd, capture_output=True, text=True, env=ENV)
    if p.returncode != 0:
        sys.exit(f"command failed ({p.returncode}): {' '.join(map(str, cmd))}\n{p.stderr[-2000:]}")
    return p.stdout


def sptmc_cmd(a, lam, center):
    """`lam` "auto": sptmc's defaults (its λ path, epochs and stop; `center` ignored)."""
    cmd = [a.sptmc, "complete", "--train", a.train, "--validation", a.validation,
           "--test", a.test, "--solver", "als", "--rank", str(a.rank), "--seed", "1",
           "--threads", "2", "--backend", "cpu", "--no-cache", "--json"]
    if lam == "auto":
        return cmd
    cmd += ["--lambda", str(lam), "--patience", "20", "--epochs", str(a.max_epochs)]
    return cmd + ([] if center else ["--no-center"])


def sptmc_run(a, lam, center):
    d = json.loads(run(sptmc_cmd(a, lam, center)))
    per_epoch = statistics.mean(e["seconds"] for e in d["epochs"])
    return dict(validation_rmse=d["validation_rmse"], test_rmse=d["test_rmse"],
                epochs=d["epochs_run"], best_epoch=d["best_epoch"],
                seconds_per_epoch=per_epoch, epoch_seconds=sum(e["seconds"] for e in d["epochs"]), baseline_test_rmse=d["baseline_test_rmse"],
                seconds=d.get("seconds"), chosen_lambda=d.get("lambda"))


def splatt_cmd(a, reg):
    return [a.splatt, "complete", a.train, a.validation, a.test, "-a", "als",
            "-r", str(a.rank), "-t", "2", "--seed=1", "--nowrite", f"--reg={reg}"]


def splatt_run(a, reg):
    out = run(splatt_cmd(a, reg))
    epochs = re.findall(r"epoch:\s+(\d+).*?time: ([0-9.]+)s", out)
    best = re.search(r"BEST VALIDATION RMSE: ([0-9.eE+-]+).*?\(epoch (\d+)\)", out)
    test = re.search(r"TEST RMSE: ([0-9.eE+-]+)", out)
    if not epochs or not best:
        sys.exit(f"could not read SPLATT's output:\n{out[-2000:]}")
    last, cum = int(epochs[-1][0]), float(epochs[-1][1])
    return dict(validation_rmse=float(best.group(1)),
                test_rmse=float(test.group(1)) if test else None,
                epochs=last, best_epoch=int(best.group(2)),
                seconds_per_epoch=cum / max(last, 1), epoch_seconds=cum)


def git_commit(path):
    try:
        return subprocess.run(["git", "-C", str(path), "rev-parse", "--short", "HEAD"],
                              capture_output=True, text=True).stdout.strip() or "unknown"
    except OSError:
        return "unknown"


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--splatt", required=True)
    p.add_argument("--sptmc", required=True)
    p.add_argument("--train", required=True)
    p.add_argument("--validation", required=True)
    p.add_argument("--test", required=True)
    p.add_argument("--rank", type=int, default=16)
    p.add_argument("--sptmc-lambdas", default="15,17,18,20,22,25",
                   help='comma-separated; "auto" runs sptmc with its defaults')
    p.add_argument("--splatt-regs", default="15,18,20,22,25,30")
    p.add_argument("--max-epochs", type=int, default=300)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--out", required=True)
    a = p.parse_args()
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    load_before = os.getloadavg()

    quality = []
    for lam in a.sptmc_lambdas.split(","):
        for center in ((True,) if lam == "auto" else (True, False)):
            r = sptmc_run(a, lam, center)
            quality.append(dict(tool="sptmc", reg=lam, center=center, **r))
            print(f"sptmc λ {lam} center {center}: val {r['validation_rmse']:.4f}", flush=True)
    for reg in a.splatt_regs.split(","):
        r = splatt_run(a, reg)
        quality.append(dict(tool="splatt", reg=reg, center=False, **r))
        print(f"splatt reg {reg}: val {r['validation_rmse']:.4f}", flush=True)

    def best(tool):
        return min((q for q in quality if q["tool"] == tool), key=lambda q: q["validation_rmse"])

    bs, bp = best("sptmc"), best("splatt")
    rounds = []
    for k in range(a.rounds):
        rs = sptmc_run(a, bs["reg"], bs["center"])
        rp = splatt_run(a, bp["reg"])
        rounds.append(dict(round=k, sptmc=rs, splatt=rp))
        print(f"round {k}: sptmc {rs['seconds_per_epoch']*1e3:.2f} ms, "
              f"splatt {rp['seconds_per_epoch']*1e3:.2f} ms", flush=True)
    ms = statistics.median(r["sptmc"]["seconds_per_epoch"] for r in rounds)

    def tot(side):
        return statistics.median(r[side]["epoch_seconds"] for r in rounds)

    mp = statistics.median(r["splatt"]["seconds_per_epoch"] for r in rounds)
    load_after = os.getloadavg()

    meta = dict(
        date=datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
        machine=platform.processor() or platform.machine(),
        cpu=next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo")
                  if l.startswith("model name")), "unknown"),
        cores=os.cpu_count(), commit=git_commit(Path(__file__).resolve().parent.parent),
        command=" ".join(sys.argv), load_before=load_before, load_after=load_after,
        sptmc_best_command=" ".join(sptmc_cmd(a, bs["reg"], bs["center"])),
        splatt_best_command=" ".join(splatt_cmd(a, bp["reg"])),
    )
    (out / "results.json").write_text(json.dumps(
        dict(meta=meta, quality=quality, rounds=rounds,
             median_seconds_per_epoch=dict(sptmc=ms, splatt=mp)), indent=1))

    lines = [
        f"# Completion by ALS, rank {a.rank}: sptmc beside SPLATT `complete` (sc16)", "",
        f"- Date (UTC): {meta['date']}; CPU: {meta['cpu']}, {meta['cores']} cores; "
        "2 threads on each side",
        f"- sptmc commit: {meta['commit']}",
        f"- Load average before: {' '.join(f'{x:.2f}' for x in load_before)}; "
        f"after: {' '.join(f'{x:.2f}' for x in load_after)}",
        f"- Command: `{meta['command']}`", "",
        "Method: see `scripts/compare_completion.py` (quality sweep once per setting, "
        f"then {a.rounds} alternating timing rounds of each side's best setting).", "",
        "## Quality (one run per setting; best validation RMSE, the returned model)", "",
        "| tool | λ / reg | centered | epochs | best epoch | validation RMSE | test RMSE |",
        "|---|---|---|---|---|---|---|",
    ]
    for q in quality:
        t = f"{q['test_rmse']:.4f}" if q["test_rmse"] is not None else "–"
        lines.append(f"| {q['tool']} | {q['reg']} | {'yes' if q['center'] else 'no'} | "
                     f"{q['epochs']} | {q['best_epoch']} | {q['validation_rmse']:.4f} | {t} |")
    lines += [
        "", f"sptmc's per-user + per-item bias baseline, test RMSE: "
        f"{bs['baseline_test_rmse']:.4f}.", "",
        "## Speed (each side's best setting, median of rounds)", "",
        f"- sptmc: `{meta['sptmc_best_command']}`",
        f"- SPLATT: `OMP_NUM_THREADS=2 {meta['splatt_best_command']}`", "",
        "| side | validation RMSE | time per epoch, per round | median |",
        "|---|---|---|---|",
        f"| sptmc | {bs['validation_rmse']:.4f} | "
        + ", ".join(f"{r['sptmc']['seconds_per_epoch']*1e3:.2f}" for r in rounds)
        + f" ms | **{ms*1e3:.2f} ms** |",
        f"| SPLATT | {bp['validation_rmse']:.4f} | "
        + ", ".join(f"{r['splatt']['seconds_per_epoch']*1e3:.2f}" for r in rounds)
        + f" ms | **{mp*1e3:.2f} ms** |",
        "", f"**SPLATT / sptmc time per epoch: {mp/ms:.2f}×**, at validation RMSE "
        f"{bs['validation_rmse']:.4f} (sptmc) vs {bp['validation_rmse']:.4f} (SPLATT).", "",
        "Whole runs (the sum of every epoch's time, median of rounds): sptmc "
        f"{tot('sptmc')*1e3:.0f} ms over {bs['epochs']} epochs (its λ path included), "
        f"SPLATT {tot('splatt')*1e3:.0f} ms over {bp['epochs']} epochs at its best "
        "`--reg` (the sweep that found it not counted).", "",
    ]
    (out / "README.md").write_text("\n".join(lines))
    print("\n".join(lines))


if __name__ == "__main__":
    main()
