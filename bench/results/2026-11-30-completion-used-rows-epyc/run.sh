#!/bin/bash
# Alternating before/after completion runs; one line per run.
B=/work/sptmc-rows; A=/work/sptmc-compact; D=/work/shared/data; G=/work/gen; O=/work/scratch/odd
run() { # label bin args...
  local label=$1 bin=$2; shift 2
  local out; out=$( { /usr/bin/time -f "TIME %e s %M KB" $bin complete "$@" --threads 2 --json > /tmp/cb.json; } 2>&1 | grep TIME)
  python3 - "$label" "$out" <<'PY'
import json,sys
d=json.load(open('/tmp/cb.json'))
print(sys.argv[1], sys.argv[2], "fit %.2f s" % d['seconds'], "epochs", d['epochs_run'], "s/epoch %.3f" % d['seconds_per_epoch'], "test %.10g" % d['test_rmse'], "val %.10g" % d['validation_rmse'])
PY
}
for round in 1 2; do
 for pair in "B $B" "A $A"; do set -- $pair
  run "$1 longmode7m" $2 $G/longmode7m.sptb --rank 16 --lambda 1 --epochs 3
  run "$1 twolong" $2 $G/twolong.sptb --rank 16 --lambda 1 --epochs 3
  run "$1 sparse4d" $2 $O/sparse4d.tns --rank 4 --lambda 0.2
  run "$1 ml100k-als" $2 $D/movielens-100k.tns.gz --rank 16
  run "$1 ml100k-ccd" $2 $D/movielens-100k.tns.gz --rank 16 --solver ccd
  run "$1 ml10m-tags" $2 $D/movielens-10m-tags-4d.tns.gz --rank 16
 done
done
