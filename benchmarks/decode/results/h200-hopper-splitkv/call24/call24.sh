#!/bin/bash
# .device/head: `git archive 378d278` (check_values: one device-to-host copy), .device/old: `git archive f51d002`.
# Decode call time with the host (CUDA events, decode_bandwidth.py without --kernel-time), the trees in turns twice,
# small calls; then the KV-cache GPU tests on the head.
cd .device
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site ../.whl/*.whl 2>/dev/null
export PYTHONUNBUFFERED=1
run() {  # TREE ROUND
  (cd $1 && PYTHONPATH=/tmp/site:$PWD FLASHBUILD_CACHE_DIR=/tmp/cache24_$1 timeout 150 python3 ../head/benchmarks/decode/decode_bandwidth.py      --hdim 128 --batch 1,8 --cache 4096,16384 --json $OUT/call-$1-$2.json > $OUT/call-$1-$2.txt 2>&1)
  echo "== $1 round $2 rc $?"; grep "^| [0-9]" $OUT/call-$1-$2.txt
}
run old 1; run head 1; run head 2; run old 2
cd head && PYTHONPATH=/tmp/site:$PWD FLASHBUILD_CACHE_DIR=/tmp/cache24_head timeout 200 python3 -m pytest -q -p no:cacheprovider tests/gpu/test_kvcache_gpu.py > $OUT/test-kvcache.txt 2>&1
echo "kvcache tests rc $?: $(tail -1 $OUT/test-kvcache.txt)"
