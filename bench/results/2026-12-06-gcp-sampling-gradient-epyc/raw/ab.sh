#!/usr/bin/env bash
# Base and new sptmc alternating on GCP-SGD, 2 threads, CPU backend: per case, the mean
# seconds of epochs 2 and 3 (epoch 1 holds the setup) and the final loss (the same bits
# expected from both builds).
#   BASE=/path/sptmc-base NEW=/path/sptmc-new DATA=/work/shared/data SWEEP=/work/sweep raw/ab.sh
set -u
cases=(
  "$DATA/movielens-100k.tns.gz 16 gaussian 1000 3000"
  "$DATA/movielens-100k.tns.gz 10 gaussian 1000 3000"
  "$DATA/movielens-latest-small-4d.tns.gz 10 gaussian 1000 3026"
  "$DATA/uboot-commitwords-3d.tns.gz 16 gaussian 200 60665"
  "$SWEEP/dense3.tns 16 gaussian 200 34411"
  "$SWEEP/dense3.tns 24 gaussian 200 34411"
  "$SWEEP/dense3.tns 32 gaussian 200 34411"
  "$SWEEP/o4bin.tns 16 bernoulli-odds 200 44381"
  "$SWEEP/o4.tns 24 gaussian 200 44381"
  "$SWEEP/small.tns 24 poisson-log 200 30000"
  "$SWEEP/longmode.tns 16 gaussian 50 108609"
  "$SWEEP/longmode.tns 24 gaussian 50 108609"
)
for round in 1 2; do
  for c in "${cases[@]}"; do
    read -r f r l iters g <<< "$c"
    for b in "$BASE" "$NEW"; do
      out=$("$b" gcp "$f" --rank "$r" --loss "$l" --epochs 3 --epoch-iters "$iters" --seed 1 \
            --grad-nonzeros "$g" --grad-zeros "$g" --threads 2 --backend cpu 2>&1)
      t=$(grep "epoch =" <<< "$out" | awk '{gsub(/[()s]/,"",$NF); t[NR]=$NF} END {printf "%.3f", (t[3]-t[1])/2}')
      loss=$(grep -o "final loss [^ ]*" <<< "$out")
      echo "$round $(basename "$f") r$r $l $(basename "$b") $t s/epoch, $loss"
    done
  done
done
