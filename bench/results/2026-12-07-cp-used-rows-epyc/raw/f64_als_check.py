import numpy as np, sys, os
f, R, iters = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
a = np.loadtxt(f)
idx = a[:, :-1].astype(np.int64) - 1; vals = a[:, -1]
N = idx.shape[1]; dims = list(idx.max(0) + 1)
rng = np.random.default_rng(9)
os.makedirs("init2", exist_ok=True)
F = []
for k, d in enumerate(dims):
    m = rng.random((d, R)).astype(np.float32)
    np.savetxt(f"init2/factor-{k}.txt", m, fmt="%.9g")
    F.append(m.astype(np.float64))
def mttkrp(n):
    p = np.ones((len(vals), R)) * vals[:, None]
    for k in range(N):
        if k != n: p *= F[k][idx[:, k]]
    out = np.zeros((dims[n], R)); np.add.at(out, idx[:, n], p); return out
for it in range(iters):
  for n in range(N):
    M = mttkrp(n)
    V = np.ones((R, R))
    for k in range(N):
        if k != n: V *= F[k].T @ F[k]
    A = np.linalg.solve(V, M.T).T
    lam = np.linalg.norm(A, axis=0) if it == 0 else np.maximum(1, np.abs(A).max(0))
    A /= lam
    F[n] = A
G = np.ones((R, R))
for k in range(N): G *= F[k].T @ F[k]
xx = (vals**2).sum(); mm = lam @ G @ lam; inner = (lam * (M * F[N-1]).sum(0)).sum()
print("f64 fit after %d iterations %.10f" % (iters, 1 - np.sqrt(max(xx + mm - 2*inner, 0)) / np.sqrt(xx)))
