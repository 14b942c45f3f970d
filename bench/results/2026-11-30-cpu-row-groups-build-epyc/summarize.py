import json, glob, os, re, statistics as st
import sys; raw=sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(os.path.abspath(__file__)), 'raw')
tensors=[]
for f in sorted(glob.glob(raw+'/*.base.1.cp.json')):
    tensors.append(os.path.basename(f).split('.base.')[0])
order=['longmode7m','long4m','uni4d','twolong','blocky','ord5','uboot-commitwords-3d','atp-matches-4d','movielens-10m-tags-4d']
tensors=[t for t in order if t in tensors]
print('| tensor | prepare base / new (s) | iteration 0 kernel base / new (ms) | iterations 1-3 kernel base / new (ms) | wall base / new (s) | peak RSS base / new (MB) | same fit |')
print('|---|---|---|---|---|---|---|')
for t in tensors:
    row={}
    for b in ['base','new']:
        prep=[];it0=[];it=[];wall=[];rss=[];fit=set()
        for r in [1,2,3]:
            p=open(f'{raw}/{t}.{b}.{r}.prep').read()
            m=re.search(r'prepare ([0-9.]+) s',p); prep.append(float(m.group(1)))
            d=json.load(open(f'{raw}/{t}.{b}.{r}.cp.json'))
            its=d['iterations']; it0.append(its[0]['seconds_kernel']*1e3)
            it.append(st.median([i['seconds_kernel']*1e3 for i in its[1:]]))
            fit.add(d['final_fit'])
            w,m_=open(f'{raw}/{t}.{b}.{r}.time').read().split()
            wall.append(float(w)); rss.append(int(m_)/1024)
        row[b]=(prep,it0,it,wall,rss,fit)
    f=lambda xs,fmt: ' / '.join(fmt%x for x in xs)
    same = row['base'][5]==row['new'][5] and len(row['base'][5])==1
    print(f"| {t} | {st.median(row['base'][0]):.3f} / {st.median(row['new'][0]):.3f} | {st.median(row['base'][1]):.0f} / {st.median(row['new'][1]):.0f} | {st.median(row['base'][2]):.1f} / {st.median(row['new'][2]):.1f} | {st.median(row['base'][3]):.2f} / {st.median(row['new'][3]):.2f} | {max(row['base'][4]):.0f} / {max(row['new'][4]):.0f} | {'yes' if same else 'NO '+str(row['base'][5])+str(row['new'][5])} |")
print()
print('Per round (base / new): prepare s; iteration-0 kernel ms')
for t in tensors:
    parts=[]
    for r in [1,2,3]:
        pb=re.search(r'prepare ([0-9.]+) s',open(f'{raw}/{t}.base.{r}.prep').read()).group(1)
        pn=re.search(r'prepare ([0-9.]+) s',open(f'{raw}/{t}.new.{r}.prep').read()).group(1)
        ib=json.load(open(f'{raw}/{t}.base.{r}.cp.json'))['iterations'][0]['seconds_kernel']*1e3
        inn=json.load(open(f'{raw}/{t}.new.{r}.cp.json'))['iterations'][0]['seconds_kernel']*1e3
        parts.append(f'{pb}/{pn}; {ib:.0f}/{inn:.0f}')
    print(f'- {t}: '+' | '.join(parts))
