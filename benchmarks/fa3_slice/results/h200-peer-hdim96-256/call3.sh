#!/bin/bash
# The packed-rows binding fix on the GPU, then FA3's slice beside ours at hdim 96/192/256 (fp16).
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl 2>/dev/null
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
t0=$(date +%s)
FLASHBUILD_CACHE_DIR=/tmp/c_packed timeout 200 python3 -m pytest -q -rs -p no:cacheprovider tests/gpu/test_fwd_packed_rows_gpu.py > /tmp/packed.txt 2>&1
echo "== packed rows tests rc $? at $(( $(date +%s) - t0 )) s"; grep -E "passed|failed|FAILED|Error" /tmp/packed.txt | tail -8
OUT=$OUT BUDGET=$(( 560 - ($(date +%s) - t0) )) HDIMS=96,192,256 DTYPES=fp16 bash benchmarks/fa3_slice/peer.sh
cp /tmp/packed.txt $OUT/pytest-packed.txt
