#!/bin/bash
# .device/head: `git archive 14f1ef5` + benchmarks/decode/splits_sweep.py. The split count of small decode calls.
cd .device/head
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1 FLASHBUILD_CACHE_DIR=/tmp/cache20
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site ../../.whl/*.whl 2>/dev/null
timeout 400 python3 benchmarks/decode/splits_sweep.py --hdim 128,64 --batch 1,8 --cache 4096,16384 > $OUT/splits-sweep.txt 2>&1
echo "rc $?"; grep -v "^\[" $OUT/splits-sweep.txt | grep -v Warning | tail -14
