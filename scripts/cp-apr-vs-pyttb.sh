#!/usr/bin/env bash
# CP-APR (MU) seconds per outer iteration: `sptmc cp-apr` (CPU engine) beside pyttb's
# cp_apr(algorithm="mu") on the shared .tns files, 2 threads on both sides, in one run,
# from the same initial factors. Writes OUT_DIR/README.md and results.json.
#
# Both sides run ITERS outer iterations (default 20; SMALL_ITERS for uboot and atp,
# default 3, where pyttb takes minutes per iteration) with tol 0 (never stopping early)
# and pyttb's defaults otherwise (10 inner iterations, kappa 0.01, ...). Ours and pyttb
# alternate for ROUNDS rounds per tensor (default 3) and each side's median over the
# rounds is compared: on a shared machine the speed of the whole CPU swings, and
# alternating puts both sides through it. sptmc's time is its `seconds_per_iter` (the
# whole CP-APR loop with the per-iteration log-likelihood; not the file read or the
# HLS build); pyttb's is the wall time of cp_apr / iterations (it computes its
# log-likelihood once, at the end).
#
#   [ROUNDS=3] [ITERS=20] [SMALL_ITERS=3] [RANK=16] [SPTMC_BIN=...] [SPTMC_PYTHON=...] \
#       scripts/cp-apr-vs-pyttb.sh [OUT_DIR] [TENSOR.tns.gz ...]
#
# Without TENSOR arguments every *.tns.gz in $SPTMC_DATA_DIR (else ../shared/data).
# SPTMC_BIN skips the release build (e.g. a binary built elsewhere); SPTMC_PYTHON is a
# Python with pyttb (default .venv/bin/python, created with pyttb when missing).
set -euo pipefail
cd "$(dirname "$0")/.."
out="${1:-bench/results/$(date -u +%F)-cpu-cp-apr-xeon}"
shift || true
rounds="${ROUNDS:-3}"
iters="${ITERS:-20}"
small_iters="${SMALL_ITERS:-3}"
rank="${RANK:-16}"
data="${SPTMC_DATA_DIR:-../shared/data}"
py="${SPTMC_PYTHON:-.venv/bin/python}"
if [ "$py" = .venv/bin/python ] && ! "$py" -c "import pyttb" 2>/dev/null; then
    python3 -m venv .venv && .venv/bin/pip install --quiet pyttb
fi
export RAYON_NUM_THREADS=2 OMP_NUM_THREADS=2 OPENBLAS_NUM_THREADS=2 MKL_NUM_THREADS=2
if [ -n "${SPTMC_BIN:-}" ]; then
    bin="$SPTMC_BIN"
else
    cargo build --release --quiet
    bin="${CARGO_TARGET_DIR:-target}/release/sptmc"
fi
if [ "$#" -gt 0 ]; then files=("$@"); else files=("$data"/*.tns.gz); fi
mkdir -p "$out"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
load_before="$(cut -d' ' -f1-3 /proc/loadavg)"
json="["
table="| tensor | nnz | outer iterations | sptmc s/iter | pyttb s/iter | pyttb/sptmc | sptmc final log-likelihood | pyttb final log-likelihood | rel. diff |
|---|---|---|---|---|---|---|---|---|
"
for f in "${files[@]}"; do
    name="$(basename "$f" .tns.gz)"
    case "$name" in uboot*|atp*) its="$small_iters" ;; *) its="$iters" ;; esac
    # The same nonnegative initial factors for both sides: uniform in [0, 1), seed 1.
    init="$work/$name-init"
    "$py" - "$f" "$init" "$rank" <<'PY'
import os, sys
import numpy as np
sys.path.insert(0, "scripts")
from pyttb_check import read_tns
x = read_tns(sys.argv[1])
os.makedirs(sys.argv[2], exist_ok=True)
rng = np.random.default_rng(1)
for m, d in enumerate(x.shape):
    np.savetxt(os.path.join(sys.argv[2], f"factor-{m}.txt"), rng.random((d, int(sys.argv[3]))), fmt="%.9e")
PY
    "$bin" cp-apr "$f" --rank "$rank" --iters 1 --tol 0 --init "$init" --backend cpu --json > /dev/null 2>&1 # warm the .sptb cache
    ours_all="["; peer_all="["
    for _ in $(seq "$rounds"); do
        # To a file first: a reader started beside it in a pipe (Python's start-up) would
        # take one of the two cores while sptmc runs.
        "$bin" cp-apr "$f" --rank "$rank" --iters "$its" --tol 0 --init "$init" --backend cpu --threads 2 --json > "$work/ours.json" 2>/dev/null
        ours_all+="$("$py" -c 'import json,sys; d=json.load(open(sys.argv[1])); d.pop("weights"); print(json.dumps(d))' "$work/ours.json"),"
        peer_all+="$("$py" scripts/pyttb_cp_apr.py "$f" --rank "$rank" --iters "$its" --tol 0 --init "$init"),"
    done
    ours="${ours_all%,}]"; peer="${peer_all%,}]"
    row="$("$py" - "$name" "$ours" "$peer" "$its" <<'PY'
import json, statistics, sys
name, ours, peer, its = sys.argv[1], json.loads(sys.argv[2]), json.loads(sys.argv[3]), sys.argv[4]
o = statistics.median(r["seconds_per_iter"] for r in ours)
p = statistics.median(r["seconds_per_iter"] for r in peer)
lo, lp = ours[0]["log_likelihood"], peer[0]["log_likelihood"]
try:
    rel = f"{abs(lo - float(lp)) / abs(float(lp)):.1e}"
except (TypeError, ValueError, ZeroDivisionError):
    rel = "-"
print(f"| {name} | {ours[0]['nnz']} | {its} | {o:.4f} | {p:.3f} | {p/o:.1f}× | {lo:.8e} | {lp} | {rel} |")
PY
)"
    table+="$row
"
    echo "$row"
    json+="{\"tensor\":\"$name\",\"iters\":$its,\"sptmc\":$ours,\"pyttb\":$peer},"
done
json="${json%,}]"
load_after="$(cut -d' ' -f1-3 /proc/loadavg)"
echo "$json" > "$out/results.json"
cat > "$out/README.md" <<MD
# CP-APR (MU) rank $rank, seconds per outer iteration: sptmc vs pyttb

- Date (UTC): $(date -u +%FT%TZ)
- Machine: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ //'), $(nproc) cores; 2 threads on every side
- Commit: $(git rev-parse --short HEAD)$(git diff --quiet HEAD -- src kernels || echo ' (with uncommitted changes)')
- Load average before: $load_before; after: $load_after
- Command: \`ROUNDS=$rounds ITERS=$iters SMALL_ITERS=$small_iters RANK=$rank scripts/cp-apr-vs-pyttb.sh $out${*:+ $*}\`

sptmc: \`sptmc cp-apr FILE --rank $rank --iters N --tol 0 --init INIT --backend cpu
--threads 2 --json\`, its \`seconds_per_iter\` (the whole CP-APR loop including the
per-iteration log-likelihood; not the file read or the HLS build). pyttb:
\`cp_apr(X, $rank, algorithm="mu", stoptol=0, maxiters=N, init=INIT)\` wall time / N
(\`scripts/pyttb_cp_apr.py\`, without the per-iteration trace). INIT: the same
uniform [0, 1) factors (numpy seed 1) for both. Each side ran $rounds times per
tensor, alternating with the other; the table shows each side's median (every run is
in results.json). Log-likelihoods: Σ x log m − Σ m as pyttb reports it, after the last
iteration of the first round (pyttb gives -inf where its model is 0 at a nonzero).

$table
MD
cat "$out/README.md"
