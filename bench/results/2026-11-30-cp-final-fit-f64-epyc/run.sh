#!/usr/bin/env bash
# The reported final CP-ALS fit against the f64 fit of the model each run writes, for
# the single process and for 2 MPI ranks (both grains), on uboot-commitwords-3d.
#   BIN=.../sptmc MPI_BIN=.../sptmc-with-mpi-feature PY=python-with-numpy bench/results/2026-11-30-cp-final-fit-f64-epyc/run.sh OUT
set -eu
out=${1:-/tmp/final-fit}
f=${DATA:-../shared/data}/uboot-commitwords-3d.tns.gz
args=(--rank 16 --iters 20 --tol 0 --seed 1)
mkdir -p "$out"
rm -rf "$out"/single "$out"/medium "$out"/coarse
"$BIN" cp "$f" "${args[@]}" --out "$out/single"
for g in medium coarse; do
    mpirun --allow-run-as-root --oversubscribe -np 2 "$MPI_BIN" cp "$f" "${args[@]}" --grain $g --out "$out/$g"
done
for d in single medium coarse; do
    python3 -c "import json,sys; print(sys.argv[1], 'reported %.12f' % json.load(open(sys.argv[1] + '/model.json'))['final_fit'])" "$out/$d"
done
"$PY" scripts/exact_cp_fit.py "$f" "$out"/single "$out"/medium "$out"/coarse
