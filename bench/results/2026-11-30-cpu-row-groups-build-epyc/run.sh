#!/bin/bash
# Alternating A/B of the prepare and the first iteration: builds base (63d7f94) and new.
# Per tensor and round: `sptmc cp FILE --rank 16 --iters 4 --tol 0 --threads 2 --json`,
# wall time and peak RSS from /usr/bin/time; prepare time from `sptmc bench`'s line.
OUT=${OUT:-raw}; mkdir -p $OUT
FILES="/work/gen/longmode7m.sptb /work/gen/long4m.sptb /work/gen/uni4d.sptb /work/gen/twolong.sptb /work/gen/blocky.sptb /work/gen3/ord5.sptb /work/floor-data/uboot-commitwords-3d.tns /work/floor-data/atp-matches-4d.tns /work/floor-data/movielens-10m-tags-4d.tns"
for round in 1 2 3; do
  for f in $FILES; do
    t=$(basename $f | sed 's/\.[a-z]*$//')
    if [ $((round % 2)) = 1 ]; then order="base new"; else order="new base"; fi
    for b in $order; do
      bin=/work/sptmc-s19$b
      /usr/bin/time -f "%e %M" -o $OUT/$t.$b.$round.time $bin cp $f --rank 16 --iters 4 --tol 0 --threads 2 --json > $OUT/$t.$b.$round.cp.json 2>$OUT/$t.$b.$round.cp.err
      $bin bench $f --ranks 16 --no-ttmc --reps 1 --threads 2 2>&1 | grep "^prepare" > $OUT/$t.$b.$round.prep 
    done
  done
done
