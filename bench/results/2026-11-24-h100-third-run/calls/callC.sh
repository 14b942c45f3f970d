#!/usr/bin/env bash
# Device call C: GPU peers again (fixed invocations) on the shared tensors, a generated block-dense tensor, tuning.
set -u
t0=$SECONDS
back=$OUT
tar xJf gpu-pack/gpu-bin.tar.xz -C /tmp
R=/tmp/res; mkdir -p $R/c
export SPTMC_BIN=/tmp/gpu-bin/sptmc GEN_NNZ=${GEN_NNZ:-30000000}
ROUNDS=2 PEER_FILES="data-local/*.tns.gz" STEP_TIMEOUT=260 OUT=$R/c timeout 265 scripts/gpu-run.sh peers
echo "shared peers after $((SECONDS - t0)) s" >> $R/c/progress.txt
mkdir -p $R/c/shared; mv $R/c/peers $R/c/commit.txt $R/c/times.txt $R/c/shared/
ROUNDS=1 PEER_FILES=/tmp/sptmc-blocky-$GEN_NNZ.tns STEP_TIMEOUT=200 OUT=$R/c timeout $((500 - (SECONDS - t0))) scripts/gpu-run.sh blocky peers
echo "blocky peers after $((SECONDS - t0)) s" >> $R/c/progress.txt
STEP_TIMEOUT=60 OUT=$R/c/t timeout $((570 - (SECONDS - t0))) scripts/gpu-run.sh tune
echo "all after $((SECONDS - t0)) s" >> $R/c/progress.txt
tar czf $back/c.tgz -C $R c
cat $R/c/progress.txt $R/c/shared/times.txt $R/c/times.txt $R/c/t/times.txt; cat $R/c/shared/peers/summary.txt $R/c/peers/summary.txt 2>/dev/null | head -80
