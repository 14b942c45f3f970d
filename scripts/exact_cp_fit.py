#!/usr/bin/env python3
"""The fit of written CP models, in f64, against a tensor file (FROSTT .tns or .tns.gz,
1-based, duplicates summed):

    python3 scripts/exact_cp_fit.py TENSOR MODEL_DIR [MODEL_DIR ...]

Each MODEL_DIR holds what `sptmc cp --out` writes (weights.txt, factor-<m>.txt).
fit = 1 − ‖X − X̂‖/‖X‖ with ‖X̂‖² from the factors' Grams and ⟨X, X̂⟩ over the nonzeros,
all in numpy float64. Needs numpy; holds the tensor and one row per nonzero and rank.
"""
import sys, gzip, numpy as np
f = sys.argv[1]
raw = np.loadtxt(gzip.open(f) if f.endswith('.gz') else f)
idx = raw[:, :-1].astype(np.int64) - 1; val = raw[:, -1]
# sum duplicates
dims = idx.max(0) + 1
key = np.ravel_multi_index(idx.T, dims)
u, inv = np.unique(key, return_inverse=True)
v = np.bincount(inv, weights=val); ix = np.array(np.unravel_index(u, dims)).T
xx = (v * v).sum()
for d in sys.argv[2:]:
    lam = np.loadtxt(f"{d}/weights.txt"); A = [np.loadtxt(f"{d}/factor-{m}.txt") for m in range(idx.shape[1])]
    G = np.ones((len(lam), len(lam)))
    for a in A: G *= a.T @ a
    mm = lam @ G @ lam
    P = np.ones((len(v), len(lam)))
    for m, a in enumerate(A): P *= a[ix[:, m]]
    xm = v @ (P @ lam)
    fit = 1 - np.sqrt(max(xx + mm - 2 * xm, 0)) / np.sqrt(xx)
    print(d, "f64 fit %.12f" % fit)
