#!/usr/bin/env bash
# Device call A: correctness (self-test incl. Φ and completion, sanitizers, CUDA twins), decompositions, shared bench.
set -u
t0=$SECONDS
tar xJf gpu-pack/gpu-bin.tar.xz -C /tmp
R=/tmp/res; mkdir -p $R/a
SPTMC_BIN=/tmp/gpu-bin/sptmc TEST_BINS=/tmp/gpu-bin/tests STEP_TIMEOUT=${STEP_TIMEOUT:-150} OUT=$R/a \
  timeout ${TOTAL:-545} scripts/gpu-run.sh ${STEPS:-check selftest sanitize tests decomp shared}
echo "gpu-run exit $? after $((SECONDS - t0)) s" >> $R/a/commit.txt
tar czf $OUT/a.tgz -C $R a
cat $R/a/commit.txt $R/a/times.txt
grep -h "test result\|FAILED\|panicked" $R/a/tests-*.txt | head -40
tail -n 5 $R/a/selftest.txt
