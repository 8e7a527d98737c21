#!/bin/bash
# .device/new: `git archive 1580436 | tar -x -C .device/new`; .device/old: `git archive a5ee53c kernels flashbuild templates configs pyproject.toml | tar -x -C .device/old`.
# One split-KV kernel for one split and several (1580436, .device/new) against two (a5ee53c, .device/old): the
# builds, then decode_bandwidth.py in turns, hdim 128 and 256, 4 rounds, the trees' order swapped every round
# (the first call, with the GPU tests: results/h200-1-first-call/).
export PYTHONUNBUFFERED=1 PYTHONDONTWRITEBYTECODE=1
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl 2>/dev/null
S=$(date +%s); at() { echo "at $(( $(date +%s) - S )) s"; }
ROOT=$PWD; mkdir -p /tmp/res
fb() { local t=$1 limit=$2; shift 2; (cd .device/$t && PYTHONPATH=/tmp/site:$PWD FLASHBUILD_CACHE_DIR=/tmp/c_$t timeout $limit python3 -m flashbuild "$@"); }
for t in old new; do
  fb $t 300 --hdim 64,128 --dtype fp16 --arch native --direction splitkv --causal both -j 8 > /tmp/res/build-$t.txt 2>&1 &
  fb $t 300 --hdim 256 --dtype fp16 --arch native --direction splitkv --causal both -j 4 > /tmp/res/build256-$t.txt 2>&1 &
done
wait; echo "builds $(at)"; grep -h "^compiled [0-9]* targets" /tmp/res/build*.txt
for r in 1 2 3 4; do for h in 128 256; do if [ $((r % 2)) = 1 ]; then order="old new"; else order="new old"; fi; for t in $order; do
  L=$(( 575 - ($(date +%s) - S) )); [ $L -lt 30 ] && { echo "skip $t h$h r$r"; continue; }
  (cd .device/$t && PYTHONPATH=/tmp/site:$PWD FLASHBUILD_CACHE_DIR=/tmp/c_$t timeout $L python3 $ROOT/.device/new/benchmarks/decode/decode_bandwidth.py \
    --hdim $h --batch 1,8,64 --cache 4096,65536 --json /tmp/res/decode-$t-h$h-$r.json > /tmp/res/decode-$t-h$h-$r.txt 2>&1)
  echo "decode $t h$h r$r rc $? $(at)"
done; done; done
tar -czf $OUT/res.tgz -C /tmp/res .
