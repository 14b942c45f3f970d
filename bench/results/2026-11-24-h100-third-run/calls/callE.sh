#!/usr/bin/env bash
# Device call E: the GPU peers on a generated 50M-nonzero block-dense tensor.
set -u
t0=$SECONDS
back=$OUT
tar xJf gpu-pack/gpu-bin.tar.xz -C /tmp
cp gpu-pack/gpu-peers.sh scripts/gpu-peers.sh   # the fixed invocations (committed as 71a9534)
R=/tmp/res/e; mkdir -p $R
export SPTMC_BIN=/tmp/gpu-bin/sptmc GEN_NNZ=50000000
ROUNDS=1 PEER_FILES=/tmp/sptmc-blocky-$GEN_NNZ.tns STEP_TIMEOUT=330 OUT=$R timeout 480 scripts/gpu-run.sh blocky peers
echo "all after $((SECONDS - t0)) s" >> $R/progress.txt
tar czf $back/e.tgz -C /tmp/res e
cat $R/progress.txt $R/times.txt $R/peers/summary.txt
