#!/bin/bash
# After the launch TU stopped including the kernel (fwd_params.h): the edit loop, the full test of the slice,
# host time per call (base = main before the split, in turns), then GPU tests while time is left.
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl 2>/dev/null
S=$(date +%s)
mkdir -p $OUT/edit
BUDGET=300 OUT=$OUT/edit bash benchmarks/edit_loop/run.sh > $OUT/edit-loop.txt 2>&1
echo "edit loop rc $? ($(( $(date +%s) - S )) s)"
FLASHBUILD_CACHE_DIR=/tmp/edit_loop_cache timeout 120 python3 -m flashbuild test --hdim 64 --dtype fp16 --arch sm90 --shapes full > $OUT/test-full.txt 2>&1
echo "test full rc $?"; tail -1 $OUT/test-full.txt
for r in 1 2 3 4; do for t in base new; do
  d=.device/base; [ $t = new ] && d=.
  (cd $d && PYTHONPATH=/tmp/site:$PWD FLASHBUILD_CACHE_DIR=/tmp/lo_$t timeout 100 python3 $OLDPWD/benchmarks/edit_loop/launch_overhead.py) > $OUT/launch-$t-$r.txt 2>&1
  echo "launch $t r$r: $(tail -1 $OUT/launch-$t-$r.txt)"
done; done | tee $OUT/launch.txt
L=$(( 570 - ($(date +%s) - S) ))
FLASHBUILD_CACHE_DIR=/tmp/gpu_tests timeout $L python3 -m pytest -q -p no:cacheprovider tests/gpu/test_hopper_varlen_gpu.py > $OUT/pytest-varlen.txt 2>&1
echo "pytest varlen rc $? (limit $L s)"; tail -2 $OUT/pytest-varlen.txt
echo; cat $OUT/edit/summary.txt
