import numpy as np, sys
rng=np.random.default_rng(51)
dims=[2_000_000,1000,400,60]; n=8_000_000
idx=[rng.integers(0,d,size=n) for d in dims]
v=rng.uniform(0,10,size=n)
with open(sys.argv[1],'w') as f:
    for k in range(0,n,1_000_000):
        s=slice(k,k+1_000_000)
        a=np.column_stack([i[s]+1 for i in idx]+[v[s]])
        np.savetxt(f,a,fmt=['%d']*4+['%.6f'])
