#!/bin/bash
# Peak memory and plan per MPI rank, before (4b8b85b) and after (e3dfdd8), alternating.
# Usage: OLD=path/to/sptmc-4b8b85b NEW=path/to/sptmc-e3dfdd8 ./run.sh T1 T2 ... > raw.jsonl
# Both binaries: release builds with --features mpi.
set -e
tiny=$(mktemp --suffix .tns)
python3 - "$tiny" <<'PY'
import random, sys
random.seed(1)
seen = set()
with open(sys.argv[1], 'w') as f:
    while len(seen) < 64:
        c = tuple(random.randint(1, 8) for _ in range(3))
        if c not in seen:
            seen.add(c)
            f.write(' '.join(map(str, c)) + ' %d\n' % random.randint(1, 5))
PY
for round in 1 2; do
  for f in "$tiny" "$@"; do
    for np in 2 4; do
      for cmd in cp cp-apr; do
        if [ $cmd = cp ]; then args="--rank 16 --iters 2"; else args="--rank 8 --iters 2 --inner 2"; fi
        for build in old new; do
          bin=$OLD; [ $build = new ] && bin=$NEW
          out=$(mpirun --allow-run-as-root --oversubscribe -np $np -x RAYON_NUM_THREADS=1 \
                $bin $cmd "$f" $args --json --no-cache 2>/dev/null)
          python3 -c '
import json, sys
j = json.loads(sys.argv[1])
print(json.dumps({"round": int(sys.argv[2]), "build": sys.argv[3], "tensor": sys.argv[4].split("/")[-1] if "tmp" not in sys.argv[4] else "tiny", "ranks": int(sys.argv[5]), "cmd": sys.argv[6], "dims": j["dims"], "nnz": j.get("nnz"), "fit": j.get("final_fit", j.get("log_likelihood")), "planned_bytes_rank0": j["planned_bytes"], "per_rank": [{k: r.get(k) for k in ("rank", "nnz", "peak_bytes", "planned_bytes")} for r in j["distributed"]["per_rank"]]}))
' "$out" $round $build "$f" $np $cmd
        done
      done
    done
  done
done
rm -f "$tiny"
