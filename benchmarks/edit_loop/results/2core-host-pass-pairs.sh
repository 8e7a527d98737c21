#!/bin/bash
# Interleaved old/new nvcc --time of one TU at a time, the build's own flags (build.ninja), only -I kernels differs.
cd /tmp/wth-exp
FL="$(cat flags)"
out=/tmp/wth-exp/pairs.txt; : > $out
for tu in gen/fwd_hdim64_fp16_sm90_fallback gen/bwd_hdim64_fp16_sm90_fallback gen/bwd_hdim64_fp16_sm90 gen-splitkv/splitkv_hdim64_fp16_sm90 gen/fwd_hdim64_fp16_sm90; do
  for side in old new; do
    [ $side = old ] && K=/tmp/wth-exp/old/kernels || K=/work/wt-host/kernels
    n=$(basename $tu)-$side; rm -f t.csv
    echo "# $(uptime)" >> $out
    nvcc $FL -I$K -I$(dirname $tu) --time=t.csv -c $tu.cu -o /tmp/wth-exp/$n.o
    echo "$n $(awk -F, 'NR>1{gsub(/ /,"",$(NF-1)); gsub(/^ +| +$/,"",$2); printf "%s=%.2f; ", $2, $(NF-1)/1000}' t.csv)" >> $out
  done
done
echo DONE >> $out
