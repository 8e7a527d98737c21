#!/bin/bash
# .device/head: `git archive e62f894` (the split-KV launches' shared steps). The KV-cache GPU tests and the split-KV
# full test at hdim 64 (Hopper) and 256 (the Ampere path on sm90), fp16; the main job's full test.
cd .device/head
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1 FLASHBUILD_CACHE_DIR=/tmp/cache_final
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site ../../.whl/*.whl 2>/dev/null
timeout 250 python3 -m pytest -q -p no:cacheprovider tests/gpu/test_kvcache_gpu.py tests/gpu/test_kvcache_prefill_gpu.py > $OUT/test-kvcache.txt 2>&1
echo "kvcache tests rc $?: $(tail -1 $OUT/test-kvcache.txt)"
timeout 120 python3 -m flashbuild test --hdim 64,256 --dtype fp16 --arch sm90 --direction splitkv --shapes full > $OUT/test-splitkv.txt 2>&1
echo "splitkv full rc $?: $(tail -1 $OUT/test-splitkv.txt)"
timeout 150 python3 -m flashbuild test --hdim 64 --dtype fp16 --arch sm90 --shapes full > $OUT/test-main.txt 2>&1
echo "main job full rc $?: $(tail -1 $OUT/test-main.txt)"
