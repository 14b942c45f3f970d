import numpy as np, sys
rng=np.random.default_rng(int(sys.argv[2]))
dims=[300000,60000,5000,120,16]; n=4_000_000
cols=[]
for d in dims:
    # power-law over a random relabelling of the rows
    r=np.floor(d*rng.random(n)**2.2).astype(np.int64)
    cols.append(rng.permutation(d)[r])
idx=np.stack(cols,1)
idx=np.unique(idx,axis=0)
v=rng.integers(1,6,len(idx))
with open(sys.argv[1],'w') as f:
    np.savetxt(f,np.column_stack([idx+1,v]),fmt='%d')
print(len(idx))
