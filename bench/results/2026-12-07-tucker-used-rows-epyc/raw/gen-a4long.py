import numpy as np, sys
rng = np.random.default_rng(int(sys.argv[1]))
def save(path, idx, vals, fmt="%.9g"):
    idx, u = np.unique(idx, axis=0, return_index=True)
    vals = vals[u]
    with open(path, "w") as f:
        np.savetxt(f, np.column_stack([idx + 1, vals]), fmt=["%d"]*idx.shape[1] + [fmt])
    print(path, len(idx))
def pl(n, m, a=1.4):
    r = rng.zipf(a, size=m*4); r = r[r <= n][:m] - 1
    return rng.permutation(n)[r]
m = 1_500_000
idx = np.stack([pl(3_000_000, m), pl(2_500_000, m), rng.integers(0, 50, m), rng.integers(0, 8, m)], 1)
save("a4long.tns", idx, rng.lognormal(27, 1.5, m))          # ~1e12 values
m = 3_000_000
idx = np.stack([rng.integers(0, 500_000, m), rng.integers(0, 400_000, m), rng.integers(0, 300_000, m)], 1)
save("b3wide.tns", idx, rng.standard_normal(m))               # signed, all rows used
m = 400_000
dims = [40, 32, 24, 16, 10]
idx = np.stack([rng.integers(0, d, m) for d in dims], 1)
save("c5tiny.tns", idx, rng.gamma(1.0, 1e-20, m))            # tiny values
m = 2_000_000
idx = np.stack([pl(200_000, m, 1.6), rng.integers(0, 5000, m), rng.integers(0, 300, m)], 1)
save("d3count.tns", idx, (rng.poisson(1.5, m) + 1).astype(float), "%d")
m = 1_000_000
idx = np.stack([rng.integers(0, 80_000, m), rng.integers(0, 20_000, m), rng.integers(0, 60, m)], 1)
save("e3bin.tns", idx, np.ones(m), "%d")
