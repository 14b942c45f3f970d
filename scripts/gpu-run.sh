#!/usr/bin/env bash
# One command for a lent GPU machine (it has the NVIDIA driver but no Rust): run from
# the repository root with a release `sptmc` built elsewhere and the data copied in.
#
#   here:  scripts/kernel-gate.sh && cargo build --release          # embeds the PTX
#          mkdir -p data-local && cp ../shared/data/*.tns.gz data-local/
#   there: OUT=/some/dir scripts/gpu-run.sh   (carry target/release/sptmc and data-local)
#
# Writes under $OUT (default gpu-results/):
#   device.txt, commit.txt        nvidia-smi, the commit and the script's exit status
#   selftest.txt/.json            every kernel vs FP64 on generated and shared tensors
#   copy-rate.txt                 the device-to-device copy rate (1 GiB, events, median
#                                 of 10, bytes read + written per second); every CUDA
#                                 bench JSON also holds it as "copy_rate"
#   bench-shared.txt, bench-generated.txt
#                                 tables: shared / built-in generated tensors, tuned
#                                 thresholds, fused launch
#   bench-{shared,generated,50m}-{fused,sequential,sparse-only,dense-only}.json
#       side by side, each with wall-clock and kernel-only (CUDA events) times, kernel
#       effective bandwidth and its % of the copy rate:
#       fused       tuned thresholds, one fused grid (the product)
#       sequential  tuned thresholds, dense tiles then sparse batches as two launches
#       sparse-only --threshold 4097: every nonzero on CUDA cores (HLS-S only)
#       dense-only  --threshold 1: every non-empty tile on tensor cores (HLS-D only)
#     shared = data-local/*.tns.gz (MTTKRP r16/r32, TTMc r8/r16); generated = the
#     built-in generated cases; 50m = one generated 4096³ block-dense tensor of 50M
#     nonzeros (seed 1), MTTKRP rank 32 on every mode, no TTMc.
#   bench-50m-fused.txt           table of the 50M fused run
#   tune.txt, tuning/, tune/      the CUDA tuning run
#   torch-*.txt/json              the PyTorch peer baseline, when python3 has torch
# Logs go to *.log beside them. Steps that fail set a non-zero exit but do not stop the
# rest. GEN_NNZ overrides the 50M count (e.g. for a quick trial).
#
# Steps, in order: selftest shared gen50m generated tune torch. Name some to run only
# those (`scripts/gpu-run.sh selftest shared`), e.g. to fit a device's per-command time
# limit: gen50m generates and builds the 50M tensor five times on the host CPU.
set -u
out="${OUT:-gpu-results}"
bin="${SPTMC_BIN:-target/release/sptmc}"
gen_nnz="${GEN_NNZ:-50000000}"
mkdir -p "$out"
{ date -u +%FT%TZ; nvidia-smi; } > "$out/device.txt" 2>&1
git rev-parse --short HEAD > "$out/commit.txt" 2>/dev/null || true
status=0
steps=("$@")
[[ ${#steps[@]} -eq 0 ]] && steps=(selftest shared gen50m generated tune torch)
want() { [[ " ${steps[*]} " == *" $1 "* ]]; }
echo "steps: ${steps[*]}" >> "$out/commit.txt"
# Fused vs sequential launches vs HLS-S only vs HLS-D only, one JSON each.
variants=("fused:--launch fused" "sequential:--launch sequential"
          "sparse-only:--threshold 4097" "dense-only:--threshold 1")
if want selftest; then
"$bin" selftest --backend cuda data-local/*.tns.gz > "$out/selftest.txt" 2> "$out/selftest.log" || status=1
"$bin" selftest --backend cuda --json data-local/*.tns.gz > "$out/selftest.json" 2>> "$out/selftest.log" || status=1
fi
if want shared; then
"$bin" bench --backend cuda data-local/*.tns.gz > "$out/bench-shared.txt" 2> "$out/bench.log" || status=1
grep -h "device copy rate" "$out/bench-shared.txt" > "$out/copy-rate.txt" || status=1
for v in "${variants[@]}"; do
    name="${v%%:*}"; opt="${v#*:}"
    "$bin" bench --backend cuda $opt --json data-local/*.tns.gz \
        > "$out/bench-shared-$name.json" 2>> "$out/bench.log" || status=1
done
fi
if want gen50m; then
# The large generated case: MTTKRP rank 32, all modes (generation and HLS build take a
# while on the CPU; the kernels do not).
"$bin" bench --backend cuda --gen-nnz "$gen_nnz" --gen-seed 1 --ranks 32 --no-ttmc --reps 10 \
    > "$out/bench-50m-fused.txt" 2> "$out/bench-50m.log" || status=1
for v in "${variants[@]}"; do
    name="${v%%:*}"; opt="${v#*:}"
    "$bin" bench --backend cuda $opt --json --gen-nnz "$gen_nnz" --gen-seed 1 --ranks 32 --no-ttmc \
        --reps 10 > "$out/bench-50m-$name.json" 2>> "$out/bench-50m.log" || status=1
done
fi
if want generated; then
"$bin" bench --backend cuda > "$out/bench-generated.txt" 2>> "$out/bench.log" || status=1
for v in "${variants[@]}"; do
    name="${v%%:*}"; opt="${v#*:}"
    "$bin" bench --backend cuda $opt --json > "$out/bench-generated-$name.json" 2>> "$out/bench.log" || status=1
done
fi
if want tune; then
"$bin" tune --backend cuda --tuning-dir "$out/tuning" --results "$out/tune" \
    --tns data-local/uboot-commitwords-3d.tns.gz > "$out/tune.txt" 2> "$out/tune.log" || status=1
fi
if want torch; then
# PyTorch peer baseline (benches/torch_peer.py: gather + index_add_, fp32 on the GPU,
# checked against float64) on the same tensors, when this machine's python3 has torch.
py="${PYTHON:-python3}"
if "$py" -c 'import torch' 2>/dev/null; then
    "$py" benches/torch_peer.py data-local/*.tns.gz --rank 32 --ttmc-ranks 8 --reps 10 \
        --device cuda --out "$out/torch-shared.json" > "$out/torch-shared.txt" 2> "$out/torch.log" || status=1
    "$py" benches/torch_peer.py --gen-nnz "$gen_nnz" --gen-seed 1 --rank 32 --ttmc-ranks 8 --reps 10 \
        --device cuda --out "$out/torch-generated.json" > "$out/torch-generated.txt" 2>> "$out/torch.log" || status=1
else
    echo "torch is absent ($py -c 'import torch' failed): no PyTorch peer run" > "$out/torch-shared.txt"
fi
fi
echo "exit $status" >> "$out/commit.txt"
exit $status
