#!/bin/bash
# A/B of GCP-SGD: seconds of epoch 2 (50 iterations + one loss estimate) at GenTen's
# default sample sizes for 100 epochs (3·nnz/100 per stratum), rank 16, 2 threads.
declare -A G=([long4m]=249576 [twolong]=149727 [uni4d]=240000 [longmode7m]=217760)
for rep in 1 2; do
for t in longmode7m long4m twolong uni4d; do
  for b in old new; do
    out=$(./sptmc-$b gcp /work/gen/$t.sptb --rank 16 --loss gaussian --epochs 2 --epoch-iters 50 \
      --grad-nonzeros ${G[$t]} --grad-zeros ${G[$t]} --threads 2 2>&1 | grep -E "epoch =   [12] ")
    e1=$(echo "$out" | sed -n 1p | grep -oE '\(([0-9.]+)s\)' | tr -d '()s')
    e2=$(echo "$out" | sed -n 2p | grep -oE '\(([0-9.]+)s\)' | tr -d '()s')
    l2=$(echo "$out" | sed -n 2p | grep -oE 'loss = [0-9.e+]+')
    echo "rep$rep $t $b epoch2_s=$(echo "$e2 - $e1" | bc) $l2"
  done
done
done
