#!/bin/bash
# Alternating timing of --grain medium-slabs and --grain medium, one binary.
# usage: time-routes.sh BIN MODEL NP REPS ITERS TENSOR
bin=$1; model=$2; np=$3; reps=$4; iters=$5; f=$6
if [ "$model" = cp ]; then r=16; else r=8; fi
for rep in $(seq $reps); do for g in medium-slabs medium; do
  mpirun --allow-run-as-root --oversubscribe -np $np $bin $model $f --rank $r --iters $iters --tol 0 --json --grain $g 2>/dev/null | python3 -c "
import json,sys; d=json.load(sys.stdin); D=d['distributed']['per_rank']; it=d['iterations']
k='fit' if 'fit' in it[-1] else 'log_likelihood'
print('$(basename $f) $model np=$np $g', 'seconds', round(d['seconds'],3), 'compute', [round(r['compute_seconds'],2) for r in D], 'comm', [round(r['comm_seconds'],2) for r in D], 'bytes', [r['bytes_per_iter'] for r in D], k, it[-1][k])"
done; done
