import numpy as np, sys
def write(path, idx, vals):
    with open(path, "w") as f:
        for row, v in zip(idx, vals):
            f.write(" ".join(str(int(i)+1) for i in row) + " %.9g\n" % v)
rng = np.random.default_rng(int(sys.argv[1]))
# two long modes, short third, power-law rows
def pl(n, m, a=1.3):
    r = rng.zipf(a, size=m*3); r = r[r <= n][:m] - 1
    return rng.permutation(n)[r]
m = 2_000_000
idx = np.stack([pl(1_500_000, m), pl(2_000_000, m), rng.integers(0, 12, m)], 1)
write("twolong2.tns", idx, rng.gamma(2.0, 1.0, m) * 3.7e-6)
m = 300_000
dims = [60, 45, 30, 20, 12, 7]
idx = np.stack([rng.integers(0, d, m) for d in dims], 1)
write("o6.tns", idx, rng.poisson(2.0, m) + 1)
m = 1_000_000
idx = np.stack([rng.integers(0, 20000, m), rng.integers(0, 15000, m), rng.integers(0, 9000, m)], 1)
write("huge.tns", idx, rng.lognormal(18, 2, m))
