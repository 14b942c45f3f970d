#!/usr/bin/env python3
"""Summarizes raw.jsonl: per tensor, ranks and command, the median over rounds of every
rank's peak (MiB) for each build, the peak less the tiny tensor's (the program's own),
the new build's plan over that, and whether the final fits agree."""
import json
import statistics
import sys
from collections import defaultdict

rows = [json.loads(l) for l in open(sys.argv[1] if len(sys.argv) > 1 else "raw.jsonl")]
MiB = 2 ** 20
peaks = defaultdict(list)   # (tensor, ranks, cmd, build) -> [max peak over ranks per round]
plans = defaultdict(list)   # (tensor, ranks, cmd) -> [per-rank (plan, peak)]
fits = defaultdict(set)
for r in rows:
    key = (r["tensor"], r["ranks"], r["cmd"])
    peaks[key + (r["build"],)].append(max(p["peak_bytes"] for p in r["per_rank"]))
    fits[key].add((r["build"], r["fit"]))
    if r["build"] == "new":
        plans[key].extend((p["planned_bytes"], p["peak_bytes"]) for p in r["per_rank"])

base = {(n, c): statistics.median(peaks[("tiny", n, c, "new")]) for n in (2, 4) for c in ("cp", "cp-apr")}
print("| tensor | ranks | command | peak per rank, before (MiB) | after (MiB) | after / before | plan / (peak − program), range over ranks and rounds | final fit or log-likelihood, before = after |")
print("|---|---|---|---|---|---|---|---|")
for (t, n, c) in sorted({k[:3] for k in peaks}):
    if t == "tiny":
        continue
    old = statistics.median(peaks[(t, n, c, "old")])
    new = statistics.median(peaks[(t, n, c, "new")])
    ratios = [plan / (peak - base[(n, c)]) for plan, peak in plans[(t, n, c)]]
    same = len({f for _, f in fits[(t, n, c)]}) == 1
    print(f"| {t} | {n} | {c} | {old / MiB:.0f} | {new / MiB:.0f} | {new / old:.2f} | "
          f"{min(ratios):.2f}–{max(ratios):.2f} | {'yes' if same else 'no: ' + str(sorted(fits[(t, n, c)]))} |")
print(f"\nThe program's own peak (tiny tensor, after): "
      + ", ".join(f"{c} on {n} ranks {base[(n, c)] / MiB:.0f} MiB" for (n, c) in sorted(base)))
