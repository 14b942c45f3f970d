#!/usr/bin/env bash
# Tucker-HOOI seconds per iteration: `sptmc tucker` (CPU engine) beside pyttb's
# tucker_als on the shared .tns files, 2 threads on both sides, in one run. Writes
# OUT_DIR/README.md and results.json.
#
# Ranks are 8 per mode, capped at the mode's length. Ours and pyttb alternate for
# ROUNDS rounds per tensor (default 2), each side's median over rounds compared. pyttb
# forms dense intermediates (an R × I_m × I_k array per TTM pair), so it runs under a
# PEER_MEM_KB address-space limit (default 16 GiB of this machine's 24) and a
# PEER_TIMEOUT (default 200 s) per run; a run that hits either is recorded as such and
# that tensor's later pyttb rounds are skipped.
#
#   [ROUNDS=2] [PEER_MEM_KB=16777216] [PEER_TIMEOUT=200] scripts/compare-tucker.sh [OUT_DIR]
set -euo pipefail
cd "$(dirname "$0")/.."
out="${1:-bench/results/$(date -u +%F)-cpu-tucker}"
rounds="${ROUNDS:-2}"
mem_kb="${PEER_MEM_KB:-16777216}"
peer_timeout="${PEER_TIMEOUT:-200}"
data="${SPTMC_DATA_DIR:-../shared/data}"
mkdir -p "$out"
. scripts/peer-setup.sh
json="["
table="| tensor | nnz | ranks | sptmc s/iter | pyttb s/iter | pyttb/sptmc | sptmc fit (10 it) |
|---|---|---|---|---|---|---|
"
for f in "$data"/*.tns.gz; do
    name="$(basename "$f" .tns.gz)"
    "$bin" info "$f" > /dev/null 2>&1   # warm the .sptb cache
    ranks="$("$bin" info "$f" --json 2>/dev/null | python3 -c 'import json,sys; print(",".join(str(min(8, d)) for d in json.load(sys.stdin)["dims"]))')"
    ours_all="["; peer_all="["; peer_done=""
    for _ in $(seq "$rounds"); do
        ours_all+="$("$bin" tucker "$f" --ranks "$ranks" --iters 10 --tol 0 --seed 1 --backend cpu --json 2>/dev/null),"
        if [ -z "$peer_done" ]; then
            set +e
            peer="$(ulimit -v "$mem_kb"; timeout "$peer_timeout" .venv/bin/python scripts/peer_tucker_time.py "$f" --ranks "$ranks" --iters 2 2>/dev/null)"
            rc=$?
            set -e
            if [ $rc -eq 124 ]; then
                peer="{\"error\": \"timeout after ${peer_timeout} s (2 iterations)\"}"
            elif [ -z "$peer" ]; then
                sig=""; [ $rc -gt 128 ] && sig=", signal $((rc - 128))"
                peer="{\"error\": \"no result: exit $rc$sig under the $mem_kb kB address-space limit\"}"
            fi
            case "$peer" in *error*) peer_done=1 ;; esac
            peer_all+="$peer,"
        fi
    done
    ours="${ours_all%,}]"; peer="${peer_all%,}]"
    row="$(python3 - "$name" "$ours" "$peer" "$ranks" <<'PY'
import json, statistics, sys
name, ours, peer, ranks = sys.argv[1], json.loads(sys.argv[2]), json.loads(sys.argv[3]), sys.argv[4]
o = statistics.median(r["seconds_per_iter"] for r in ours)
ok = [r["seconds_per_iter"] for r in peer if "error" not in r]
if ok:
    p = statistics.median(ok)
    ps, ratio = f"{p:.3f}", f"{p / o:.1f}×"
else:
    ps, ratio = peer[0]["error"].replace("|", "/")[:90], "—"
print(f"| {name} | {ours[0]['nnz']} | {ranks} | {o:.4f} | {ps} | {ratio} | {ours[0]['final_fit']:.4f} |")
PY
)"
    table+="$row
"
    json+="{\"tensor\":\"$name\",\"ranks\":\"$ranks\",\"sptmc\":$ours,\"pyttb\":$peer},"
done
json="${json%,}]"
echo "$json" > "$out/results.json"
cat > "$out/README.md" <<MD
# Tucker-HOOI, seconds per iteration: sptmc vs pyttb

- Date (UTC): $(date -u +%FT%TZ)
- Machine: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ //'), $(nproc) cores, $(awk '/MemTotal/{printf "%.0f GiB", $2/1048576}' /proc/meminfo); 2 threads on every side
- Commit: $(git rev-parse --short HEAD)
- Command: \`scripts/compare-tucker.sh $out\` (ROUNDS=$rounds, PEER_MEM_KB=$mem_kb, PEER_TIMEOUT=$peer_timeout)

sptmc: \`sptmc tucker FILE --ranks R --iters 10 --tol 0 --seed 1 --backend cpu --json\`,
its \`seconds_per_iter\` (whole HOOI loop: TTMc kernels, leading singular vectors, core,
fit; not the file read or the HLS build). pyttb: \`tucker_als(X, R, stoptol=0,
maxiters=2)\` wall time / 2, under a $mem_kb kB address-space limit and a
$peer_timeout s timeout. Ranks: 8 per mode, capped at the mode's length. The sides
alternate for $rounds rounds per tensor; medians over rounds; every run is in
results.json.

$table
MD
cat "$out/README.md"
