"""Summarizes compare.sh's JSON files (a directory of them, or one JSON object mapping
file name to contents): TTMc per tensor, rank and mode, old and new (median over
rounds of each run's median), new/old, and all-mode sums."""
import collections, glob, json, os, statistics, sys

out = sys.argv[1]
runs = collections.defaultdict(list)  # (tensor, side) -> [json]
if os.path.isdir(out):
    files = {os.path.basename(p): json.load(open(p)) for p in glob.glob(os.path.join(out, "*.json"))}
else:
    files = json.load(open(out))
for fname, run in sorted(files.items()):
    name, side, _r, _ = fname.rsplit(".", 3)
    runs[(name, side)].append(run)
tensors = sorted({t for t, _ in runs})
print("| tensor | rank | mode | output | old ms | new ms | new/old |")
print("|---|---|---|---|---|---|---|")
totals = []
for t in tensors:
    per = {}
    for side in ("old", "new"):
        for run in runs[(t, side)]:
            for k in run["tensors"][0]["kernels"]:
                if k["op"] == "ttmc":
                    key = (k["rank"], k["mode"], "×".join(map(str, k["output"])))
                    per.setdefault(key, {}).setdefault(side, []).append(k["median_s"])
    sums = collections.defaultdict(float)
    for (rank, mode, shape), v in sorted(per.items()):
        o, n = statistics.median(v["old"]), statistics.median(v["new"])
        sums[(rank, "old")] += o
        sums[(rank, "new")] += n
        print(f"| {t} | {rank} | {mode} | {shape} | {o*1e3:.2f} | {n*1e3:.2f} | {n/o:.2f} |")
    for rank in sorted({r for r, _ in sums}):
        o, n = sums[(rank, "old")], sums[(rank, "new")]
        totals.append(f"| {t} | {rank} | {o*1e3:.1f} | {n*1e3:.1f} | {n/o:.2f} |")
print()
print("| tensor | rank | all modes old ms | all modes new ms | new/old |")
print("|---|---|---|---|---|")
print("\n".join(totals))
