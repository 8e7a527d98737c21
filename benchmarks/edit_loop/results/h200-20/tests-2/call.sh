#!/bin/bash
# .device/head: `git archive 14f1ef5` (the small kernels once per head dim and dtype; HEAD_DIM_FAMILY). GPU tests beyond call18's:
# the head-dim-32 backward on sm90 (the Ampere family now in the plan), the API (autograd, GQA, padded head dims),
# deterministic and packed backward calls, and split-KV at hdim 128 bf16 (another small-kernel group).
cd .device/head
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1 FLASHBUILD_CACHE_DIR=/tmp/cache19
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site ../../.whl/*.whl 2>/dev/null
timeout 150 python3 -m flashbuild test --hdim 32,128 --dtype bf16 --arch sm90 --direction bwd,splitkv --features none --shapes full > $OUT/test-h32-h128.txt 2>&1
echo "bwd+splitkv hdim 32/128 bf16 full rc $?: $(tail -1 $OUT/test-h32-h128.txt)"
for t in test_api_gpu test_bwd_deterministic_gpu test_hopper_varlen_bwd_gpu; do
  timeout 170 python3 -m pytest -q -p no:cacheprovider tests/gpu/$t.py > $OUT/$t.txt 2>&1
  echo "$t rc $?: $(tail -1 $OUT/$t.txt)"
done
