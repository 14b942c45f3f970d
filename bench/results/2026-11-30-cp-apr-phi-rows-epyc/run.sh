#!/bin/bash
# CP-APR before/after, alternating, two rounds; one line per run.
B=/work/sptmc-pre-phi; A=/work/sptmc-phi-final; D=/work/shared/data
one() { # label bin file rank iters
  /usr/bin/time -f "%M" -o /tmp/pb.mem $2 cp-apr $3 --rank $4 --iters $5 --tol 0 --threads 2 --json 2>/dev/null > /tmp/pb.json
  python3 - "$1" "$3" "$4" <<'PY'
import json,sys
d=json.load(open('/tmp/pb.json')); it=d['iterations']
print(sys.argv[1], sys.argv[2].split('/')[-1], 'rank', sys.argv[3], 'll %.15g' % d['log_likelihood'], 's/iter %.3f' % (d['seconds']/len(it)), 'maxrss %.0f MB' % (int(open('/tmp/pb.mem').read())/1024))
PY
}
for round in 1 2; do
 for pair in "before $B" "after $A"; do set -- $pair
  for r in 2 4 10; do one $1 $2 /tmp/m30.tns $r 3; done
  one $1 $2 $D/uboot-commitwords-3d.tns.gz 10 8
  one $1 $2 $D/movielens-10m-tags-4d.tns.gz 10 8
  one $1 $2 /work/gen/longmode7m.sptb 16 3
 done
done
