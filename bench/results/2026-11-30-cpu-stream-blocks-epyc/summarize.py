import json,statistics as st,sys
T=['longmode7m','long4m','uni4d','twolong']
print("## Kernel medians (ms), rounds 1 / 2 / 3, and % of the floor (median of rounds)\n")
print("| tensor | rank | mode | rows | before (ms) | after (ms) | before % floor | after % floor |")
print("|---|---|---|---|---|---|---|---|")
for t in T:
    runs={s:[json.load(open(f'raw/bench-{t}-{s}-{r}.json'))['tensors'][0]['kernels'] for r in (1,2,3)] for s in ('before','after')}
    for i,k in enumerate(runs['before'][0]):
        b=[rr[i]['median_s']*1e3 for rr in runs['before']]; a=[rr[i]['median_s']*1e3 for rr in runs['after']]
        fb=st.median(rr[i]['floor_fraction']*100 for rr in runs['before']); fa=st.median(rr[i]['floor_fraction']*100 for rr in runs['after'])
        assert runs['after'][0][i]['mode']==k['mode'] and runs['after'][0][i]['rank']==k['rank']
        print(f"| {t} | {k['rank']} | {k['mode']} | {k['output'][0]} | {' / '.join(f'{x:.1f}' for x in b)} | {' / '.join(f'{x:.1f}' for x in a)} | {fb:.0f} | {fa:.0f} |")
print("\n## CP-ALS rank 16, 8 iterations: median over iterations 1-7 (ms), per round; final fit\n")
print("| tensor | kernel before | kernel after | iteration before | iteration after | iteration 0 kernel before / after | fit before | fit after | peak RSS before / after (MB) |")
print("|---|---|---|---|---|---|---|---|---|")
for t in T:
    row={}
    for s in ('before','after'):
        ks=[];its=[];i0=[];fits=[];rss=[]
        for r in (1,2,3):
            c=json.load(open(f'raw/cp-{t}-{s}-{r}.json'))
            it=c['iterations']
            ks.append(st.median(x['seconds_kernel'] for x in it[1:])*1e3)
            its.append(st.median(x['seconds_kernel']+x['seconds_linalg']+x['seconds_other'] for x in it[1:])*1e3)
            i0.append(it[0]['seconds_kernel']*1e3); fits.append(c['final_fit']); rss.append(c['peak_rss_bytes']/1e6)
        row[s]=(ks,its,i0,fits,rss)
    f=lambda v:' / '.join(f'{x:.0f}' for x in v)
    b,a=row['before'],row['after']
    print(f"| {t} | {f(b[0])} | {f(a[0])} | {f(b[1])} | {f(a[1])} | {st.median(b[2]):.0f} / {st.median(a[2]):.0f} | {b[3][0]:.9f} | {a[3][0]:.9f} | {st.median(b[4]):.0f} / {st.median(a[4]):.0f} |")
