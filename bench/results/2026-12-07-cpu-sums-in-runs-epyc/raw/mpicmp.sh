#!/bin/bash
# mpicmp.sh KIND TENSOR NP RANK ITERS [extra]: compare the mpirun result with the single-process one
kind=$1; t=$2; np=$3; r=$4; it=$5; shift 5
S=${S:?set S to the sptmc binary}
key=final_fit; [ $kind = cp-apr ] && key=log_likelihood
a=$(timeout 300 $S $kind $t --rank $r --iters $it --tol 0 --json "$@" 2>${TMPDIR:-/tmp}/m1.err | python3 -c "import json,sys; print(json.load(sys.stdin)['$key'])" 2>&1 | tail -1)
b=$(timeout 300 mpirun --allow-run-as-root --oversubscribe -np $np $S $kind $t --rank $r --iters $it --tol 0 --json "$@" $MPIX 2>${TMPDIR:-/tmp}/m2.err | python3 -c "import json,sys; print(json.load(sys.stdin)['$key'])" 2>&1); rc=${PIPESTATUS[0]}
rel=$(python3 -c "a=float('$a');b=float('$b');print('%.2e'%(abs(a-b)/max(abs(a),1e-300)))" 2>/dev/null)
echo "$kind $t np=$np r=$r it=$it $* $MPIX single=$a mpi=$b rel=$rel mpirc=$rc $(grep -i 'error\|panic' ${TMPDIR:-/tmp}/m2.err | head -2 | tr '\n' ' ' | cut -c1-200)"
