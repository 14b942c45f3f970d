#!/bin/bash
# Alternating A/B: base (a08f4c9) vs new (HEAD), 2 threads, nothing else running.
cd /work/bench-odd
U=/work/shared/data/uboot-commitwords-3d.tns.gz
L=/work/sweep/longmode.tns
bin() { [ $1 = base ] && echo /tmp/base-target/release/sptmc || echo /work/main/target/release/sptmc; }
for round in 1 2; do for v in base new; do B=$(bin $v)
  $B bench $U --no-ttmc --ranks 10,16,20,32,64,72,100,128,200 --reps 5 > mttkrp-$v-$round.txt 2>&1
  for r in 10 20 72 100 128; do $B cp $U --rank $r --iters 10 --tol 0 --seed 3 > cp-r$r-$v-$round.txt 2>&1; done
  for r in 32 40 64; do $B cp-apr $U --rank $r --iters 3 > apr-r$r-$v-$round.txt 2>&1; done
  for r in 10 16 20 32 40; do $B gcp $U --rank $r --loss gaussian --epochs 1 --epoch-iters 20 > gcp-r$r-$v-$round.txt 2>&1; done
  for r in 20 100; do $B cp $L --rank $r --iters 3 --tol 0 > long-r$r-$v-$round.txt 2>&1; done
done; done
for v in base new; do B=$(bin $v)
  $B bench --gen-nnz 20000000 --gen-dims 2000000,1000000,1000 --gen-layout uniform --no-ttmc --ranks 100 --reps 3 > gen20m-$v.txt 2>&1
done
echo done > DONE
