#!/bin/bash
# Device-only Hopper forward kernel TUs: the edit loop, the full test of the slice, GPU tests.
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl 2>/dev/null
S=$(date +%s)
mkdir -p $OUT/edit
BUDGET=330 OUT=$OUT/edit bash benchmarks/edit_loop/run.sh > $OUT/edit-loop.txt 2>&1
echo "edit loop rc $? ($(( $(date +%s) - S )) s)"
FLASHBUILD_CACHE_DIR=/tmp/edit_loop_cache timeout 120 python3 -m flashbuild test --hdim 64 --dtype fp16 --arch sm90 --shapes full > $OUT/test-full.txt 2>&1
echo "test full rc $?"; tail -4 $OUT/test-full.txt
FLASHBUILD_CACHE_DIR=/tmp/gpu_tests timeout $(( 560 - ($(date +%s) - S) )) python3 -m pytest -q -p no:cacheprovider tests/gpu/test_debug_loop_gpu.py::test_sanitize_fails_a_kernel_that_writes_out_of_bounds tests/gpu/test_fwd_packed_rows_gpu.py > $OUT/pytest-gpu.txt 2>&1
echo "pytest gpu rc $?"; tail -5 $OUT/pytest-gpu.txt
echo; grep -v '^\[' $OUT/edit/phases.txt 2>/dev/null | head -30
echo; cat $OUT/edit/summary.txt
