#!/bin/bash
# Every Hopper backward kernel of the selection (fp16 sm90, head dims 64-256, causal and not), base (one TU,
# 478b6b0's kernels) against new (the launch TU and its two kernel TUs): each kernel's SASS alone
# (cuobjdump -sass -fun), addresses stripped, md5 (2core-device-only-bwd-sass-fn.py, copied beside it as fn_sass.py when run).
cd /tmp/sassbwd
F=$(python3 -c "
import re
t=open('/tmp/exp3/build.ninja').read()
m=re.search(r'^nvcc_flags = (.*?)(?<!\\$)\n', t, re.S|re.M)
print(m.group(1).replace('\$\n','').replace('    ',' '))")
F=${F//-I\/tmp\/exp3\/generated/}; F=${F//-I\/work\/main\/kernels/}
G="-gencode arch=compute_90a,code=sm_90a"
mkdir -p obj
job() { local v=$1
  nvcc $F -I/work/main/.device/base/kernels $G -c base/$v.cu -o obj/$v.base.o || echo "FAILED base $v"
  nvcc $F -I/work/main/kernels $G -c new/$v.cu -o obj/$v.new.o || echo "FAILED new $v"
  for k in kernel kernel_ordered; do nvcc $F -I/work/main/kernels $G -fatbin new/${v}_$k.cu -o obj/$v.$k.fatbin || echo "FAILED $k $v"; done
  echo "== $v"; python3 2core-device-only-bwd-sass-fn.py obj/$v.base.o obj/$v.new.o,obj/$v.kernel.fatbin,obj/$v.kernel_ordered.fatbin
}
export -f job; export F G
ls new | grep -E "^bwd_.*_sm90.cu$" | sed 's/.cu$//' | xargs -P 2 -I{} bash -c 'job {} > obj/{}.log 2>&1'
cat obj/*.log
