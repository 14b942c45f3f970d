#!/usr/bin/env python3
"""A/B of `sptmc complete` builds, alternating: median epoch ms and process CPU seconds."""
import json, statistics as st, subprocess, sys, resource, os
bins = sys.argv[1].split(','); rounds = int(sys.argv[2]); extra = sys.argv[3:]
d = '/work/scratch/compl'
res = {b: [] for b in bins}
for r in range(rounds):
    for b in bins:
        cmd = [b, 'complete', '--train', f'{d}/train.tns', '--validation', f'{d}/val.tns', '--test', f'{d}/test.tns',
               '--solver', 'als', '--rank', '16', '--seed', '1', '--threads', os.environ.get('T','2'), '--backend', 'cpu', '--no-cache', '--json'] + extra
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        p = subprocess.run(cmd, capture_output=True, text=True, env=dict(os.environ, RAYON_NUM_THREADS='2'))
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        j = json.loads(p.stdout)
        e = j['epochs']
        res[b].append((st.median(x['seconds'] for x in e) * 1e3, st.mean(x['seconds'] for x in e) * 1e3,
                       after.ru_utime - before.ru_utime, len(e), j['validation_rmse']))
for b in bins:
    v = res[b]
    print(f"{b}: epochs {v[0][3]} val {v[0][4]:.6f} | median-epoch ms {[round(x[0],3) for x in v]} -> {st.median(x[0] for x in v):.3f} | mean-epoch {st.median(x[1] for x in v):.3f} | user s {st.median(x[2] for x in v):.3f}")
