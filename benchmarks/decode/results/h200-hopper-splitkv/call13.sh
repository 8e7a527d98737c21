#!/bin/bash
# .device/head: `git archive a3f8c6f` (the Hopper split-KV, splits filling one wave), .device/old: `git archive d055165`.
# 1. The KV-cache GPU tests and the split-KV full test at hdim 64/128 of the head. 2. Decode: kernel time
# (--kernel-time) and call time (CUDA events), old then new, hdim 128 and 64.
cd .device
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site ../.whl/*.whl 2>/dev/null
export PYTHONUNBUFFERED=1
(cd head && export PYTHONPATH=/tmp/site:$PWD FLASHBUILD_CACHE_DIR=/tmp/cache_dec_head && \
 timeout 200 python3 -m pytest -q -p no:cacheprovider tests/gpu/test_kvcache_gpu.py tests/gpu/test_kvcache_prefill_gpu.py > $OUT/test-kvcache.txt 2>&1; \
 echo "kvcache tests rc $?: $(tail -1 $OUT/test-kvcache.txt)"; \
 timeout 100 python3 -m flashbuild test --hdim 64,128 --dtype fp16 --arch sm90 --direction splitkv --shapes full > $OUT/test-splitkv.txt 2>&1; \
 echo "splitkv full rc $?: $(tail -1 $OUT/test-splitkv.txt)")
run() {  # TREE HDIM MODE
  (cd $1 && PYTHONPATH=/tmp/site:$PWD FLASHBUILD_CACHE_DIR=/tmp/cache_dec_$1 timeout 110 python3 ../head/benchmarks/decode/decode_bandwidth.py \
     $3 --hdim $2 --batch 1,8,64 --cache 4096,65536 --json $OUT/dec-$1-h$2$3.json > $OUT/dec-$1-h$2$3.txt 2>&1)
  echo "== $1 hdim $2 $3 rc $?"; grep "^|" $OUT/dec-$1-h$2$3.txt | tail -6
}
run old 128 --kernel-time; run head 128 --kernel-time; run old 64 --kernel-time; run head 64 --kernel-time
run head 128 ""; run old 128 ""
