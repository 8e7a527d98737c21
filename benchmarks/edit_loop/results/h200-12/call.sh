#!/bin/bash
# .device/head: `git archive fef8159 | tar -x -C .device/head` (carried with .whl and this script).
# A + C at HEAD (no fallback TUs; split-KV's kernels device-only): the main job cold, its full test, and the GPU
# tests that reach empty calls, misaligned tensors, the KV cache and split-KV.
cd .device/head
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site ../../.whl/*.whl 2>/dev/null
S=$(date +%s)
export FLASHBUILD_CACHE_DIR=/tmp/fbcache
/usr/bin/time -f "%e s wall" python3 -m flashbuild --hdim 64 --dtype fp16 --arch sm90 > $OUT/main-job.txt 2>&1
echo "main job rc $? ($(( $(date +%s) - S )) s): $(tail -1 $OUT/main-job.txt)"
grep -A30 "^compiled" $OUT/main-job.txt | head -32
timeout 150 python3 -m flashbuild test --hdim 64 --dtype fp16 --arch sm90 --shapes full > $OUT/test-full.txt 2>&1
echo "test full rc $?: $(tail -1 $OUT/test-full.txt)"
for t in test_hostile_inputs_gpu test_host_binding_gpu test_api_gpu test_features_gpu test_kvcache_gpu test_kvcache_prefill_gpu; do
  L=$(( 585 - ($(date +%s) - S) )); [ $L -lt 30 ] && { echo "$t: skipped (no time left)"; continue; }
  timeout $L python3 -m pytest -q -p no:cacheprovider tests/gpu/$t.py > $OUT/$t.txt 2>&1
  echo "$t rc $? ($(( $(date +%s) - S )) s): $(grep -E "passed|failed|error" $OUT/$t.txt | tail -1)"
done
