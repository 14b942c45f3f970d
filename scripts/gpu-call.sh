#!/usr/bin/env bash
# One call on the lent GPU machine, with what scripts/gpu-pack.sh built carried beside the
# repository (gpu-pack/, .whl/, data-local/):
#
#   bash scripts/gpu-call.sh [STEPS...]      (default: check tests gcp dist)
#
# Unpacks the binaries, runs scripts/gpu-run.sh with them (SPTMC_BIN, SPTMC_MPI_BIN,
# TEST_BINS) and the steps named, and leaves everything under $OUT/res.tgz; prints the
# step times, the tests' tallies and the gcp/dist table last. TOTAL (default 540) bounds
# the whole call, STEP_TIMEOUT (default 150) each command.
set -u
t0=$SECONDS
out="${OUT:?run on the device machine, where OUT is set}"
tar xJf gpu-pack/gpu-bin.tar.xz -C /tmp
res=/tmp/res
mkdir -p "$res"
steps=("$@")
[[ ${#steps[@]} -eq 0 ]] && steps=(check tests gcp dist)
SPTMC_BIN=/tmp/gpu-bin/sptmc SPTMC_MPI_BIN=/tmp/gpu-bin/sptmc-mpi TEST_BINS=/tmp/gpu-bin/tests \
    STEP_TIMEOUT="${STEP_TIMEOUT:-150}" OUT="$res" timeout "${TOTAL:-540}" scripts/gpu-run.sh "${steps[@]}"
echo "gpu-run exit $? after $((SECONDS - t0)) s" >> "$res/commit.txt"
tar czf "$out/res.tgz" -C /tmp res
cat "$res/commit.txt" "$res/times.txt"
grep -h "test result\|FAILED\|panicked" "$res"/tests-*.txt 2> /dev/null | head -40
cat "$res/gcp-dist-summary.txt" 2> /dev/null
