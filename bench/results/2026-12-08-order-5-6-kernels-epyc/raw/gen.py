"""The tensors of this run (kept out of the repository): python3 gen.py OUTDIR.
m2: a uniform 2-way matrix of values in [0.1, 1.1);
m5, m6: uniform 5-/6-way counts; m4, b4, b5: uniform 4-/5-way counts drawn in turn
from one stream; l5: a 5-way with a 2 M-row power-law mode."""
import os
import random
import sys

out = sys.argv[1]


def uniform(name, dims, nnz, r):
    with open(os.path.join(out, name), "w") as f:
        for _ in range(nnz):
            idx = [r.randint(1, d) for d in dims]
            f.write(" ".join(map(str, idx)) + " " + str(r.randint(1, 9)) + "\n")


r = random.Random(1)
with open(os.path.join(out, "m2.tns"), "w") as f:
    for _ in range(20000):
        idx = [r.randint(1, d) for d in [1000, 800]]
        f.write(" ".join(map(str, idx)) + " " + repr(r.random() + 0.1) + "\n")
uniform("m5.tns", [30, 40, 50, 20, 10], 50000, random.Random(2))
uniform("m6.tns", [8, 9, 10, 11, 12, 13], 30000, random.Random(7))
r = random.Random(9)
uniform("m4.tns", [30, 40, 50, 20], 50000, r)
uniform("b5.tns", [3000, 400, 500, 200, 100], 2000000, r)
uniform("b4.tns", [3000, 400, 500, 200], 2000000, r)
r = random.Random(5)
with open(os.path.join(out, "l5.tns"), "w") as f:
    for _ in range(2000000):
        i = int(r.paretovariate(0.8)) % 2000000 + 1
        f.write(" ".join([str(i)] + [str(r.randint(1, d)) for d in [1000, 500, 100, 50]])
                + " " + str(r.randint(1, 9)) + "\n")
