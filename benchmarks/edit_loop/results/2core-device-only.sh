#!/bin/bash
# The Hopper forward TU of fwd_hdim64_fp16_sm90 (2-core machine): one TU as main built it (base: the tree at
# 478b6b0 under .device/base), against the device-only kernel TU and the host-only launch TU that replace it,
# each alone and the two at once (2 jobs), 3 rounds interleaved. Generated sources and flags: the builds'
#   flashbuild build --hdim 64 --dtype fp16 --arch sm90 --direction fwd --causal off --no-local --no-softcap
#     --compile-only --build-dir DIR        (base: /tmp/exp from the base tree, new: /tmp/exp3)
F=$(python3 -c "
import re
t=open('/tmp/exp3/build.ninja').read()
m=re.search(r'^nvcc_flags = (.*?)(?<!\\$)\n', t, re.S|re.M)
print(m.group(1).replace('\$\n','').replace('    ',' '))")
G="-gencode arch=compute_90a,code=sm_90a"
BASE_F=${F//-I\/work\/main\/kernels/-I\/work\/main\/.device\/base\/kernels}
BASE_F=${BASE_F//\/tmp\/exp3\/generated/\/tmp\/exp\/generated}
T=$(mktemp -d)
wall() { local s=$(date +%s.%N); "$@" > /dev/null 2>&1 || echo "FAILED: $*"; python3 -c "print(f'{$(date +%s.%N) - $s:.2f}')"; }
for r in 1 2 3; do
  base=$(wall nvcc $BASE_F $G -c /tmp/exp/generated/fwd_hdim64_fp16_sm90.cu -o $T/base.o)
  kernel=$(wall nvcc $F $G -fatbin /tmp/exp3/generated/fwd_hdim64_fp16_sm90_kernel.cu -o $T/k.fatbin)
  launch=$(wall nvcc $F $G -c /tmp/exp3/generated/fwd_hdim64_fp16_sm90.cu -o $T/l.o)
  both=$(wall bash -c "nvcc $F $G -fatbin /tmp/exp3/generated/fwd_hdim64_fp16_sm90_kernel.cu -o $T/k2.fatbin & nvcc $F $G -c /tmp/exp3/generated/fwd_hdim64_fp16_sm90.cu -o $T/l2.o & wait")
  echo "round $r: one TU (base) $base s | kernel TU -fatbin $kernel s | launch TU -c $launch s | both at once (2 jobs) $both s"
done
rm -rf $T
