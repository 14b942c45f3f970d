#!/usr/bin/env bash
# Write a FROSTT tensor (.tns or .tns.gz, 1-based, no header) in the form the GPU peers
# read (MM-CSF, ParTI): a line with the order, a line with the extents (each mode's
# largest index), then the nonzero lines unchanged. Comment lines are dropped.
#   scripts/peer-tns.sh IN.tns[.gz] OUT.tns
set -euo pipefail
in=$1
out=$2
cat_in() { if [[ $in == *.gz ]]; then gzip -dc -- "$in"; else cat -- "$in"; fi; }
header=$(cat_in | awk '!/^#/ && NF > 1 {
        n = NF - 1
        for (k = 1; k <= n; k++) if ($k + 0 > m[k]) m[k] = $k + 0
    }
    END {
        if (n == 0) { print "peer-tns: no nonzero lines" > "/dev/stderr"; exit 1 }
        printf "%d\n", n
        for (k = 1; k <= n; k++) printf "%d%s", m[k], (k < n ? " " : "\n")
    }')
{ printf '%s\n' "$header"; cat_in | awk '!/^#/ && NF > 1'; } > "$out.part"
mv -- "$out.part" "$out"
