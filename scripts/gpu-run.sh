#!/usr/bin/env bash
# One command for a lent GPU machine (it has the NVIDIA driver but no Rust): run from
# the repository root with a release `sptmc` built elsewhere and the data copied in.
#
#   here:  scripts/kernel-gate.sh && cargo build --release          # embeds the PTX
#          mkdir -p data-local && cp ../shared/data/*.tns.gz data-local/
#   there: OUT=/some/dir scripts/gpu-run.sh   (carry target/release/sptmc and data-local)
#
# Writes under $OUT: the device, the self-test table (every kernel vs FP64), the
# kernel benchmark on the shared tensors and generated ones, the CUDA tuning run, and the
# PyTorch peer baseline (torch-*.txt/json) when python3 has torch.
set -u
out="${OUT:-gpu-results}"
bin="${SPTMC_BIN:-target/release/sptmc}"
mkdir -p "$out"
{ date -u +%FT%TZ; nvidia-smi; } > "$out/device.txt" 2>&1
git rev-parse --short HEAD > "$out/commit.txt" 2>/dev/null || true
status=0
"$bin" selftest --backend cuda data-local/*.tns.gz > "$out/selftest.txt" 2> "$out/selftest.log" || status=1
"$bin" selftest --backend cuda --json data-local/*.tns.gz > "$out/selftest.json" 2>> "$out/selftest.log" || status=1
"$bin" bench --backend cuda data-local/*.tns.gz > "$out/bench-shared.txt" 2> "$out/bench.log" || status=1
"$bin" bench --backend cuda > "$out/bench-generated.txt" 2>> "$out/bench.log" || status=1
# The same with every nonzero on CUDA cores (HLS-S only) and every tile on tensor cores
# (HLS-D only), for the fused-vs-split comparison; JSON for all three.
for v in "fused:" "sparse-only:--threshold 4097" "dense-only:--threshold 1"; do
    name="${v%%:*}"; opt="${v#*:}"
    "$bin" bench --backend cuda $opt --json data-local/*.tns.gz > "$out/bench-shared-$name.json" 2>> "$out/bench.log" || status=1
    "$bin" bench --backend cuda $opt --json > "$out/bench-generated-$name.json" 2>> "$out/bench.log" || status=1
done
"$bin" tune --backend cuda --tuning-dir "$out/tuning" --results "$out/tune" \
    --tns data-local/uboot-commitwords-3d.tns.gz > "$out/tune.txt" 2> "$out/tune.log" || status=1
# PyTorch peer baseline (benches/torch_peer.py: gather + index_add_, fp32 on the GPU,
# checked against float64) on the same tensors, when this machine's python3 has torch.
py="${PYTHON:-python3}"
if "$py" -c 'import torch' 2>/dev/null; then
    "$py" benches/torch_peer.py data-local/*.tns.gz --rank 32 --ttmc-ranks 8 --reps 10 \
        --device cuda --out "$out/torch-shared.json" > "$out/torch-shared.txt" 2> "$out/torch.log" || status=1
    "$py" benches/torch_peer.py --gen-nnz 50000000 --gen-seed 1 --rank 32 --ttmc-ranks 8 --reps 10 \
        --device cuda --out "$out/torch-generated.json" > "$out/torch-generated.txt" 2>> "$out/torch.log" || status=1
else
    echo "torch is absent ($py -c 'import torch' failed): no PyTorch peer run" > "$out/torch-shared.txt"
fi
echo "exit $status" >> "$out/commit.txt"
exit $status
