#!/bin/bash
# Issue 19, the final tree: the thinnest rows of dq-first-3 again (hdim 128 and 256 from 4k), 30 reps.
export PYTHONUNBUFFERED=1 PYTHONDONTWRITEBYTECODE=1 FLASHBUILD_CACHE_DIR=/tmp/cache31
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl 2>/dev/null
export PYTHONPATH=/tmp/site:$PWD
S=$(date +%s); at() { echo "at $(( $(date +%s) - S )) s"; }
nvidia-smi --query-gpu=name,driver_version,clocks.sm --format=csv,noheader
SEL="--hdim 128,256 --dtype fp16,bf16 --arch sm90 --direction bwd --causal both --features none"
timeout 200 python3 -m flashbuild $SEL -j 16 > $OUT/build.txt 2>&1; echo "build rc $? $(at)"; grep -E "^compiled|rror" $OUT/build.txt | head -3
timeout -s INT -k 10 300 python3 -m flashbuild bench $SEL --seqlens 4096,16384 --reps 30 --json $OUT/bench.json > $OUT/bench.txt 2>&1
echo "bench rc $? $(at)"
python3 -m flashbuild bench --results $OUT/bench.json 2>&1 | grep -E "seqlen|hdim" | cut -c1-130
