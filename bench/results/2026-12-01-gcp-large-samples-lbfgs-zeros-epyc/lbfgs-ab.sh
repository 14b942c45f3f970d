#!/bin/bash
# GCP L-BFGS-B before/after on a small generated tensor and on it scaled by 1e-6 and
# 1e6. Run in a folder holding ./sptmc-old and ./sptmc-new.
PY=${PY:-python3}
$PY /work/shared/tools/gen_tensor.py powerlaw small.tns --dims 200,100,50 --nnz 8000 --seed 5
for s in 1e-6 1e6; do
  awk -v s=$s '{ $NF = $NF * s; print }' OFMT='%.9g' CONVFMT='%.9g' small.tns > small-x$s.tns
done
run() { echo "$1 $2 $3: $(./sptmc-$1 gcp $2.tns --rank 4 --loss $3 --method lbfgs --threads 2 --no-cache 2>&1 | tail -1)"; }
for b in old new; do
  for l in gaussian poisson gamma rayleigh bernoulli-odds; do
    [ $l = bernoulli-odds ] && continue
    run $b small $l
  done
  run $b small-x1e-6 gaussian
  run $b small-x1e6 gaussian
  run $b small-x1e6 gamma
done
