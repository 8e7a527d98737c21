#!/bin/bash
# cudafe++ and the host gcc alone, old/new kernels interleaved, 3 reps: nvcc --dryrun's own commands.
cd /tmp/wth-exp; FL="$(cat flags)"; out=/tmp/wth-exp/iso.txt; : > $out
for tu in "$@"; do
  dir=/tmp/wth-exp/gen; [[ $tu == splitkv* ]] && dir=/tmp/wth-exp/gen-splitkv
  for side in old new; do
    [ $side = old ] && K=/tmp/wth-exp/old/kernels || K=/work/wt-host/kernels
    w=/tmp/wth-exp/iso/$tu-$side; mkdir -p $w
    nvcc $FL -I$K -I$dir --dryrun -c $dir/$tu.cu -o $w/x.o 2>&1 | sed -n 's/^#\$ //p' | sed "s#/tmp/tmpxft_[0-9a-f_]*-[0-9]*_#$w/#g" > $w/cmds
    grep -m1 -- "cpp4.ii" $w/cmds | grep -- " -E " > $w/pp.sh
    grep "^cudafe++" $w/cmds > $w/fe.sh
    grep "^gcc .* -c -x c++" $w/cmds | grep cudafe1.cpp > $w/cc.sh
    (cd $w && bash pp.sh)
  done
  for r in 1 2 3; do for side in old new; do
    w=/tmp/wth-exp/iso/$tu-$side
    a=$(date +%s.%N); (cd $w && bash fe.sh); b=$(date +%s.%N); (cd $w && touch $(sed -n 's/^#include "\(tmpxft.*stub.c\)"/\1/p' *.cudafe1.cpp) && bash cc.sh); c=$(date +%s.%N)
    echo "$tu $side rep$r cudafe++ $(echo "$b - $a" | bc) host-gcc $(echo "$c - $b" | bc) load $(cut -d' ' -f1 /proc/loadavg)" >> $out
  done; done
done
echo DONE >> $out
