#!/bin/bash
# The same machine right after call24.sh: the head tree four times in a row (decode_bandwidth.py, call time).
cd .device/head && for r in 1 2 3 4; do PYTHONPATH=/tmp/site:$PWD FLASHBUILD_CACHE_DIR=/tmp/cache24_head timeout 100 python3 benchmarks/decode/decode_bandwidth.py --hdim 128 --batch 1,8 --cache 4096 > $OUT/same-$r.txt 2>&1; echo "== head run $r: $(grep "^| [0-9]" $OUT/same-$r.txt | awk -F"|" "{printf \"%s \", \$4}") ; $(nvidia-smi --query-gpu=clocks.sm,power.draw,pstate --format=csv,noheader)"; done
