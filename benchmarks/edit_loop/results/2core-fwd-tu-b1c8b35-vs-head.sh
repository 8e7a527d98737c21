#!/bin/bash
# one Hopper forward TU at a time, base (b1c8b35) and head interleaved, 3 rounds; wall seconds of nvcc
for r in 1 2 3; do
  for tu in fwd_hdim64_fp16_sm90 fwd_hdim64_fp16_causal_sm90 fwd_hdim64_fp16_sm90_local_softcap fwd_hdim64_fp16_causal_sm90_local_softcap; do
    for t in tb th; do
      cmd=$(ninja -C /tmp/$t -t commands obj/$tu.o | tail -1 | sed "s# -o obj/$tu.o# -o /tmp/$t-rerun.o#; s#-MF obj/$tu.o.d#-MF /tmp/$t-rerun.d#")
      s=$(date +%s.%N); (cd /tmp/$t && eval "$cmd" --time /tmp/$t-$tu-$r.csv) ; e=$(date +%s.%N)
      echo "$r $tu $t $(echo "$e - $s" | bc)"
    done
  done
done
