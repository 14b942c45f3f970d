#!/usr/bin/env python3
"""Check that MM-CSF read a headered tensor (scripts/peer-tns.sh) as sptmc reads it.

MM-CSF's MTTKRP driver fills factor n with the constant n + 0.5 (when not running CPD),
so row i of its mode-m output is (Σ of row i's values) · Π_{k≠m} (k + 0.5) in every
column. This recomputes that in FP64 from the same file and compares it with the output
MM-CSF wrote with `-o` (printed with two decimals, accumulated in fp32).

    python3 peer_check_input.py TENSOR.tns MODE OUTPUT.txt [--accumulated]

`--accumulated`: the output was added onto the factor's initial value (MM-CSF's COO CPU
path, `-t 1`, does not zero its output first), so every entry carries an extra m + 0.5.
"""
import math
import sys


def main() -> int:
    path, mode, out_path = sys.argv[1], int(sys.argv[2]), sys.argv[3]
    initial = mode + 0.5 if "--accumulated" in sys.argv[4:] else 0.0
    with open(path) as f:
        order = int(f.readline())
        dims = [int(d) for d in f.readline().split()]
        sums = [0.0] * dims[mode]
        counts = [0] * dims[mode]
        for line in f:
            parts = line.split()
            i = int(parts[mode]) - 1
            sums[i] += float(parts[order])
            counts[i] += 1
    scale = math.prod(k + 0.5 for k in range(order) if k != mode)
    with open(out_path) as f:
        f.readline()  # "I x R matrix"
        rows = [[float(v) for v in line.split()] for line in f if line.strip()]
    if len(rows) != dims[mode]:
        print(f"{out_path}: {len(rows)} rows, the tensor's mode {mode} has {dims[mode]}")
        return 1
    worst = 0.0
    for i, row in enumerate(rows):
        want = sums[i] * scale + initial
        # Two printed decimals, plus fp32 accumulation over the row's nonzeros.
        tol = 0.006 + 2.0**-23 * (counts[i] + 1) * abs(want) * 4
        for got in row:
            err = abs(got - want)
            worst = max(worst, err / max(tol, 1e-300))
            if err > tol or math.isnan(got):
                print(f"{out_path}: row {i}: {got} where {want} (tolerance {tol:.3g})")
                return 1
    print(f"{out_path}: {len(rows)} rows match (worst error {worst:.2f} of its tolerance)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
