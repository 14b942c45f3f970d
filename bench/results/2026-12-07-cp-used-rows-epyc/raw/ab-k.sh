#!/bin/bash
# ab-k.sh BASE NEW ROUNDS FILES... : CP-ALS r16: median kernel, linalg, other per iteration
base=$1; new=$2; rounds=$3; shift 3
for round in $(seq $rounds); do for f in "$@"; do for b in $base $new; do
  r=$(/work/sptmc-$b cp $f --rank ${RANK:-16} --iters ${ITERS:-20} --tol 0 --json 2>/dev/null | python3 -c 'import json,sys,statistics; d=json.load(sys.stdin); its=d["iterations"][1:]; print(" ".join("%.4f" % statistics.median([i[k] for i in its]) for k in ("seconds_kernel","seconds_linalg","seconds_other")), "%.4f %.9f" % (d["seconds_per_iter"], d["final_fit"]))')
  echo "$round $(basename $f) $b $r"
done; done; done
