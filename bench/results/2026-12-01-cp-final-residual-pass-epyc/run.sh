#!/usr/bin/env bash
# The f64 residual pass CP-ALS takes at its last iteration, before and after it read
# whole rows with prefetching: OLD and NEW sptmc binaries alternating, same threads.
#   bash run.sh OLD_SPTMC NEW_SPTMC OUT_DIR TENSOR...
# Prints, per tensor and binary, the last iteration's seconds_other (where the pass
# is timed), the mean kernel seconds per iteration and the final fit, per repetition.
set -euo pipefail
old=$1 new=$2 out=$3
shift 3
mkdir -p "$out"
for rep in 1 2 3 4; do
    for f in "$@"; do
        for v in old new; do
            bin=$old
            [[ $v == new ]] && bin=$new
            "$bin" cp "$f" --rank 16 --iters 5 --tol 0 --seed 1 --threads 2 --json \
                > "$out/$v-$(basename "$f")-$rep.json" 2> /dev/null
        done
    done
done
python3 - "$out" "$@" <<'PY'
import json, os, sys
out = sys.argv[1]
for f in sys.argv[2:]:
    name = os.path.basename(f)
    for v in ("old", "new"):
        rows = []
        for rep in (1, 2, 3, 4):
            d = json.load(open(f"{out}/{v}-{name}-{rep}.json"))
            it = d["iterations"]
            rows.append(f"{it[-1]['seconds_other']:.3f}")
        fit = json.load(open(f"{out}/{v}-{name}-1.json"))["final_fit"]
        print(f"{name:32s} {v}: last-iteration other s {' '.join(rows)}  final fit {fit!r}")
PY
