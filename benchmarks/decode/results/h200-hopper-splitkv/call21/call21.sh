#!/bin/bash
# .device/head: `git archive 14f1ef5` + this session's benchmarks/decode/decode_bandwidth.py and splits_sweep.py (every
# call of a row reads the cache copy after the previous call's). call17's SDPA comparison again (kernel time), then the
# split-count sweep.
cd .device/head
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1 FLASHBUILD_CACHE_DIR=/tmp/cache21
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site ../../.whl/*.whl 2>/dev/null
for h in 128 64; do
  timeout 200 python3 benchmarks/decode/decode_bandwidth.py --kernel-time --sdpa --hdim $h --batch 1,8,64 --cache 4096,65536 \
    --json $OUT/sdpa-h$h-kernel-time.json > $OUT/sdpa-h$h-kernel-time.txt 2>&1
  echo "== hdim $h rc $?"; grep "^|" $OUT/sdpa-h$h-kernel-time.txt | tail -6
done
timeout 150 python3 benchmarks/decode/splits_sweep.py --hdim 128,64 --batch 1,8 --cache 4096,16384 > $OUT/splits-sweep.txt 2>&1
echo "== sweep rc $?"; grep "^|" $OUT/splits-sweep.txt | tail -8
