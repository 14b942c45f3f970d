import glob,os,re,sys,statistics as st,collections
# parse.py [DIR]: the A/B's outputs in DIR (default: ab/ beside this script)
here=sys.argv[1] if len(sys.argv)>1 else os.path.join(os.path.dirname(os.path.abspath(__file__)),'ab')
d=collections.defaultdict(list)
for f in glob.glob(os.path.join(here,'out-*.txt')):
    m=re.match(r'out-(.+)-(pre|final)-(\d)\.txt',os.path.basename(f)); name,bin,_=m.groups()
    for line in open(f):
        g=re.match(r'all modes (\w+) r(\d+): median ([\d.]+) ms',line)
        if g: d[(name,g[1],int(g[2]),bin)].append(float(g[3]))
        g=re.match(r'(mttkrp|ttmc)\s+(\d+)\s+(\d+)\s+\S+\s+([\d.]+)',line)
        if g: d[(name,g[1]+' m'+g[3],int(g[2]),bin)].append(float(g[4]))
keys=sorted({k[:3] for k in d})
print(f"{'tensor':24}{'op':12}{'rank':>5}{'before ms':>12}{'after ms':>12}{'after/before':>14}  (median of rounds; spread)")
for k in keys:
    a=d.get(k+('pre',),[]); b=d.get(k+('final',),[])
    if not a or not b: continue
    ma,mb=st.median(a),st.median(b)
    print(f"{k[0]:24}{k[1]:12}{k[2]:>5}{ma:>12.3f}{mb:>12.3f}{mb/ma:>14.3f}  [{min(a):.3f}-{max(a):.3f}] [{min(b):.3f}-{max(b):.3f}] n={len(a)},{len(b)}")
