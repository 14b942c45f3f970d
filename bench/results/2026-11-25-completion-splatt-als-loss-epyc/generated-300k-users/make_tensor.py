# Low-rank + biases + noise ratings-like tensor (users x items x time), power-law rows,
# split 80/10/10 into train/val/test .tns (1-based).
import numpy as np, sys
rng = np.random.default_rng(int(sys.argv[1]) if len(sys.argv) > 1 else 7)
U, I, T, R, nnz = 300_000, 30_000, 20, 8, 3_000_000
def zipf_rows(n, count, a):
    w = 1.0 / np.arange(1, n + 1) ** a
    w /= w.sum()
    return rng.permutation(n)[rng.choice(n, size=count, p=w)]
u = zipf_rows(U, nnz, 0.6); i = zipf_rows(I, nnz, 0.9); t = rng.integers(0, T, nnz)
key = (u.astype(np.int64) * I + i) * T + t
_, first = np.unique(key, return_index=True)
u, i, t = u[first], i[first], t[first]
A, B, C = (rng.normal(0, 0.6, (n, R)) for n in (U, I, T))
bu, bi, bt = rng.normal(0, 0.4, U), rng.normal(0, 0.4, I), rng.normal(0, 0.1, T)
v = 3.5 + bu[u] + bi[i] + bt[t] + np.einsum("nr,nr,nr->n", A[u], B[i], C[t])
v += rng.normal(0, 0.05 * v.std(), v.size)
perm = rng.permutation(v.size); n = v.size
for name, sl in (("train", perm[: int(0.8 * n)]), ("val", perm[int(0.8 * n): int(0.9 * n)]), ("test", perm[int(0.9 * n):])):
    np.savetxt(f"/work/gen/compl-big/{name}.tns", np.column_stack([u[sl] + 1, i[sl] + 1, t[sl] + 1, v[sl]]), fmt="%d %d %d %.4f")
print(n, "entries")
