#!/bin/bash
# .device/head: `git archive d8ee073 | tar -x -C .device/head` (carried with .whl and this script).
# d8ee073 (one split-KV kernel): the edit loop's rounds, cold main job first, then the main job's full test.
cd .device/head
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site ../../.whl/*.whl 2>/dev/null
mkdir -p $OUT/edit
BWD_HEADERS="kernels/hopper/bwd_mainloop.h kernels/hopper/bwd_epilogue.h" BUDGET=170 OUT=$OUT/edit bash benchmarks/edit_loop/run.sh > $OUT/edit-loop.txt 2>&1
echo "edit loop rc $?"
grep -A32 "^compiled 30 targets" $OUT/edit/cold-main-job.txt | head -8
FLASHBUILD_CACHE_DIR=/tmp/edit_loop_cache timeout 120 python3 -m flashbuild test --hdim 64 --dtype fp16 --arch sm90 --shapes full > $OUT/test-full.txt 2>&1
echo "test full rc $?: $(tail -1 $OUT/test-full.txt)"
echo; cat $OUT/edit/summary.txt
