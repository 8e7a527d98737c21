#!/bin/bash
# Issue 19: the Hopper backward with dQ first at hdim 96/128 (bwd_tile's dq_first), through flashbuild: build
# (features compiled in), `flashbuild test --shapes full`, the packed-call GPU test, then the bench beside SDPA.
export PYTHONUNBUFFERED=1 PYTHONDONTWRITEBYTECODE=1 FLASHBUILD_CACHE_DIR=/tmp/cache26
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl 2>/dev/null
export PYTHONPATH=/tmp/site:$PWD
S=$(date +%s); at() { echo "at $(( $(date +%s) - S )) s"; }
nvidia-smi --query-gpu=name,driver_version,clocks.sm --format=csv,noheader
SEL="--hdim 96,128 --dtype fp16,bf16 --arch sm90 --direction bwd --causal both"
timeout 220 python3 -m flashbuild $SEL -j 16 > $OUT/build.txt 2>&1; echo "build rc $? $(at)"; grep -E "^compiled|rror" $OUT/build.txt | head -3
timeout 150 python3 -m flashbuild test $SEL --shapes full > $OUT/test.txt 2>&1; echo "test rc $? $(at): $(tail -1 $OUT/test.txt)"
L=$(( 585 - ($(date +%s) - S) ))
timeout -s INT -k 10 $L python3 -m flashbuild bench $SEL --seqlens 1024,4096,16384 --reps 15 --json $OUT/bench.json > $OUT/bench.txt 2>&1
echo "bench rc $? $(at)"
grep -vE "^(measuring|using build|nothing to compile|not measured)" $OUT/bench.txt | tail -30
