#!/bin/bash
# .device/head: `git archive 4aafce1 | tar -x -C .device/head` (carried with .whl and this script).
# HEAD (B routed: feature backward on the Hopper kernel; no fallback TUs; split-KV device-only): the edit loop's
# rounds (cold main job first), the main job's full test, then the backward GPU tests.
cd .device/head
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site ../../.whl/*.whl 2>/dev/null
S=$(date +%s)
mkdir -p $OUT/edit
BWD_HEADERS="kernels/hopper/bwd_mainloop.h kernels/hopper/bwd_epilogue.h" BUDGET=230 OUT=$OUT/edit bash benchmarks/edit_loop/run.sh > $OUT/edit-loop.txt 2>&1
echo "edit loop rc $? ($(( $(date +%s) - S )) s)"
grep -A34 "^compiled 3[0-9] targets" $OUT/edit/*cold* 2>/dev/null | head -36
FLASHBUILD_CACHE_DIR=/tmp/edit_loop_cache timeout 120 python3 -m flashbuild test --hdim 64 --dtype fp16 --arch sm90 --shapes full > $OUT/test-full.txt 2>&1
echo "test full rc $?: $(tail -1 $OUT/test-full.txt)"
for t in test_hopper_bwd_gpu test_features_gpu test_bwd_deterministic_gpu; do
  L=$(( 585 - ($(date +%s) - S) )); [ $L -lt 30 ] && { echo "$t: skipped (no time left)"; continue; }
  FLASHBUILD_CACHE_DIR=/tmp/edit_loop_cache timeout $L python3 -m pytest -q -p no:cacheprovider tests/gpu/$t.py > $OUT/$t.txt 2>&1
  echo "$t rc $? ($(( $(date +%s) - S )) s): $(grep -E "passed|failed|error" $OUT/$t.txt | tail -1)"
done
echo; cat $OUT/edit/summary.txt
