#!/usr/bin/env bash
# Device call B: GPU peers on the shared tensors, the 50M generated bench, ncu, torch.
set -u
t0=$SECONDS
back=$OUT
tar xJf gpu-pack/gpu-bin.tar.xz -C /tmp
R=/tmp/res; mkdir -p $R/b
export SPTMC_BIN=/tmp/gpu-bin/sptmc
ROUNDS=2 PEER_FILES="data-local/*.tns.gz" STEP_TIMEOUT=330 OUT=$R/b timeout 340 scripts/gpu-run.sh peers
echo "peers after $((SECONDS - t0)) s" >> $R/b/progress.txt
mv $R/b/commit.txt $R/b/commit-peers.txt; mv $R/b/times.txt $R/b/times-peers.txt
STEP_TIMEOUT=60 OUT=$R/b timeout $((570 - (SECONDS - t0))) scripts/gpu-run.sh gen50m ncu torch
echo "all after $((SECONDS - t0)) s" >> $R/b/progress.txt
tar czf $back/b.tgz -C $R b
cat $R/b/progress.txt $R/b/times*.txt; cat $R/b/peers/summary.txt 2>/dev/null | head -60
