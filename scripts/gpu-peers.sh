#!/usr/bin/env bash
# The GPU peers beside sptmc: MM-CSF (mixed-mode CSF MTTKRP, and its TTM) and ParTI
# (COO one-kernel GPU MTTKRP), built for sm_90 and run on the same tensors and ranks,
# alternating with sptmc. Their code is fetched into peers/ (ignored), never committed.
#
#   here:   scripts/gpu-peers.sh fetch   # git clone both into peers/src (or copy a mirror)
#           scripts/gpu-peers.sh build   # → peers/bin/{mmcsf-mttkrp,mmcsf-ttm,parti-mttkrp}
#           scripts/gpu-peers.sh check   # CPU only: both read our .tns as sptmc does
#   device: carry peers/bin; OUT=dir scripts/gpu-peers.sh run FILE.tns[.gz]...
#
# build uses `nvcc` from PATH when there is one, else CUDA 13.0's nvcc from PyPI in
# .venv-peers (13.0: what driver 580 runs without a newer driver); cudart, BLAS and
# LAPACK are linked statically, so the device needs only the driver. Two build fixes,
# applied to the fetched copy only: MM-CSF's `int` functions without a `return` get one
# (scripts/peer_fix_returns.py: g++ -O3 otherwise crashes in them), and ParTI's example
# is given the thread-count argument its library's sort gained; ParTI's cuSPARSE and
# cuSOLVER handle helpers, which MTTKRP never calls, link against stand-ins.
#
# run writes under $OUT (default gpu-results/peers): per tensor the headered copy's
# checks, each tool's raw log per round, and peers.tsv (tool, tensor, op, mode, rank,
# round, milliseconds as the tool reports them). Environment: SPTMC_BIN, RANK (32),
# TTM_RANK (16), ROUNDS (3), PEERS_BIN (peers/bin).
set -uo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
peers="$root/peers"
cmd="${1:-}"
shift || true

nvcc_path() {
    if command -v nvcc >/dev/null 2>&1; then command -v nvcc; return; fi
    local venv="$root/.venv-peers"
    if [ ! -x "$venv/bin/python" ]; then python3 -m venv "$venv"; fi
    "$venv/bin/python" -c 'import nvidia.cu13' 2>/dev/null ||
        "$venv/bin/pip" install --quiet 'nvidia-cuda-nvcc==13.0.*' 'nvidia-cuda-runtime==13.0.*' \
            'nvidia-cuda-crt==13.0.*' 'nvidia-nvvm==13.0.*' 'nvidia-cuda-cccl==13.0.*' >&2
    echo "$("$venv/bin/python" -c 'import nvidia.cu13; print(list(nvidia.cu13.__path__)[0])')/bin/nvcc"
}

case "$cmd" in
fetch)
    mkdir -p "$peers/src"
    [ -d "$peers/src/mmcsf" ] || git clone --depth 1 https://github.com/isratnisa/MM-CSF "$peers/src/mmcsf"
    [ -d "$peers/src/parti" ] || git clone --depth 1 https://github.com/hpcgarage/ParTI "$peers/src/parti"
    ;;
build)
    set -e
    for p in mmcsf parti; do
        [ -d "$peers/src/$p" ] || { echo "gpu-peers: no $peers/src/$p (run: $0 fetch)" >&2; exit 1; }
    done
    nvcc="$(nvcc_path)"
    cuda="$(dirname "$(dirname "$nvcc")")"
    arch="-gencode arch=compute_90,code=sm_90"
    link="-L$cuda/lib -L$cuda/lib64 -lcudart_static -ldl -lrt -lpthread"
    blas="$(ls /usr/lib/x86_64-linux-gnu/lapack/liblapack.a /usr/lib/x86_64-linux-gnu/blas/libblas.a 2>/dev/null | tr '\n' ' ')"
    [ -n "$blas" ] || { echo "gpu-peers: needs static LAPACK/BLAS (apt-get install liblapack-dev libblas-dev)" >&2; exit 1; }
    blas="$blas $(gcc -print-file-name=libgfortran.a) $(gcc -print-file-name=libquadmath.a)"
    work="$peers/build"
    rm -rf "$work" && mkdir -p "$work" "$peers/bin"

    echo "== MM-CSF ($nvcc)"
    cp -r "$peers/src/mmcsf/src" "$work/mmcsf"
    ( cd "$work/mmcsf"
      { for f in mttkrp_gpu.cu cpd_cpu.cu mttkrp.cu ttm_gpu.cu ttm.cu; do
            "$nvcc" $arch -Xcompiler -fopenmp,-Wreturn-type --std=c++14 -DADD_ -c -o /dev/null "$f" 2>&1
        done
        for f in mttkrp_cpu.cpp ttm_cpu.cpp; do
            g++ -std=c++14 -fopenmp -Wreturn-type -c -o /dev/null "$f" 2>&1
        done; } > returns.log
      python3 "$root/scripts/peer_fix_returns.py" . < returns.log
      make mttkrp ttm NVCC="$nvcc" BOOSTFLAG= LAPACK_INCLUDE_PATH=/usr/include/x86_64-linux-gnu \
          "NVCCFLAGS=-O3 -w $arch -Xptxas -dlcm=ca -Xcompiler -fopenmp --std=c++14 -m64 -lineinfo -DADD_" \
          "NVCCLINKFLAGS=$link" "CXXLINKFLAGS=$blas" > make.log 2>&1 || { tail -20 make.log; exit 1; } )
    install -s "$work/mmcsf/mttkrp" "$peers/bin/mmcsf-mttkrp"
    install -s "$work/mmcsf/ttm" "$peers/bin/mmcsf-ttm"

    echo "== ParTI"
    cp -r "$peers/src/parti" "$work/parti"
    ( cd "$work/parti"
      defs="-DPARTI_INDEX_TYPEWIDTH=32 -DPARTI_VALUE_TYPEWIDTH=32 -DPARTI_ELEMENT_INDEX_TYPEWIDTH=8 -DPARTI_USE_CUDA -DPARTI_USE_OPENMP -DcudaThreadSynchronize=cudaDeviceSynchronize"
      mkdir -p obj shim
      printf '%s\n' '#pragma once' 'typedef struct cusparseContext *cusparseHandle_t;' \
          'static inline int cusparseCreate(cusparseHandle_t *h) { *h = 0; return 1; }' > shim/cusparse.h
      printf '%s\n' '#pragma once' 'typedef struct cusolverSpContext *cusolverSpHandle_t;' \
          'static inline int cusolverSpCreate(cusolverSpHandle_t *h) { *h = 0; return 1; }' > shim/cusolverSp.h
      for f in $(find src -name '*.c'); do
          gcc -O3 -fopenmp -std=gnu99 $defs -Iinclude -I"$cuda/include" -c "$f" -o "obj/$(echo "$f" | tr / _).o"
      done
      # A few CUDA files (dense and semi-sparse products, not MTTKRP) use APIs CUDA 13
      # removed: they are left out, and the link says so if MTTKRP needed them.
      for f in $(find src -name '*.cu'); do
          "$nvcc" -O3 -w $arch -Xcompiler -fopenmp $defs -Ishim -Iinclude -c "$f" \
              -o "obj/$(echo "$f" | tr / _).o" 2> /dev/null || echo "ParTI: left out $f"
      done
      ar rcs libParTI.a obj/*.o
      sed -e 's/sptSparseTensorSortIndex(&X, 1)/sptSparseTensorSortIndex(\&X, 1, 1)/' \
          -e 's/sptSparseTensorSortIndexCustomOrder(&X, mode_order, 1)/sptSparseTensorSortIndexCustomOrder(\&X, mode_order, 1, 1)/' \
          examples/mttkrp_gpu.cu > mttkrp_gpu.cu
      "$nvcc" -O3 -w $arch -Xcompiler -fopenmp $defs -Iinclude mttkrp_gpu.cu -o mttkrp_gpu libParTI.a $link -lm -lgomp
      # The CPU example, for `check` (reading our files) only.
      gcc -O3 -fopenmp -std=gnu99 $defs -Iinclude -c examples/mttkrp.c -o mttkrp_cpu.o
      "$nvcc" -Xcompiler -fopenmp mttkrp_cpu.o -o mttkrp_cpu libParTI.a $link -lm -lgomp )
    install -s "$work/parti/mttkrp_gpu" "$peers/bin/parti-mttkrp"
    ls -la "$peers/bin"
    ;;
check)
    # CPU only: MM-CSF's COO CPU MTTKRP over its constant factors must give each row's
    # value sum (peer_check_input.py); ParTI must report the extents and nonzeros sptmc does.
    set -e
    bin="${SPTMC_BIN:-$root/target/release/sptmc}"
    tmp="$(mktemp -d)"
    trap 'rm -rf "$tmp"' EXIT
    for f in "$@"; do
        name="$(basename "$f")"; name="${name%.gz}"; name="${name%.tns}"
        "$root/scripts/peer-tns.sh" "$f" "$tmp/$name.tns"
        order="$(head -1 "$tmp/$name.tns")"
        for ((m = 0; m < order; m++)); do
            "$peers/build/mmcsf/mttkrp" -i "$tmp/$name.tns" -m "$m" -R 4 -t 1 -o "$tmp/out.txt" > "$tmp/log" 2>&1 ||
                { echo "$name mode $m: MM-CSF failed: $(tail -1 "$tmp/log")"; continue; }
            python3 "$root/scripts/peer_check_input.py" "$tmp/$name.tns" "$m" "$tmp/out.txt" --accumulated | sed "s|^$tmp/out.txt|$name mode $m (MM-CSF)|"
        done
        want="$("$bin" info "$f" --json | python3 -c 'import json,sys; j=json.load(sys.stdin); print("x".join(map(str, j["dims"])), j["nnz"])')"
        got="$("$peers/build/parti/mttkrp_cpu" -i "$tmp/$name.tns" -m 0 -r 4 2>&1 | sed -n 's/^DIMS=\([0-9x]*\) NNZ=\([0-9]*\).*/\1 \2/p')"
        if [ "$want" = "$got" ]; then echo "$name: ParTI reads $got (extents, nonzeros) as sptmc"; else
            echo "$name: ParTI reads '$got', sptmc '$want'"; fi
    done
    ;;
run)
    out="${OUT:-gpu-results}/peers"
    bin="${SPTMC_BIN:-target/release/sptmc}"
    pbin="${PEERS_BIN:-$peers/bin}"
    rank="${RANK:-32}"
    ttm_rank="${TTM_RANK:-16}"
    rounds="${ROUNDS:-3}"
    mkdir -p "$out"
    tmp="$(mktemp -d)"
    trap 'rm -rf "$tmp"' EXIT
    tsv="$out/peers.tsv"
    printf 'tool\ttensor\top\tmode\trank\tround\tms\n' > "$tsv"
    for f in "$@"; do
        name="$(basename "$f")"; name="${name%.gz}"; name="${name%.tns}"
        "$root/scripts/peer-tns.sh" "$f" "$tmp/$name.tns" || continue
        order="$(head -1 "$tmp/$name.tns")"
        for ((r = 1; r <= rounds; r++)); do
            # Alternating, one tool after the other on the same tensor in each round.
            "$bin" bench "$f" --backend cuda --ranks "$rank" --ttmc-ranks "$ttm_rank" --json \
                > "$out/$name-sptmc-$r.json" 2> "$out/$name-sptmc-$r.log"
            python3 "$root/scripts/gpu_peers_table.py" sptmc "$name" "$r" "$out/$name-sptmc-$r.json" >> "$tsv"
            timeout 600 "$pbin/mmcsf-mttkrp" -i "$tmp/$name.tns" -m 0 -R "$rank" -t 12 -f 128 -w 1 -v 1 \
                > "$out/$name-mmcsf-$r.log" 2>&1
            python3 "$root/scripts/gpu_peers_table.py" mmcsf "$name" "$r" "$out/$name-mmcsf-$r.log" "$rank" >> "$tsv"
            for ((m = 0; m < order; m++)); do
                # MM-CSF's TTM refuses a file whose name lacks the mode's digit.
                ln -sf "$tmp/$name.tns" "$tmp/ttm-mode$m.tns"
                timeout 600 "$pbin/mmcsf-ttm" -i "$tmp/ttm-mode$m.tns" -m "$m" -R "$ttm_rank" -t 3 \
                    > "$out/$name-mmcsf-ttm-$m-$r.log" 2>&1
                python3 "$root/scripts/gpu_peers_table.py" mmcsf-ttm "$name" "$r" "$out/$name-mmcsf-ttm-$m-$r.log" "$ttm_rank" "$m" >> "$tsv"
                timeout 600 "$pbin/parti-mttkrp" -i "$tmp/$name.tns" -m "$m" -r "$rank" -d 0 -p 15 \
                    > "$out/$name-parti-$m-$r.log" 2>&1
                python3 "$root/scripts/gpu_peers_table.py" parti "$name" "$r" "$out/$name-parti-$m-$r.log" "$rank" "$m" >> "$tsv"
            done
        done
    done
    python3 "$root/scripts/gpu_peers_table.py" --summary "$tsv" > "$out/summary.txt"
    cat "$out/summary.txt"
    ;;
*)
    sed -n '2,22p' "$0"
    exit 2
    ;;
esac
