#!/bin/bash
# ab-cp.sh BASE NEW ROUNDS FILES... : CP-ALS r16, 20 its, tol 0, seconds_per_iter and final fit, alternating
base=$1; new=$2; rounds=$3; shift 3
for round in $(seq $rounds); do for f in "$@"; do for b in $base $new; do
  r=$(/work/sptmc-$b cp $f --rank 16 --iters ${ITERS:-20} --tol 0 --json 2>/dev/null | python3 -c 'import json,sys; d=json.load(sys.stdin); its=d["iterations"]; import statistics; print("%.4f %.4f %.9f" % (d["seconds_per_iter"], statistics.median([i["seconds_kernel"]+i["seconds_linalg"]+i["seconds_other"] for i in its[1:]]), d["final_fit"]))')
  echo "$round $(basename $f) $b $r"
done; done; done
