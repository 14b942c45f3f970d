#!/usr/bin/env bash
# Kernel compile gate (no GPU needed): every kernels/*.cu through NVRTC to PTX for sm_80
# and sm_90, then ptxas -v; fails on a compile error, any spill or any stack frame.
# Toolchain from PyPI wheels in .venv-cuda/ (created on first use).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
venv="${SPTMC_CUDA_VENV:-$root/.venv-cuda}"
py="${PYTHON:-python3}"
if [ ! -x "$venv/bin/python" ]; then
    "$py" -m venv "$venv"
fi
if ! "$venv/bin/python" -c 'import nvidia.cuda_nvrtc, nvidia.cuda_nvcc, nvidia.cuda_runtime' 2>/dev/null; then
    "$venv/bin/pip" install --quiet nvidia-cuda-nvrtc-cu12 nvidia-cuda-nvcc-cu12 nvidia-cuda-runtime-cu12
fi
site="$("$venv/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')"
exec "$venv/bin/python" "$root/scripts/kernel_gate.py" "$site" --arch sm_80 --arch sm_90 "$@"
