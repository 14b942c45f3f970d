# The generated 4th-order tensor r4.tns (5000 x 1500 x 300 x 40, 900 000 entries before
# duplicates are summed): Zipf-distributed first two modes, uniform last two, gamma values
# scaled by 1e-3. gen_tensor.py writes 3 modes only, so this uses numpy directly.
import numpy as np
rng = np.random.default_rng(20261206)
dims = [5000, 1500, 300, 40]
nnz = 900000
idx = [(rng.zipf(1.3, nnz * 2) % d)[:nnz] if m < 2 else rng.integers(0, d, nnz)
       for m, d in enumerate(dims)]
vals = rng.gamma(2.0, 3.0, nnz) * 1e-3
with open('r4.tns', 'w') as f:
    np.savetxt(f, np.column_stack([i + 1 for i in idx] + [vals]), fmt=['%d'] * 4 + ['%.6g'])
