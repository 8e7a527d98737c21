#!/bin/bash
# Issue 19, the final tree (dQ first at hdim 96/128): the backward headline at every Hopper head dim beside SDPA,
# then the packed-call and deterministic GPU tests.
export PYTHONUNBUFFERED=1 PYTHONDONTWRITEBYTECODE=1 FLASHBUILD_CACHE_DIR=/tmp/cache27
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl 2>/dev/null
export PYTHONPATH=/tmp/site:$PWD
S=$(date +%s); at() { echo "at $(( $(date +%s) - S )) s"; }
nvidia-smi --query-gpu=name,driver_version,clocks.sm --format=csv,noheader
SEL="--hdim 64,96,128,192,256 --dtype fp16,bf16 --arch sm90 --direction bwd --causal both --features none"
timeout 200 python3 -m flashbuild $SEL -j 16 > $OUT/build.txt 2>&1; echo "build rc $? $(at)"; grep -E "^compiled|rror" $OUT/build.txt | head -3
timeout -s INT -k 10 200 python3 -m flashbuild bench $SEL --seqlens 1024,4096,16384 --reps 15 --json $OUT/bench.json > $OUT/bench.txt 2>&1
echo "bench rc $? $(at)"
for t in test_hopper_varlen_bwd_gpu test_bwd_deterministic_gpu; do
  L=$(( 585 - ($(date +%s) - S) )); [ $L -lt 30 ] && { echo "skip $t"; continue; }
  timeout $L python3 -m pytest -q -p no:cacheprovider tests/gpu/$t.py > $OUT/$t.txt 2>&1
  echo "$t rc $? $(at): $(tail -1 $OUT/$t.txt)"
done
python3 -m flashbuild bench --results $OUT/bench.json 2>&1 | grep -E "seqlen|hdim(64|192|256).*(4096|16384)" | cut -c1-130
