import numpy as np
rng = np.random.default_rng(99)
def write(name, dims, nnz, vals):
    idx = np.stack([rng.integers(1, d + 1, nnz) for d in dims], 1)
    with open(name, "w") as f:
        for row, x in zip(idx, vals(nnz)):
            f.write(" ".join(map(str, row)) + " " + repr(float(x)) + "\n")
write("sparse4d.tns", [3_000_000, 2_000_000, 1_000_000, 500_000], 200000, lambda n: rng.integers(1, 6, n).astype(float))
