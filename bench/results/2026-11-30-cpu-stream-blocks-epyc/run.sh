#!/bin/bash
# Alternating A/B of the streamed MTTKRP: before (unblocked) and after (blocks).
set -u
OUT=$1; BEFORE=$2; AFTER=$3
mkdir -p $OUT/raw
for round in 1 2 3; do
  for t in longmode7m long4m uni4d twolong; do
    for side in before after; do
      b=$BEFORE; [ $side = after ] && b=$AFTER
      $b bench /work/gen/$t.sptb --ranks 16,32 --no-ttmc --reps 5 --threads 2 --json > $OUT/raw/bench-$t-$side-$round.json 2>$OUT/raw/bench-$t-$side-$round.err
      $b cp /work/gen/$t.sptb --rank 16 --iters 8 --tol 0 --threads 2 --json > $OUT/raw/cp-$t-$side-$round.json 2>/dev/null
    done
  done
done
