#!/bin/bash
# The debug loop's GPU tests at the final main (the sanitizer's out-of-bounds test on the split fake tree).
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl 2>/dev/null
FLASHBUILD_CACHE_DIR=/tmp/gpu_tests timeout 420 python3 -m pytest -q -p no:cacheprovider -rs tests/gpu/test_debug_loop_gpu.py > $OUT/test_debug_loop_gpu.txt 2>&1
echo "test_debug_loop_gpu rc $?"; grep -E "passed|failed|error|SKIP" $OUT/test_debug_loop_gpu.txt | tail -5
