#!/bin/bash
# ab-fused.sh BASE NEW ROUNDS NPS FILES... : CP-APR rank 8, 10 outer iterations, tol 0,
# under mpirun -np P with its default binding: the sum of the iterations' seconds, the
# last log-likelihood, the inner iterations in all
base=$1; new=$2; rounds=$3; nps=$4; shift 4
for round in $(seq $rounds); do for f in "$@"; do for np in $nps; do for b in $base $new; do
  mpirun --allow-run-as-root --oversubscribe -np $np /work/sptmc-$b cp-apr $f --rank 8 --iters 10 --tol 0 --json > /tmp/ab-fused.json 2>/dev/null || { echo "$round $(basename $f) np=$np $b FAILED"; continue; }
  r=$(python3 -c 'import json; d=json.load(open("/tmp/ab-fused.json")); it=d["iterations"]; print("iters_s %.3f ll %.12g inner %d grid %s" % (sum(s["seconds"] for s in it), it[-1]["log_likelihood"], sum(s["inner_iters"] for s in it), d["distributed"]["grid"]))')
  echo "$round $(basename $f) np=$np $b $r"
done; done; done; done
