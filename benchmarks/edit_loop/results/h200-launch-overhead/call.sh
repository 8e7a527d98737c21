#!/bin/bash
# Host time per call, main before the split (base) against the library launch that sets the shared memory
# limit once per device (new): both trees built first, then 6 processes each in turns; then the slice's full test.
export PYTHONUNBUFFERED=1
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl 2>/dev/null
SEL="--hdim 64 --dtype fp16 --arch sm90 --direction fwd --causal off --no-local --no-softcap"
for t in base new; do d=.device/base; [ $t = new ] && d=.
  (cd $d && PYTHONPATH=/tmp/site:$PWD FLASHBUILD_CACHE_DIR=/tmp/lo_$t timeout 200 python3 -m flashbuild $SEL -j 8 > $OUT/build-$t.txt 2>&1; echo "build $t rc $?") &
done; wait
for r in 1 2 3 4 5 6; do for t in base new; do
  [ $(( r % 2 )) = 0 ] && t=$([ $t = base ] && echo new || echo base)   # alternate who goes first
  d=.device/base; [ $t = new ] && d=.
  (cd $d && PYTHONPATH=/tmp/site:$PWD FLASHBUILD_CACHE_DIR=/tmp/lo_$t timeout 100 python3 $OLDPWD/benchmarks/edit_loop/launch_overhead.py) > /tmp/launch-$t-$r.txt 2>&1
  echo "launch $t r$r: $(tail -1 /tmp/launch-$t-$r.txt)"
done; done | tee $OUT/launch.txt
PYTHONPATH=/tmp/site:$PWD FLASHBUILD_CACHE_DIR=/tmp/lo_new timeout 120 python3 -m flashbuild test $SEL --shapes full > $OUT/test-full.txt 2>&1
echo "test full rc $?"; tail -1 $OUT/test-full.txt
