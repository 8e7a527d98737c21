#!/bin/bash
# .device/head: `git archive a138198`. hopper_split_emulation.py at hdim 64 with the forward's tile (192 x 128, 4 stages)
# and with 128 x 128 tiles (4 and 2 stages), each its own build.
cd .device/head
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1 FLASHBUILD_CACHE_DIR=/tmp/cache_emul
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site ../../.whl/*.whl 2>/dev/null
A="--hdim 64 --batch 8,64 --cache 4096,16384,65536 --reps 20"
timeout 170 python3 benchmarks/decode/hopper_split_emulation.py $A --json $OUT/tile-192x128x4.json > $OUT/tile-192x128x4.txt 2>&1
timeout 170 python3 benchmarks/decode/hopper_split_emulation.py $A --nvcc-flag=-DFLASHBUILD_HOPPER_BLOCK_M=128 --nvcc-flag=-DFLASHBUILD_HOPPER_BLOCK_N=128 --nvcc-flag=-DFLASHBUILD_HOPPER_STAGES=4 --json $OUT/tile-128x128x4.json > $OUT/tile-128x128x4.txt 2>&1
timeout 170 python3 benchmarks/decode/hopper_split_emulation.py $A --nvcc-flag=-DFLASHBUILD_HOPPER_BLOCK_M=128 --nvcc-flag=-DFLASHBUILD_HOPPER_BLOCK_N=128 --nvcc-flag=-DFLASHBUILD_HOPPER_STAGES=2 --json $OUT/tile-128x128x2.json > $OUT/tile-128x128x2.txt 2>&1
for f in $OUT/tile-*.txt; do echo "== $f"; grep "^| 64" $f; grep -i "error" $f | head -3; done
