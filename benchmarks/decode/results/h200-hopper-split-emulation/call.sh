#!/bin/bash
# .device/head: `git archive ca4a977`. Would a Hopper split-KV pay? benchmarks/decode/hopper_split_emulation.py.
cd .device/head
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1 FLASHBUILD_CACHE_DIR=/tmp/cache_emul
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site ../../.whl/*.whl 2>/dev/null
timeout 540 python3 benchmarks/decode/hopper_split_emulation.py --json $OUT/hopper-split-emulation.json > $OUT/hopper-split-emulation.txt 2>&1
echo "rc $?"; grep -v "^\[" $OUT/hopper-split-emulation.txt | tail -40
