#!/bin/bash
# Base and new builds alternating, 2 threads: all-mode MTTKRP (sptmc bench), CP-ALS
# rank 16 and GCP-SGD (gaussian, rank 16, GenTen's sample sizes for 100 epochs).
# Usage: ab.sh BASE NEW TENSOR_DIR
set -u
base=$1 new=$2 t=$3
for round in 1 2; do
  for b in "$base" "$new"; do
    for f in m5 b5 l5 b4; do
      echo "round $round $(basename $b) $f $($b bench $t/$f.tns --ranks 16 2>&1 | grep 'all modes mttkrp')"
      echo "round $round $(basename $b) $f cp $($b cp $t/$f.tns --rank 16 --iters 20 --tol 0 --seed 3 2>&1 | grep -o 'final fit.*')"
    done
    for f in m2:400:20000 m5:1498:49908 m6:1000:29646; do
      IFS=: read -r n g v <<< "$f"
      echo "round $round $(basename $b) $n gcp $($b gcp $t/$n.tns --rank 16 --loss gaussian --backend cpu --threads 2 --no-cache --epochs 3 --epoch-iters 500 --grad-nonzeros $g --grad-zeros $g --value-nonzeros $v --value-zeros $v --seed 1 2>&1 | tail -1 | grep -o 'final loss [^ ]*\|[0-9.]*s/epoch' | tr '\n' ' ')"
    done
  done
done
