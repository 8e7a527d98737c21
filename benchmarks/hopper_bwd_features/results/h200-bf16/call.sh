#!/bin/bash
# .device/head: `git archive 7f210b1` (the feature gradients in bf16 too). The Hopper backward's GPU tests.
cd .device/head
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1 FLASHBUILD_CACHE_DIR=/tmp/cache_tests
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site ../../.whl/*.whl 2>/dev/null
timeout 520 python3 -m pytest -q -p no:cacheprovider tests/gpu/test_hopper_bwd_gpu.py -k "feature" -x > $OUT/test-hopper-bwd-features.txt 2>&1
echo "features rc $?: $(tail -1 $OUT/test-hopper-bwd-features.txt)"
grep -E "FAILED|Error" $OUT/test-hopper-bwd-features.txt | head -5
