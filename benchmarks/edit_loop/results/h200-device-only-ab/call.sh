#!/bin/bash
# A/B of main (base) and the device-only Hopper forward kernel TUs (new): kernel speed, then host time per call.
export PYTHONUNBUFFERED=1
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl 2>/dev/null
TREES="base=.device/base new=." SEL="--hdim 64,128 --dtype fp16 --arch sm90 --direction fwd --causal both --no-local --no-softcap" \
  RUNS=2 SEQLENS=1024,4096,16384 REPS=20 OUT=$OUT/ab bash benchmarks/checks/ab_trees.sh > $OUT/ab.txt 2>&1
echo "ab rc $?"; grep -E "^== (builds|test)|passed, " $OUT/ab.txt | head; tail -16 $OUT/ab/rows.txt
for r in 1 2 3; do for t in base new; do
  d=.device/base; [ $t = new ] && d=.
  (cd $d && PYTHONPATH=/tmp/site:$PWD FLASHBUILD_CACHE_DIR=/tmp/lo_$t timeout 120 python3 $OLDPWD/benchmarks/edit_loop/launch_overhead.py) > $OUT/launch-$t-$r.txt 2>&1
  echo "launch $t r$r: $(tail -1 $OUT/launch-$t-$r.txt)"
done; done
