#!/bin/bash
# Tucker-HOOI seconds per iteration, base and new build alternating, two rounds.
# usage: ab.sh BASE NEW FILE RANKS...   (RANKS: one rank per mode, e.g. 5 10 16)
# Prints per run: the mean kernel and linear-algebra seconds of iterations 2-5 and
# the final fit (iteration 1 holds the row groups' build).
base=$1 new=$2 f=$3; shift 3
for r in "$@"; do
  for round in 1 2; do
    for b in "$base" "$new"; do
      out=$("$b" tucker "$f" --ranks "$r" --iters 5 --tol 0 --threads 2 --seed 1 2>&1)
      k=$(echo "$out" | grep "its =   [2345] " | sed 's/.*kernel \([0-9.]*\)s.*/\1/' | awk '{s+=$1} END {printf "%.4f", s/NR}')
      l=$(echo "$out" | grep "its =   [2345] " | sed 's/.*linalg \([0-9.]*\)s.*/\1/' | awk '{s+=$1} END {printf "%.4f", s/NR}')
      fit=$(echo "$out" | tail -1 | grep -o "final fit [0-9.]*")
      echo "$(basename "$f") rank $r round $round $(basename "$b"): kernel $k linalg $l $fit"
    done
  done
done
