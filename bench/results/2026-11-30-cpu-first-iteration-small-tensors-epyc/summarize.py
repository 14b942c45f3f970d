import json, glob, os, statistics as st, sys
raw=sys.argv[1]; builds=['old','base','new']
ts=sorted({os.path.basename(f).split('.')[0] for f in glob.glob(raw+'/*.cp.json')})
order=['longmode7m','long4m','uni4d','twolong','blocky','uboot-commitwords-3d','atp-matches-4d','movielens-10m-tags-4d','movielens-100k','movielens-latest-small-4d']
ts=[t for t in order if t in ts]
print('| tensor | rounds | iteration 0 kernel, ms: old / base / new | iterations 1-3 kernel, ms | wall, s | wall − iterations, s | peak RSS, MB | fits: old = base, base = new |')
print('|---|---|---|---|---|---|---|---|')
for t in ts:
    row={}
    for b in builds:
        it0=[];it=[];wall=[];rest=[];rss=[];fit=set()
        for f in sorted(glob.glob(f'{raw}/{t}.{b}.*.cp.json')):
            r=f.split('.')[-3]
            d=json.load(open(f)); its=d['iterations']
            it0.append(its[0]['seconds_kernel']*1e3)
            it.append(st.median([i['seconds_kernel']*1e3 for i in its[1:]]))
            fit.add(d['final_fit'])
            w,m=open(f'{raw}/{t}.{b}.{r}.time').read().split()[-2:]
            wall.append(float(w)); rss.append(int(m)/1024); rest.append(float(w)-d['seconds'])
        row[b]=(it0,it,wall,rest,rss,fit)
    j=lambda k,fmt: ' / '.join(fmt%st.median(row[b][k]) for b in builds)
    same=lambda a,b: 'yes' if row[a][5]==row[b][5] and len(row[a][5])==1 else 'no'
    n=len(row['new'][0])
    print(f"| {t} | {n} | {j(0,'%.0f')} | {j(1,'%.1f')} | {j(2,'%.2f')} | {j(3,'%.2f')} | {' / '.join('%.0f'%max(row[b][4]) for b in builds)} | {same('old','base')}, {same('base','new')} |")
