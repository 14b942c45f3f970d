import numpy as np, sys
rng = np.random.default_rng(int(sys.argv[1]))
def pl(n, m, a=1.5):
    r = rng.zipf(a, size=m*4); r = r[r <= n][:m] - 1
    u = rng.integers(0, n, m); r = np.where(rng.random(m) < 0.6, u, r)
    return rng.permutation(n)[r]
m = int(sys.argv[4])
idx = np.stack([pl(600_000, m), pl(800_000, m), rng.integers(0, 12, m)], 1)
idx = np.unique(idx, axis=0)
vals = rng.gamma(2.0, 1.0, len(idx)) * float(sys.argv[2])
with open(sys.argv[3], "w") as f:
    np.savetxt(f, np.column_stack([idx + 1, vals]), fmt=["%d"]*3 + ["%.9g"])
print(len(idx))
