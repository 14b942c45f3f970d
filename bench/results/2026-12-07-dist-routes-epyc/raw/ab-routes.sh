#!/bin/bash
# A/B of the exchange of every slab row (--grain medium-slabs) against the used rows
# (--grain medium), same binary, alternating; one line per run.
# usage: ab-routes.sh BIN MODEL(cp|cp-apr) "NPS" REPS TENSOR...
bin=$1; model=$2; nps=$3; reps=$4; shift 4
# Iterations: CP_ITERS (CP-ALS, default 10) and APR_ITERS (CP-APR, default 3).
if [ "$model" = cp ]; then args="--rank 16 --iters ${CP_ITERS:-10} --tol 0"; else args="--rank 8 --iters ${APR_ITERS:-3} --tol 0"; fi
for f in "$@"; do for np in $nps; do for rep in $(seq $reps); do for g in medium-slabs medium; do
  mpirun --allow-run-as-root --oversubscribe -np $np $bin $model $f $args --json --grain $g 2>/dev/null > /tmp/ab-routes.json || { echo "$(basename $f) np=$np $g FAILED"; continue; }
  python3 - "$f" $np $g <<'PY'
import json, sys, os
d = json.load(open('/tmp/ab-routes.json')); D = d['distributed']; pr = D['per_rank']
it = d['iterations']
key = 'fit' if 'fit' in it[-1] else 'log_likelihood'
mean = lambda k: sum(r[k] for r in pr) / len(pr)
print(f"{os.path.basename(sys.argv[1])} np={sys.argv[2]} {sys.argv[3]:12s} grid={D['grid']} s/iter={d['seconds']/len(it):.4f} "
      f"bytes/iter mean={mean('bytes_per_iter')/1e6:.3f}M max={max(r['bytes_per_iter'] for r in pr)/1e6:.3f}M "
      f"model={mean('model_bytes_per_iter')/1e6:.3f}M slab_model={mean('slab_model_bytes_per_iter')/1e6:.3f}M "
      f"peak max={max(r['peak_bytes'] for r in pr)/2**20:.0f}MiB comm={mean('comm_seconds'):.3f}s {key}={it[-1][key]!r}")
PY
done; done; done; done
