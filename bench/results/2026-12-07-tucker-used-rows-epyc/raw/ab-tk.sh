#!/bin/bash
# ab-tk.sh BASE NEW ROUNDS FILES... : Tucker-HOOI (RANKS, ITERS, tol 0): wall seconds, run seconds, s/iter, peak RSS MB, final fit
base=$1; new=$2; rounds=$3; shift 3
for round in $(seq $rounds); do for f in "$@"; do for b in $base $new; do
  /usr/bin/time -f "%e %M" -o /tmp/ab-tk.time /work/sptmc-$b tucker $f --ranks ${RANKS:-8} --iters ${ITERS:-5} --tol 0 --json > /tmp/ab-tk.json 2>/dev/null || { echo "$round $(basename $f) $b FAILED"; continue; }
  r=$(python3 -c 'import json,sys; d=json.load(open("/tmp/ab-tk.json")); print("%.3f %.4f %.9f" % (d["seconds"], d["seconds_per_iter"], d["final_fit"]))')
  t=$(awk '{printf "%.2f %.0f", $1, $2/1024}' /tmp/ab-tk.time)
  echo "$round $(basename $f) $b wall,rss: $t run,s/it,fit: $r"
done; done; done
