#!/bin/bash
# .device/head: `git archive 2fb4ead` (the Hopper split-KV). Correctness first: the KV-cache GPU tests, then the
# split-KV variants' own checks (flashbuild test --shapes full) at hdim 64/128 (Hopper) and 256 (Ampere path), fp16/bf16.
cd .device/head
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1 FLASHBUILD_CACHE_DIR=/tmp/cache_sk
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site ../../.whl/*.whl 2>/dev/null
timeout 330 python3 -m pytest -q -p no:cacheprovider tests/gpu/test_kvcache_gpu.py tests/gpu/test_kvcache_prefill_gpu.py > $OUT/test-kvcache.txt 2>&1
echo "kvcache tests rc $?: $(tail -1 $OUT/test-kvcache.txt)"
grep -E "^FAILED|Error" $OUT/test-kvcache.txt | head -12
timeout 200 python3 -m flashbuild test --hdim 64,128,256 --dtype fp16,bf16 --arch sm90 --direction splitkv --shapes full > $OUT/test-splitkv-full.txt 2>&1
echo "splitkv full rc $?: $(tail -1 $OUT/test-splitkv-full.txt)"
grep -E "FAIL|fail|rror" $OUT/test-splitkv-full.txt | head -12
