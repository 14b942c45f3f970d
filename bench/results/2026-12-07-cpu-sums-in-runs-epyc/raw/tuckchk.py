#!/usr/bin/env python3
"""tuckchk.py TENSOR MODELDIR JSON: the tensor projected on the saved Tucker factors in FP64, against the saved core and the reported fit"""
import numpy as np, sys, os, math, json
t, md, js = sys.argv[1:4]
a = np.loadtxt(t, ndmin=2); idx = a[:,:-1].astype(np.int64)-1; v = a[:,-1]
N = idx.shape[1]
U = [np.loadtxt(os.path.join(md,f'factor-{m}.txt'), ndmin=2) for m in range(N)]
rk = [u.shape[1] for u in U]
core = np.loadtxt(os.path.join(md,'core.txt')).reshape(rk)
T = v[:,None]*U[0][idx[:,0]]
G = T
for m in range(1,N):
    G = np.einsum('n...,nr->n...r', G, U[m][idx[:,m]])
G = G.sum(0)
nx2 = (v**2).sum()
rep = json.load(open(js))['final_fit']
print('max|G_proj - core| / max|core|', np.abs(G-core).max()/np.abs(core).max())
print('fit from projected core', 1-math.sqrt(max(nx2-(G**2).sum(),0))/math.sqrt(nx2), 'from saved core', 1-math.sqrt(max(nx2-(core**2).sum(),0))/math.sqrt(nx2), 'reported', rep)
print('norm X', math.sqrt(nx2), '||core||', np.linalg.norm(core), '||G||', np.linalg.norm(G))
