#!/bin/bash
# The deterministic backward's cost, in one device call on the nvidia-h200 (or an H100) machine, from the
# repository root:
#   bash benchmarks/bwd_deterministic/run.sh
# Builds hdim 64 and 128, fp16, sm90, forward and backward, causal both, local and softcap compiled in (the
# feature kernel holds the mode), then bench.py: the backward with and without deterministic=True at 16k
# tokens, seqlen 1k-16k, CUDA events after warm-up, the calls of a row in turns. (Until 35a531f this also
# built the selection with the mode compiled out, for --ab; results/h100-1/ was made so.)
# Logs and JSON under $OUT; the table last.
set -o pipefail
export PYTHONUNBUFFERED=1 PYTHONPATH=${PYTHONPATH:+$PYTHONPATH:}$PWD PYTHONDONTWRITEBYTECODE=1
OUT=${OUT:-/tmp/bwd_deterministic}; mkdir -p "$OUT"
export FLASHBUILD_CACHE_DIR=/tmp/fb-det-cache
t0=$(date +%s); now() { echo $(( $(date +%s) - t0 )); }
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,temperature.gpu,power.draw --format=csv | tee "$OUT/gpu.txt"
git log -1 --format='commit %H' 2>/dev/null | tee "$OUT/commit.txt"
SEL=(--hdim 64,128 --dtype fp16 --arch sm90 --direction fwd,bwd --causal both --features local,softcap --jobs 16)
timeout 360 python3 -m flashbuild build "${SEL[@]}" > "$OUT/build.txt" 2>&1
echo "== build done at $(now) s"; grep -hE "^compiled|error" "$OUT/build.txt" | head -3
left=$(( ${BUDGET:-570} - $(now) ))
timeout -s INT $left python3 benchmarks/bwd_deterministic/bench.py --hdims 64,128 --arch sm90 --causal both \
  --seqlens 1024,2048,4096,8192,16384 --reps 20 --json "$OUT/bench.json" > "$OUT/bench.txt" 2>&1
echo "== bench rc $? at $(now) s"
cat "$OUT/bench.txt"
