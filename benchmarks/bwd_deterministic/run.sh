#!/bin/bash
# The deterministic backward's cost, in one device call on the nvidia-h200 (or an H100) machine, from the
# repository root:
#   bash benchmarks/bwd_deterministic/run.sh
# Builds hdim 64 and 128, fp16 and bf16, for this GPU, forward and backward, causal both, local and softcap
# compiled in (the feature kernel holds the mode), runs tests/gpu/test_bwd_deterministic_gpu.py, then
# bench.py: the backward with and without deterministic=True at 16k tokens, fp16, seqlen 1k-16k, CUDA events
# after warm-up, the calls of a row in turns. (Until 35a531f this also
# built the selection with the mode compiled out, for --ab; results/h100-1/ was made so.)
# Logs and JSON under $OUT; the table last.
set -o pipefail
export PYTHONUNBUFFERED=1 PYTHONPATH=${PYTHONPATH:+$PYTHONPATH:}$PWD PYTHONDONTWRITEBYTECODE=1
OUT=${OUT:-/tmp/bwd_deterministic}; mkdir -p "$OUT"
export FLASHBUILD_CACHE_DIR=/tmp/fb-det-cache
t0=$(date +%s); now() { echo $(( $(date +%s) - t0 )); }
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,temperature.gpu,power.draw --format=csv | tee "$OUT/gpu.txt"
git log -1 --format='commit %H' 2>/dev/null | tee "$OUT/commit.txt"
# The GPU tests' selections (tests/gpu/test_bwd_deterministic_gpu.py: hdim 64/128, fp16/bf16, fwd+bwd, causal
# both, local+softcap; its build without features; test_api_gpu.py's hdim-64 build), built side by side; the
# bench times the first.
load() { timeout 400 python3 -c "import flashbuild; flashbuild.load($1)" > "$OUT/build-$2.txt" 2>&1; echo "== build $2 rc $? at $(now) s"; }
load "hdim='64,128', dtype='fp16,bf16', arch='native', direction='fwd,bwd', causal='both', features=['local', 'softcap']" det &
load "hdim=64, dtype='fp16', arch='native', direction='fwd,bwd', causal='off', features=[]" plain &
(cd tests/gpu && timeout 400 python3 -c "import flashbuild, test_api_gpu; flashbuild.load(**test_api_gpu.SELECTION)" \
  > "$OUT/build-api.txt" 2>&1; echo "== build api rc $? at $(now) s") &
wait
timeout 240 python3 -m pytest -q -rs -p no:cacheprovider tests/gpu/test_bwd_deterministic_gpu.py > "$OUT/pytest-det.txt" 2>&1
echo "== tests rc $? at $(now) s"; tail -2 "$OUT/pytest-det.txt"
left=$(( ${BUDGET:-570} - $(now) ))
timeout -s INT $left python3 benchmarks/bwd_deterministic/bench.py --hdims 64,128 --causal both \
  --seqlens 1024,2048,4096,8192,16384 --reps 20 --json "$OUT/bench.json" > "$OUT/bench.txt" 2>&1
echo "== bench rc $? at $(now) s"
cat "$OUT/bench.txt"
