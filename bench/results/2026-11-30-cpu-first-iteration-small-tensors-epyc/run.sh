#!/bin/bash
# Alternating three-way run: old (63d7f94, before the bucket build), base (a269f07),
# new (working tree). CP-ALS r16, 4 iterations, tol 0, 2 threads; the order of the
# builds rotates every round.
OUT=${OUT:-raw-large}; mkdir -p $OUT
ROUNDS=${ROUNDS:-3}
FILES=${FILES:-"/work/gen/blocky.sptb /work/floor-data/uboot-commitwords-3d.tns /work/floor-data/atp-matches-4d.tns /work/floor-data/movielens-10m-tags-4d.tns /work/gen/longmode7m.sptb /work/gen/long4m.sptb /work/gen/uni4d.sptb /work/gen/twolong.sptb"}
for round in $(seq 1 $ROUNDS); do
  case $((round % 3)) in 1) order="old base new";; 2) order="new old base";; 0) order="base new old";; esac
  for f in $FILES; do
    t=$(basename $f | sed 's/\.[a-z]*$//')
    for b in $order; do
      /usr/bin/time -f "%e %M" -o $OUT/$t.$b.$round.time /work/sptmc-$b cp $f --rank 16 --iters 4 --tol 0 --threads 2 --json > $OUT/$t.$b.$round.cp.json 2>$OUT/$t.$b.$round.cp.err
    done
  done
done
