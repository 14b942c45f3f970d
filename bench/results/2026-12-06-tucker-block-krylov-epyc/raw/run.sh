#!/bin/bash
AB=$(dirname "$0")/../../2026-12-06-tucker-odd-ranks-epyc/raw/ab.sh
B=/work/sptmc-8aa424a N=/work/sptmc-d853201
D=/work/shared/data
for x in "/work/sw2/q4.tns 12 16 24" "/work/sw3/r4.tns 10 16 20" "/work/sw2/q5.tns 12" "$D/movielens-latest-small-4d.tns.gz 8 16" "$D/movielens-10m-tags-4d.tns.gz 16" "$D/atp-matches-4d.tns.gz 16" "$D/uboot-commitwords-3d.tns.gz 16 32" "/work/sw2/twolong.tns 16 32" "/work/sweep/dense3.tns 32" "$D/movielens-100k.tns.gz 16"; do
  $AB $B $N $x
done
echo done
