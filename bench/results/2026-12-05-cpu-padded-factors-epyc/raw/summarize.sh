#!/bin/bash
# Prints the tables of ../README.md from the outputs run.sh leaves here.
med() { grep -E "its = +([2-9]|10) " "$1" | sed 's/.*kernel \([0-9.]*\)s.*/\1/' | sort -n | awk '{a[NR]=$1} END{print a[int((NR+1)/2)]}'; }
tot() { grep -E "its = +([2-9]|10) " "$1" | sed 's/.*(\([0-9.]*\)s:.*/\1/' | sort -n | awk '{a[NR]=$1} END{print a[int((NR+1)/2)]}'; }
fit() { grep final "$1" | sed 's/.*final fit \([0-9.]*\) after \([0-9]*\).*/\1 (\2 its)/'; }
echo "## all-mode MTTKRP, median ms (base round 1, 2 | new round 1, 2)"
for n in longmode twolong o4long uboot-commitwords-3d; do
  for r in 10 16 20 24 32 40 48 50; do
    printf "| %s | %s |" $n $r
    for b in base new; do for k in 1 2; do
      printf " %s" $(grep "all modes mttkrp r$r:" bench-$n-$b-$k.txt | sed 's/.*median \([0-9.]*\) ms.*/\1/')
    done; printf " |"; done; echo
  done
done
echo "## CP-ALS, median kernel s / iteration s over iterations 2-10 (base 1, 2 | new 1, 2), final fits"
for n in longmode twolong o4long uboot-commitwords-3d; do
  for r in 10 20 40 48; do
    printf "| %s | %s |" $n $r
    for b in base new; do for k in 1 2; do
      printf " %s/%s" $(med cp-$n-r$r-$b-$k.txt) $(tot cp-$n-r$r-$b-$k.txt)
    done; printf " |"; done
    printf " %s | %s |\n" "$(fit cp-$n-r$r-base-1.txt)" "$(fit cp-$n-r$r-new-1.txt)"
  done
done
