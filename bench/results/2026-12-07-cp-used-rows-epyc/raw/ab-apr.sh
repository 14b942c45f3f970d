#!/bin/bash
# ab-apr.sh BASE NEW ROUNDS FILES... : CP-APR rank 16, ITERS outer iterations: s/iter, log-likelihoods, KKT
base=$1; new=$2; rounds=$3; shift 3
for round in $(seq $rounds); do for f in "$@"; do for b in $base $new; do
  r=$(/work/sptmc-$b cp-apr $f --rank 16 --iters ${ITERS:-5} --json 2>/dev/null | python3 -c 'import json,sys; d=json.load(sys.stdin); it=d["iterations"]; print("%.4f" % (d["seconds"]/len(it)), "ll %.10g" % it[-1]["log_likelihood"], "kkt %.6g" % it[-1]["kkt_violation"])')
  echo "$round $(basename $f) $b $r"
done; done; done
