# The A/B job of README.md's section "dq_accum in the kernel's register order", as run on the GPU
# machine (run from the repo root, $OUT set by the device tool). 'base' is a copy of commit 5ae1a46
# (git archive) in .notes/base; 'new' is the working tree of the fragment-order change; 'v2' the same
# with the temporary macro FLASHBUILD_AB_DQ_V2 (two red.v2 per vector instead of one red.v4; removed
# after this run).
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl 2>/dev/null
export PYTHONUNBUFFERED=1
t0=$(date +%s); ROOT=$PWD
S="--dtype fp16 --arch sm90 --direction fwd,bwd --no-local --no-softcap --hdim 64,128,256"
V2="--nvcc-flag=-DFLASHBUILD_AB_DQ_V2"
printf '#!/bin/bash\ncd %s && PYTHONPATH=/tmp/site:%s FLASHBUILD_CACHE_DIR=/tmp/fbc exec python3 -m flashbuild "$@"\n' $ROOT $ROOT > /tmp/new; chmod +x /tmp/new
printf '#!/bin/bash\ncd %s/.notes/base && PYTHONPATH=/tmp/site:%s/.notes/base FLASHBUILD_CACHE_DIR=/tmp/fbc0 exec python3 -m flashbuild "$@"\n' $ROOT $ROOT > /tmp/base; chmod +x /tmp/base
export PATH=/tmp:$PATH
base $S -j 6 > $OUT/b0.txt 2>&1 &
new $S -j 5 > $OUT/b1.txt 2>&1 &
new $S -j 5 $V2 > $OUT/b2.txt 2>&1 &
wait; for f in b0 b1 b2; do tail -n 1 $OUT/$f.txt | cut -c1-60; done; echo "build $(( $(date +%s) - t0 )) s"
timeout 120 new test $S --shapes quick > $OUT/test1.txt 2>&1; echo "test new rc $?"; tail -n 1 $OUT/test1.txt
B="bench --dtype fp16 --arch sm90 --direction bwd --no-local --no-softcap --hdim 64,128,256 --seqlens 1024,4096,16384 --reps 10"
i=0
for w in base new v2 base new; do i=$((i+1))
  case $w in base) timeout 90 base $B > $OUT/v$i.txt 2>&1;; new) timeout 90 new $B > $OUT/v$i.txt 2>&1;; v2) timeout 90 new $B $V2 > $OUT/v$i.txt 2>&1;; esac
  echo "== $i $w"; grep -E "^(fwd|bwd)_" $OUT/v$i.txt | awk '{print $1,$2,$4,$7}'; done
echo "t $(( $(date +%s) - t0 )) s"
