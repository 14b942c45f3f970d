#!/usr/bin/env bash
# Device call D: the fixed tests and f32 dense kernels (twins, self-test, sanitizers), f16 vs f32 cost.
set -u
t0=$SECONDS
back=$OUT
tar xJf gpu-pack/gpu-bin.tar.xz -C /tmp
R=/tmp/res/d; mkdir -p $R
B=/tmp/gpu-bin/sptmc
export SPTMC_BIN=$B
TEST_BINS=/tmp/gpu-bin/tests STEP_TIMEOUT=150 OUT=$R timeout 400 scripts/gpu-run.sh check tests selftest
echo "tests+selftest after $((SECONDS - t0)) s" >> $R/progress.txt
# f32 dense kernels under the sanitizers: a generated block-dense tensor forced to f32.
for tool in memcheck racecheck; do
  timeout 60 compute-sanitizer --tool $tool --error-exitcode 9 $B selftest --backend cuda --dim 48 --nnz 8000 --values f32 > $R/$tool-f32.txt 2>&1; echo "$tool-f32 exit $?" >> $R/progress.txt
done
# The cost of f32 values: shared tensors and 50M generated, f16 and f32 alternating.
for round in 1 2; do for v in f16 f32; do
  timeout 60 $B bench --backend cuda --json --values $v data-local/*.tns.gz > $R/bench-shared-$v-$round.json 2> $R/bench-shared-$v-$round.log
  timeout 60 $B bench --backend cuda --json --values $v --gen-nnz 50000000 --gen-seed 1 --ranks 32 --ttmc-ranks 8 --reps 10 > $R/bench-50m-$v-$round.json 2> $R/bench-50m-$v-$round.log
done; done
echo "bench after $((SECONDS - t0)) s" >> $R/progress.txt
for v in f16 f32; do timeout 60 $B cp data-local/uboot-commitwords-3d.tns.gz --rank 16 --iters 20 --tol 0 --backend cuda --values $v --json > $R/cp-uboot-$v.json 2> $R/cp-uboot-$v.log; done
echo "all after $((SECONDS - t0)) s" >> $R/progress.txt
tar czf $back/d.tgz -C /tmp/res d
cat $R/progress.txt $R/commit.txt $R/times.txt; grep -h "test result\|FAILED\|panicked" $R/tests-*.txt | head -30; tail -n 2 $R/selftest.txt $R/memcheck-f32.txt $R/racecheck-f32.txt
