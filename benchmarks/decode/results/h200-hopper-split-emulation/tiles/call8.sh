#!/bin/bash
# .device/head: `git archive a138198`. hopper_split_emulation.py at hdim 64 with a 64 x 128 tile (one consumer
# warpgroup, no ping-pong), 4 and 8 stages.
cd .device/head
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1 FLASHBUILD_CACHE_DIR=/tmp/cache_emul
A="--hdim 64 --batch 8,64 --cache 4096,16384,65536 --reps 20"
T="--nvcc-flag=-DFLASHBUILD_HOPPER_BLOCK_M=64 --nvcc-flag=-DFLASHBUILD_HOPPER_BLOCK_N=128 --nvcc-flag=-DFLASHBUILD_HOPPER_PINGPONG=0"
timeout 200 python3 benchmarks/decode/hopper_split_emulation.py $A $T --nvcc-flag=-DFLASHBUILD_HOPPER_STAGES=4 --json $OUT/tile-64x128x4.json > $OUT/tile-64x128x4.txt 2>&1
timeout 200 python3 benchmarks/decode/hopper_split_emulation.py $A $T --nvcc-flag=-DFLASHBUILD_HOPPER_STAGES=8 --json $OUT/tile-64x128x8.json > $OUT/tile-64x128x8.txt 2>&1
for f in $OUT/tile-*.txt; do echo "== $f"; grep "^| 64" $f; grep -iE "error|Traceback" $f | head -3; done
