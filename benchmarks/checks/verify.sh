#!/bin/bash
# One device call that checks the tree on the H200: the cold main job (timed, its per-TU table), `flashbuild
# test --shapes full` of it, then the `tests/gpu` suite (less the deterministic backward's file, which
# benchmarks/bwd_deterministic/run.sh runs), the other selections it loads prebuilt side by side first. From the repository root: bash benchmarks/checks/verify.sh  (output under $OUT; BUDGET s)
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl 2>/dev/null
export PYTHONUNBUFFERED=1 PYTHONDONTWRITEBYTECODE=1 PYTHONPATH=/tmp/site:$PWD FLASHBUILD_CACHE_DIR=/tmp/verify_cache
OUT=${OUT:-/tmp/verify_out}; mkdir -p "$OUT"; BUDGET=${BUDGET:-570}
t0=$(date +%s); left() { echo $(( BUDGET - ($(date +%s) - t0) )); }
FB="python3 -m flashbuild"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; git log --oneline -1 2>/dev/null
timeout 200 $FB --hdim 64 --dtype fp16 --arch sm90 > "$OUT/main-job.txt" 2>&1
echo "== main job rc $? at $(( $(date +%s) - t0 )) s"; grep -E "^compiled|  binding|  link" "$OUT/main-job.txt"
load() { timeout 300 python3 -c "import flashbuild; flashbuild.load($1)" > /dev/null 2>&1; }
N='arch="native", dtype="fp16"'
load "hdim=64, $N, direction='fwd', causal='both', features=[]" &
load "hdim='64,128', $N, direction='splitkv', causal='both'" &
load "hdim=256, $N, direction='fwd', causal='off', features=[]" &
load "hdim=32, $N, direction='fwd', causal='off', features=[]" &
load "hdim=[32, 96], $N, direction='fwd', causal='off', features=[]" &
load "hdim=64, $N, direction='fwd', causal='on', features=[]" & load "hdim=256, $N, direction='fwd', causal='on', features=[]" &  # test_softmax_extremes_gpu
timeout 120 $FB test --hdim 64 --dtype fp16 --arch sm90 --shapes full > "$OUT/test-main.txt" 2>&1
echo "== test main rc $? at $(( $(date +%s) - t0 )) s"; grep -E "passed, [0-9]+ failed" "$OUT/test-main.txt" | tail -1
wait; echo "== prebuilt at $(( $(date +%s) - t0 )) s"
# The deterministic backward's tests build 68 TUs of their own: benchmarks/bwd_deterministic/run.sh runs them.
timeout $(( $(left) - 5 )) python3 -m pytest -q -rs -p no:cacheprovider tests/gpu \
  --ignore=tests/gpu/test_bwd_deterministic_gpu.py > "$OUT/pytest-gpu.txt" 2>&1
echo "== pytest tests/gpu rc $? at $(( $(date +%s) - t0 )) s"; tail -3 "$OUT/pytest-gpu.txt"
