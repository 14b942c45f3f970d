#!/usr/bin/env bash
# Device call F: tune the H100's thresholds for f32 values beside the fp16 ones.
set -u
t0=$SECONDS
back=$OUT
R=/tmp/res/f; mkdir -p $R/tuning
cp gpu-pack/tuning-in/*.toml $R/tuning/
B=gpu-pack/sptmc-f; chmod +x $B
$B --version > $R/commit.txt 2>&1; nvidia-smi > $R/device.txt 2>&1
timeout 60 python3 data-local/gen_tensor.py blocky /tmp/blocky10m.tns --nnz 10000000 --dims 4096,4096,4096 --seed 1 > $R/blocky.log 2>&1
echo "gen after $((SECONDS - t0)) s" >> $R/progress.txt
timeout 150 $B tune --backend cuda --values f32 --tuning-dir $R/tuning --results $R/tune \
  --tns data-local/uboot-commitwords-3d.tns.gz --tns /tmp/blocky10m.tns > $R/tune.txt 2> $R/tune.log
echo "tune exit $? after $((SECONDS - t0)) s" >> $R/progress.txt
tar czf $back/f.tgz -C /tmp/res f
cat $R/progress.txt; tail -n 30 $R/tune.txt; cat $R/tuning/*.toml | head -60
