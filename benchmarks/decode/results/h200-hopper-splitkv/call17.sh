#!/bin/bash
# .device/head: `git archive e4c3cd5` (the final tree). Decode beside PyTorch SDPA (flash and cuDNN backends, enable_gqa),
# in turns: decode_bandwidth.py --sdpa at hdim 128 and 64, call time (events) then kernel time.
cd .device/head
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1 FLASHBUILD_CACHE_DIR=/tmp/cache_sdpa
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site ../../.whl/*.whl 2>/dev/null
for h in 128 64; do for mode in "" --kernel-time; do
  timeout 120 python3 benchmarks/decode/decode_bandwidth.py --sdpa $mode --hdim $h --batch 1,8,64 --cache 4096,65536 \
    --json $OUT/sdpa-h$h$mode.json > $OUT/sdpa-h$h$mode.txt 2>&1
  echo "== hdim $h $mode rc $?"; grep -E "^\||n/a" $OUT/sdpa-h$h$mode.txt | tail -9
done; done
