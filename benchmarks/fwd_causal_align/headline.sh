#!/bin/bash
# The Hopper forward of every head dim it serves, both dtypes, causal or not, one device call: build,
# `flashbuild test --shapes full`, `flashbuild bench` beside SDPA's flash and cuDNN backends (16k tokens,
# model dim 2048), the ours / cuDNN table, then tests/gpu/test_features_gpu.py (the causal local and
# softcap kernels) if time is left. From the repository root, after the wheels are installed:
#   OUT=... BUDGET=570 [HDIMS=32,64,96,128,192,256] bash benchmarks/fwd_causal_align/headline.sh
set -o pipefail
export PYTHONUNBUFFERED=1 PYTHONPATH=${PYTHONPATH:+$PYTHONPATH:}$PWD PYTHONDONTWRITEBYTECODE=1
OUT=${OUT:-/tmp/fwd_headline}; mkdir -p "$OUT"
export FLASHBUILD_CACHE_DIR=/tmp/fb-headline
t0=$(date +%s); now() { echo $(( $(date +%s) - t0 )); }
S="--hdim ${HDIMS:-64,96,128,192,256} --dtype fp16,bf16 --arch sm90 --direction fwd --causal both --no-local --no-softcap"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$OUT/gpu.txt"
timeout 300 python3 -m flashbuild $S -j 16 > "$OUT/build.txt" 2>&1
echo "== build rc $? at $(now) s"; grep -E "^compiled|rror" "$OUT/build.txt" | head -3
timeout 150 python3 -m flashbuild test $S --shapes full > "$OUT/test.txt" 2>&1
echo "== test rc $? at $(now) s"; grep -E "FAIL" "$OUT/test.txt" | head -5; tail -1 "$OUT/test.txt"
timeout ${BENCH_LIMIT:-200} python3 -m flashbuild bench $S --seqlens 1024,4096,8192,16384 --reps 30 \
  --json "$OUT/h200-fwd-headline.bench.json" > "$OUT/bench.txt" 2>&1
echo "== bench rc $? at $(now) s"
python3 benchmarks/vs_fa2/summary.py --cudnn "$OUT/h200-fwd-headline.bench.json" > "$OUT/summary.txt"
left=$(( ${BUDGET:-570} - $(now) - 10 ))
if [ "$left" -gt 60 ]; then
  timeout "$left" python3 -m pytest -q -rs -p no:cacheprovider tests/gpu/test_features_gpu.py > "$OUT/pytest-features.txt" 2>&1
  echo "== pytest features rc $? at $(now) s"; grep -E "^FAILED|^ERROR" "$OUT/pytest-features.txt" | head; tail -1 "$OUT/pytest-features.txt"
fi
awk -F'|' 'NR > 2 { printf "%s %s %s %s %s: %s\n", $2, $3, $4, $5, $6, $11 }' "$OUT/summary.txt" | \
  awk '{ k = $1" "$2" "$3" "$4; v[k] = v[k] " " $7 } END { for (k in v) print k ":" v[k] }' | sort -k3,3n -k2,2 -k4,4
