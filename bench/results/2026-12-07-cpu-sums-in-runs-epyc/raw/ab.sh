#!/bin/bash
# A/B of the CPU kernels: before (sptmc-pre, 0741a35) and after (sptmc-final, c85c3e4),
# 3 rounds, the order of the two binaries swapped every round.
# Run in a folder holding pl_long2.sptb, onelong.sptb, twolong2.sptb and big3.sptb (sptmc convert),
# with the two binaries at /work/sptmc-pre and /work/sptmc-final; outputs out-*.txt there.
F="pl_long2.sptb onelong.sptb twolong2.sptb big3.sptb /work/shared/data/uboot-commitwords-3d.tns.gz /work/shared/data/atp-matches-4d.tns.gz /work/shared/data/movielens-10m-tags-4d.tns.gz"
for round in 1 2 3; do
  if [ $((round % 2)) = 1 ]; then order="pre final"; else order="final pre"; fi
  for f in $F; do
    b=$(basename $f); b=${b%%.*}
    for bin in $order; do
      /work/sptmc-$bin bench $f --reps 5 > out-$b-$bin-$round.txt 2>/dev/null
    done
  done
done
echo done > ab.done
