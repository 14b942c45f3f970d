#!/bin/bash
# ab-dist.sh BASE NEW ROUNDS NPS FILES... : CP-ALS r16 under mpirun -np P (10 iterations, tol 0):
# s/iter, final fit, per rank (max) peak MB and bytes sent per iteration
base=$1; new=$2; rounds=$3; nps=$4; shift 4
for round in $(seq $rounds); do for f in "$@"; do for np in $nps; do for b in $base $new; do
  mpirun --allow-run-as-root --oversubscribe -np $np /work/sptmc-$b cp $f --rank 16 --iters 10 --tol 0 --json > /tmp/ab-dist.json 2>/dev/null || { echo "$round $(basename $f) np=$np $b FAILED"; continue; }
  r=$(python3 -c 'import json; d=json.load(open("/tmp/ab-dist.json")); pr=d["distributed"]["per_rank"]; print("%.4f %.10f peak_MB %d bytes/iter %d compute_s %.3f comm_s %.3f" % (d["seconds_per_iter"], d["final_fit"], max(r["peak_bytes"] for r in pr)>>20, max(r["bytes_per_iter"] for r in pr), max(r["compute_seconds"] for r in pr), max(r["comm_seconds"] for r in pr)))')
  echo "$round $(basename $f) np=$np $b $r"
done; done; done; done
