#!/bin/bash
# A/B of the CPU MTTKRP at ranks between the compiled widths: base (bb4b124) against
# new (this commit), alternating, two rounds, 2 threads, nothing else running.
# BASE, NEW: the two release binaries; T: a folder holding the generated tensors
# (see ../README.md for their commands); U: uboot-commitwords-3d.tns.gz.
set -u
BASE=${BASE:-/work/sptmc-base}; NEW=${NEW:-/work/sptmc-new}
T=${T:-/work/sweep}; U=${U:-/work/shared/data/uboot-commitwords-3d.tns.gz}
OUT=${OUT:-.}
tensors="$T/longmode.tns $T/twolong.tns $T/o4long.tns $U"
for round in 1 2; do
  for f in $tensors; do
    n=$(basename "$f" | cut -d. -f1)
    for b in base new; do
      bin=$BASE; [ $b = new ] && bin=$NEW
      "$bin" bench "$f" --no-ttmc --ranks 10,16,20,24,32,40,48,50 --reps 5 \
        > "$OUT/bench-$n-$b-$round.txt" 2>&1
      for r in 10 20 40 48; do
        "$bin" cp "$f" --rank $r --iters 10 --tol 0 --seed 1 > "$OUT/cp-$n-r$r-$b-$round.txt" 2>&1
      done
    done
  done
done
