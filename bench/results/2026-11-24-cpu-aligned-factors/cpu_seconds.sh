#!/bin/bash
# CPU seconds (task-clock) and median per-call wall time of `sptmc bench` MTTKRP r32,
# alternating binaries, on the two smallest shared tensors.
out=$1; shift  # usage: cpu_seconds.sh OUT.jsonl BINARY...
for f in /work/shared/data/movielens-100k.tns.gz /work/shared/data/movielens-latest-small-4d.tns.gz; do
  for r in 1 2 3 4 5; do
    for b in "$@"; do
      perf stat -x, -e task-clock -o /tmp/ps.txt $b bench $f --ranks 32 --no-ttmc --reps 300 --backend cpu --threads 2 --json > /tmp/pb.json 2>/dev/null
      python3 - "$b" "$f" "$r" >> $out <<'PY'
import json,sys
b,f,r=sys.argv[1:]
d=json.load(open('/tmp/pb.json'))
ks=d['tensors'][0]['kernels']
tc=[l for l in open('/tmp/ps.txt') if 'task-clock' in l][0].split(',')[0]
print(json.dumps({'bin':b,'tensor':f.split('/')[-1],'round':int(r),'task_clock_ms':float(tc),
  'median_us':[k['median_s']*1e6 for k in ks],'min_us':[k['min_s']*1e6 for k in ks]}))
PY
    done
  done
done
