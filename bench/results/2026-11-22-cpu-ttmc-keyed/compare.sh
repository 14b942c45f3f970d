#!/usr/bin/env bash
# TTMc per mode, two sptmc binaries side by side: for each shared tensor, ROUNDS rounds
# of `sptmc bench` alternating OLD and NEW (so a slow spell of the VM hits both), each
# writing JSON; summary.py then takes each side's median over rounds of the per-run
# medians.
#   ROUNDS=3 compare.sh OLD_BIN NEW_BIN OUT_DIR [DATA_DIR]
set -euo pipefail
old="$1"; new="$2"; out="$3"; data="${4:-../shared/data}"
rounds="${ROUNDS:-3}"
mkdir -p "$out"
export RAYON_NUM_THREADS=2
for f in "$data"/*.tns.gz; do
    name="$(basename "$f" .tns.gz)"
    for r in $(seq "$rounds"); do
        for side in old new; do
            bin="$old"; [ "$side" = new ] && bin="$new"
            "$bin" bench "$f" --reps 5 --backend cpu --ranks 16 --ttmc-ranks 8,16 --json \
                > "$out/$name.$side.$r.json" 2>/dev/null
        done
    done
done
