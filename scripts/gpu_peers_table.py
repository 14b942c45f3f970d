#!/usr/bin/env python3
"""Rows of peers.tsv from one tool's output, and the summary (scripts/gpu-peers.sh run).

    gpu_peers_table.py sptmc TENSOR ROUND BENCH.json
    gpu_peers_table.py mmcsf TENSOR ROUND LOG RANK          (all modes, MM-CSF -t 12)
    gpu_peers_table.py mmcsf-ttm TENSOR ROUND LOG RANK MODE
    gpu_peers_table.py parti TENSOR ROUND LOG RANK MODE
    gpu_peers_table.py --summary peers.tsv

Times are what each tool reports: sptmc's kernel time (CUDA events) as `sptmc` and its
wall clock per call as `sptmc-wall`; MM-CSF's per-mode GPU time (CUDA events, ms);
ParTI's MTTKRP timer (seconds, median of its iterations). A log without a time gives a
row with `nan`, so a failed run shows in the table instead of vanishing.
"""
import json
import math
import re
import statistics
import sys


def rows_sptmc(tensor, rnd, path):
    with open(path) as f:
        bench = json.load(f)
    for t in bench["tensors"]:
        for k in t["kernels"]:
            rank = k["rank"] if isinstance(k["rank"], int) else "x".join(map(str, k["rank"]))
            kernel = k.get("kernel_median_s")
            yield ("sptmc", tensor, k["op"], k["mode"], rank, rnd, 1e3 * kernel if kernel else math.nan)
            yield ("sptmc-wall", tensor, k["op"], k["mode"], rank, rnd, 1e3 * k["median_s"])


def read(path):
    with open(path, errors="replace") as f:
        return f.read()


def rows_mmcsf(tensor, rnd, path, rank):
    found = re.findall(r"MI-HCSR-GPU-mode (\d+) : ([0-9.eE+-]+),", read(path))
    if not found:
        yield ("mmcsf", tensor, "mttkrp", "all", rank, rnd, math.nan)
    for mode, ms in found:
        yield ("mmcsf", tensor, "mttkrp", int(mode), rank, rnd, float(ms))


def rows_mmcsf_ttm(tensor, rnd, path, rank, mode):
    m = re.search(r"TTM GPU - time ([0-9.eE+-]+)\s*ms", read(path))
    yield ("mmcsf-ttm", tensor, "ttm", int(mode), rank, rnd, float(m[1]) if m else math.nan)


def rows_parti(tensor, rnd, path, rank, mode):
    times = [float(s) for s in re.findall(r"\[CUDA SpTns MTTKRP\]: ([0-9.eE+-]+) s", read(path))]
    ms = 1e3 * statistics.median(times) if times else math.nan
    yield ("parti", tensor, "mttkrp", int(mode), rank, rnd, ms)


def summary(path):
    times = {}
    with open(path) as f:
        next(f)
        for line in f:
            tool, tensor, op, mode, rank, _rnd, ms = line.rstrip("\n").split("\t")
            op = "ttm*" if op in ("ttm", "ttmc") else op
            times.setdefault((tensor, op, mode), {}).setdefault(tool, []).append(float(ms))
    print("tensor\top\tmode\t" + "\t".join(TOOLS) + "\tbest peer / sptmc kernel\tbest peer / sptmc wall")
    for (tensor, op, mode), by_tool in sorted(times.items()):
        med = {t: statistics.median(v) for t, v in by_tool.items() if not all(map(math.isnan, v))}
        peers = [med[t] for t in ("mmcsf", "mmcsf-ttm", "parti") if t in med]
        ratios = [f"{min(peers) / med[t]:.2f}" if peers and med.get(t) else "-" for t in ("sptmc", "sptmc-wall")]
        cells = [f"{med[t]:.3f}" if t in med else "-" for t in TOOLS]
        print(f"{tensor}\t{op}\t{mode}\t" + "\t".join(cells + ratios))
    print("(milliseconds, median over rounds; ttm*: sptmc's TTM-chain beside MM-CSF's single TTM)")


TOOLS = ("sptmc", "sptmc-wall", "mmcsf", "mmcsf-ttm", "parti")


def main():
    args = sys.argv[1:]
    if args[0] == "--summary":
        summary(args[1])
        return
    tool, tensor, rnd, path, *rest = args
    make = {"sptmc": rows_sptmc, "mmcsf": rows_mmcsf, "mmcsf-ttm": rows_mmcsf_ttm, "parti": rows_parti}[tool]
    try:
        rows = list(make(tensor, int(rnd), path, *rest))
    except (OSError, ValueError, KeyError) as e:
        print(f"gpu_peers_table: {tool} {path}: {e}", file=sys.stderr)
        rows = [(tool, tensor, "?", "?", rest[0] if rest else "?", int(rnd), math.nan)]
    for r in rows:
        print("\t".join(map(str, r)))


if __name__ == "__main__":
    main()
