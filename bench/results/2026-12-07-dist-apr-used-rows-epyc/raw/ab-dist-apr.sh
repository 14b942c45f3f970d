#!/bin/bash
# ab-dist-apr.sh BASE NEW ROUNDS NPS FILES... : CP-APR rank R (default 8) under mpirun -np P
# (ITERS outer iterations, default 3, tol 0): s/iter, final log-likelihood, per rank (max)
# peak MB and bytes sent per iteration
base=$1; new=$2; rounds=$3; nps=$4; shift 4
for round in $(seq $rounds); do for f in "$@"; do for np in $nps; do for b in $base $new; do
  mpirun --allow-run-as-root --oversubscribe -np $np /work/sptmc-$b cp-apr $f --rank ${R:-8} --iters ${ITERS:-3} --tol 0 --json > /tmp/ab-dist-apr.json 2>/dev/null || { echo "$round $(basename $f) np=$np $b FAILED"; continue; }
  r=$(python3 -c 'import json; d=json.load(open("/tmp/ab-dist-apr.json")); it=d["iterations"]; pr=d["distributed"]["per_rank"]; print("%.4f ll %.12g peak_MB %d bytes/iter %d compute_s %.3f comm_s %.3f rows %s" % (d["seconds"]/len(it), it[-1]["log_likelihood"], max(r["peak_bytes"] for r in pr)>>20, max(r["bytes_per_iter"] for r in pr), max(r["compute_seconds"] for r in pr), max(r["comm_seconds"] for r in pr), d["distributed"]["rows_held"]))')
  echo "$round $(basename $f) np=$np $b $r"
done; done; done; done
