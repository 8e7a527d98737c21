# Run from the repository root on the nvidia-h200 machine, with benchmarks/archive/tried/bwd_dq_chunks--tried-bulk-reduce.diff (out of the tree: git show 75f2c05:benchmarks/archive/tried/bwd_dq_chunks--tried-bulk-reduce.diff | git apply) applied to the
# working tree and the base tree unpacked by: git archive 3b108a5 | tar -x -C .notes/base
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl 2>/dev/null
export PYTHONUNBUFFERED=1
t0=$(date +%s); ROOT=$PWD
printf '#!/bin/bash\ncd %s && PYTHONPATH=/tmp/site:%s FLASHBUILD_CACHE_DIR=/tmp/fbc exec python3 -m flashbuild "$@"\n' $ROOT $ROOT > /tmp/new; chmod +x /tmp/new
printf '#!/bin/bash\ncd %s/.notes/base && PYTHONPATH=/tmp/site:%s/.notes/base FLASHBUILD_CACHE_DIR=/tmp/fbc0 exec python3 -m flashbuild "$@"\n' $ROOT $ROOT > /tmp/base; chmod +x /tmp/base
export PATH=/tmp:$PATH
S="--dtype fp16 --arch sm90 --direction bwd --no-local --no-softcap --hdim 64,128,256"
base $S -j 8 > $OUT/build-base.txt 2>&1 & new $S -j 8 > $OUT/build-new.txt 2>&1 & wait; echo "build $(( $(date +%s) - t0 )) s"
tail -n 3 $OUT/build-new.txt
timeout 150 new test $S --shapes quick > $OUT/test.txt 2>&1; echo "test rc $?"; grep -E "passed, [0-9]+ failed" $OUT/test.txt | tail -n 1; grep -iE "fail|mismatch" $OUT/test.txt | head -5
B="bench $S --seqlens 1024,4096,16384 --reps 10"
i=0; for w in base new base new; do i=$((i+1)); timeout 90 $w $B > $OUT/v$i.txt 2>&1; echo "== $i $w"; grep -E "^(fwd|bwd)_" $OUT/v$i.txt | awk '{print $1,$2,$4,$7}'; done
echo "t $(( $(date +%s) - t0 )) s"
