#!/bin/bash
# .device/head: `git archive 6e7142f | tar -x -C .device/head` (carried with .whl and this script).
# The final tree: the edit loop's rounds (the backward's epilogue round after bwd_dq_accum.h), then the GPU tests
# this session's changes reach that no earlier call ran at this tree.
cd .device/head
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site ../../.whl/*.whl 2>/dev/null
S=$(date +%s)
mkdir -p $OUT/edit
BWD_HEADERS="kernels/hopper/bwd_mainloop.h kernels/hopper/bwd_epilogue.h" BUDGET=200 OUT=$OUT/edit bash benchmarks/edit_loop/run.sh > $OUT/edit-loop.txt 2>&1
echo "edit loop rc $? ($(( $(date +%s) - S )) s)"
export FLASHBUILD_CACHE_DIR=/tmp/edit_loop_cache
for t in test_host_binding_gpu test_hostile_inputs_gpu test_api_gpu test_hopper_varlen_bwd_gpu test_two_builds_gpu test_debug_loop_gpu test_fwd_packed_rows_gpu; do
  L=$(( 585 - ($(date +%s) - S) )); [ $L -lt 30 ] && { echo "$t: skipped (no time left)"; continue; }
  timeout $L python3 -m pytest -q -p no:cacheprovider tests/gpu/$t.py > /tmp/$t.txt 2>&1
  echo "$t rc $? ($(( $(date +%s) - S )) s): $(grep -E "passed|failed|error" /tmp/$t.txt | tail -1)"
  grep -E "^(FAILED|ERROR)|^E  " /tmp/$t.txt | head -8
done
tar -czf $OUT/tests.tgz -C /tmp $(cd /tmp && ls test_*_gpu.txt)
echo; cat $OUT/edit/summary.txt
