#!/usr/bin/env bash
# All-mode sparse MTTKRP, sptmc (CPU engine) beside pyttb on the shared .tns files,
# 2 threads on both sides, with SPLATT's figures from BASELINES.md quoted (not run).
#
#   scripts/compare-peers.sh [OUT_DIR] [-- extra peer_compare options]
#
# OUT_DIR defaults to bench/results/<UTC date>-cpu-mttkrp-peers. Data: $SPTMC_DATA_DIR,
# else ../shared/data. pyttb: .venv/bin/python (created with `python3 -m venv .venv &&
# .venv/bin/pip install pyttb` when missing), else python3.
set -euo pipefail
cd "$(dirname "$0")/.."

out="${1:-bench/results/$(date -u +%F)-cpu-mttkrp-peers}"
[[ $# -gt 0 ]] && shift
[[ "${1:-}" == "--" ]] && shift
data="${SPTMC_DATA_DIR:-../shared/data}"
shopt -s nullglob
files=("$data"/*.tns.gz "$data"/*.tns)
if [[ ${#files[@]} -eq 0 ]]; then
    echo "no .tns files in $data (set SPTMC_DATA_DIR)" >&2
    exit 1
fi

if ! .venv/bin/python -c "import pyttb" 2>/dev/null; then
    python3 -m venv .venv
    .venv/bin/pip install --quiet pyttb
fi

export RAYON_NUM_THREADS=2 OMP_NUM_THREADS=2 OPENBLAS_NUM_THREADS=2 MKL_NUM_THREADS=2
export SPTMC_GIT_COMMIT="$(git rev-parse --short HEAD)$(git diff --quiet HEAD -- src examples scripts || echo -dirty)"
cargo build --release --example peer_compare

load_before="$(cut -d' ' -f1-3 /proc/loadavg)"
cmd=(cargo run --release --example peer_compare -- --out "$out" "$@" "${files[@]}")
"${cmd[@]}"
load_after="$(cut -d' ' -f1-3 /proc/loadavg)"

cpu="$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ //')"
cat > "$out/README.md" <<EOF
# All-mode sparse MTTKRP: sptmc vs pyttb (SPLATT quoted)

- Date (UTC): $(date -u +%FT%TZ)
- Machine: $cpu, $(nproc) cores visible, $(free -g | awk '/Mem:/ {print $2}') GiB; 2 threads on every side
  (RAYON_NUM_THREADS=OMP_NUM_THREADS=OPENBLAS_NUM_THREADS=2)
- Commit: $SPTMC_GIT_COMMIT
- Load average (1, 5, 15 min) before: $load_before; after: $load_after
- pyttb: $(.venv/bin/python -c "import pyttb, numpy; print('pyttb', pyttb.__version__, 'numpy', numpy.__version__)")
- SPLATT is not run here: its figures are from BASELINES.md, measured on an AMD EPYC machine (like-for-like only when the Machine line above says AMD EPYC),
  v2.0.0, \`splatt bench X.tns -a csf -r 32 -t 2 -i 5\`.

## Commands

\`\`\`
scripts/compare-peers.sh $out
# which runs
RAYON_NUM_THREADS=2 OMP_NUM_THREADS=2 OPENBLAS_NUM_THREADS=2 ${cmd[*]}
# and, per file, scripts/peer_mttkrp.py FILE --rank R --seed S --reps N --factors DIR --out DIR
\`\`\`

## Results

$(cat "$out/results.md")

Full numbers (per-mode medians, minimums, prepare time) in results.json.
EOF
echo "wrote $out/README.md, results.md, results.json"
