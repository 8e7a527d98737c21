#!/bin/bash
# The Hopper backward's main kernels device-only (<variant>_kernel, _kernel_ordered): the edit loop, the full
# test of the slice, then the deterministic and packed backward GPU tests while time is left.
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl 2>/dev/null
S=$(date +%s)
mkdir -p $OUT/edit
BUDGET=270 OUT=$OUT/edit bash benchmarks/edit_loop/run.sh > $OUT/edit-loop.txt 2>&1
echo "edit loop rc $? ($(( $(date +%s) - S )) s)"
FLASHBUILD_CACHE_DIR=/tmp/edit_loop_cache timeout 120 python3 -m flashbuild test --hdim 64 --dtype fp16 --arch sm90 --shapes full > $OUT/test-full.txt 2>&1
echo "test full rc $?"; tail -1 $OUT/test-full.txt
L=$(( 575 - ($(date +%s) - S) ))
FLASHBUILD_CACHE_DIR=/tmp/gpu_tests timeout $L python3 -m pytest -q -p no:cacheprovider tests/gpu/test_hopper_varlen_bwd_gpu.py tests/gpu/test_bwd_deterministic_gpu.py > $OUT/pytest-bwd.txt 2>&1
echo "pytest bwd rc $? (limit $L s)"; grep -E "passed|failed|error" $OUT/pytest-bwd.txt | tail -3
echo; grep -E "bwd_hdim64_fp16(_causal)?_sm90(_kernel|_kernel_ordered)? " $OUT/edit/phases.txt 2>/dev/null
echo; cat $OUT/edit/summary.txt
