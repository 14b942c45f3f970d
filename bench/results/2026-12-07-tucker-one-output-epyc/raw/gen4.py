import numpy as np, sys
dims=[int(x) for x in sys.argv[2].split(",")]; nnz=int(sys.argv[3]); seed=int(sys.argv[4])
rng=np.random.default_rng(seed)
cols=[]
for d in dims:
    r=rng.zipf(1.5, nnz*2) if False else None
    u=rng.random(nnz); idx=np.minimum((d*(u**3)).astype(np.int64), d-1)  # skewed
    perm=rng.permutation(d) if d<=5_000_000 else None
    cols.append(perm[idx] if perm is not None else idx)
a=np.stack(cols,1)
a=np.unique(a,axis=0)
v=rng.random(len(a))*2+0.5
with open(sys.argv[1],"w") as f:
    np.savetxt(f, np.column_stack([a+1, v]), fmt=["%d"]*len(dims)+["%.6f"])
print(sys.argv[1], dims, len(a))
