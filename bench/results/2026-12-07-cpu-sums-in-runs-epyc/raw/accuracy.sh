#!/bin/bash
# Accuracy on pl_long2 (gen_tensor.py powerlaw pl_long2.tns --nnz 2500000 --dims 2000000,1500000,10 --seed 3):
# CP-ALS's fit history (dips), the in-run fit against a run that stops there, and a rank-1
# Tucker core against the tensor projected on the saved factors in FP64 (tuckchk.py).
# Usage: accuracy.sh SPTMC TENSOR.tns
S=$1; T=$2; here=$(cd "$(dirname "$0")" && pwd)
$S cp $T --rank 8 --iters 60 --json 2>/dev/null | python3 -c "
import json,sys; it=json.load(sys.stdin)['iterations']
print('cp rank 8, 60 iterations at most:', len(it), 'iterations; fit dips:', [(x['iter'],'%.2e'%x['delta']) for x in it if x['delta']<0])"
for it in 1 2; do $S cp $T --rank 8 --iters $it --tol 0 --json 2>/dev/null | python3 -c "
import json,sys; print('cp --iters $it fits:', [x['fit'] for x in json.load(sys.stdin)['iterations']])"; done
d=$(mktemp -d)
$S tucker $T --ranks 1 --iters 5 --tol 0 --json --out $d/m 2>/dev/null > $d/t.json
python3 -c "import json; print('tucker ranks 1 fit history', [x['fit'] for x in json.load(open('$d/t.json'))['iterations']])"
python3 $here/tuckchk.py $T $d/m $d/t.json
rm -rf $d
