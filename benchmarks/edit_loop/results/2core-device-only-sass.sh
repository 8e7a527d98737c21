#!/bin/bash
# Every Hopper forward kernel of the selection, base (one TU, 478b6b0's kernels) against new (the kernel TU,
# -fatbin): SASS with addresses and the Function line stripped, md5.
F=$(python3 -c "
import re
t=open('/tmp/exp3/build.ninja').read()
m=re.search(r'^nvcc_flags = (.*?)(?<!\\$)\n', t, re.S|re.M)
print(m.group(1).replace('\$\n','').replace('    ',' '))")
F=${F//-I\/tmp\/exp3\/generated/}; F=${F//-I\/work\/main\/kernels/}
G="-gencode arch=compute_90a,code=sm_90a"
CUO=/root/.pyenv/versions/3.11.7/lib/python3.11/site-packages/nvidia/cu13/bin/cuobjdump
mkdir -p obj
job() { local v=$1
  nvcc $F -I/work/main/.device/base/kernels $G -c base/$v.cu -o obj/$v.base.o || echo "FAILED base $v"
  nvcc $F -I/work/main/kernels $G -fatbin new/${v}_kernel.cu -o obj/$v.new.fatbin || echo "FAILED new $v"
  a=$($CUO -sass obj/$v.base.o | sed -E 's@/\*[0-9a-f]{4,}\*/@@g' | grep -v "^\s*$" | grep -v "code for\|Fatbin\|arch =\|code version\|host =\|compile_size\|identifier\|Function :" | md5sum | cut -c1-12)
  b=$($CUO -sass obj/$v.new.fatbin | sed -E 's@/\*[0-9a-f]{4,}\*/@@g' | grep -v "^\s*$" | grep -v "code for\|Fatbin\|arch =\|code version\|host =\|compile_size\|identifier\|Function :" | md5sum | cut -c1-12)
  n=$($CUO -sass obj/$v.new.fatbin | grep -c "Function :")
  printf '%-48s base %s new %s kernels %s %s\n' $v $a $b $n "$([ $a = $b ] && echo identical || echo DIFFERENT)"
}
export -f job; export F G CUO
ls new | grep _kernel.cu | sed 's/_kernel.cu//' | xargs -P 2 -I{} bash -c 'job {}'
