#!/bin/bash
# Final checks of the device-only kernel TUs on the GPU: the Hopper backward at head dims 96/192/256, two
# builds in one process, the paged/dense prefill chunks and the packed GQA rows (forward kernels from fatbins).
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl 2>/dev/null
S=$(date +%s)
for t in test_two_builds_gpu test_hopper_bwd_gpu test_kvcache_prefill_gpu test_fwd_packed_rows_gpu; do
  L=$(( 580 - ($(date +%s) - S) )); [ $L -lt 30 ] && { echo "$t: skipped (no time left)"; continue; }
  FLASHBUILD_CACHE_DIR=/tmp/gpu_tests timeout $L python3 -m pytest -q -p no:cacheprovider tests/gpu/$t.py > $OUT/$t.txt 2>&1
  echo "$t rc $? ($(( $(date +%s) - S )) s): $(grep -E "passed|failed|error" $OUT/$t.txt | tail -1)"
done
