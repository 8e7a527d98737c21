#!/bin/bash
# The study's one GPU call: one build of the hdim-128 forward and split-KV (fp16 and bf16, causal both, no features:
# the non-causal forwards hold the 176-key kernel and the 128-key one; cache calls need the split-KV variant
# beside the forward, kernels/binding/flash_api.cpp), then on it, side by side, `flashbuild test
# --shapes full`, tests/gpu/test_fwd_wide_keys_gpu.py (both kernels, paged, packed, cache rows of NaN) and the
# hdim-128 cases of test_hopper_varlen_gpu.py and test_kvcache_prefill_gpu.py (narrow_plugin.py: on this build),
# then ab.py alone on the GPU (the two kernels in turns). Logs and ab.json under $OUT; a short summary last.
# From the tree's root on the GPU host (PYTHONPATH and FLASHBUILD_CACHE_DIR as the call sets them):
#   OUT=$OUT bash benchmarks/fwd_tile_hdim128_176/run.sh
# BUDGET (s after the build, 80): ab.py starts no row past it.
if [ "$1" = -h ] || [ "$1" = --help ]; then sed -n 2,9p "$0" | cut -c3-; exit 0; fi
export PYTHONUNBUFFERED=1 PYTHONDONTWRITEBYTECODE=1
OUT=${OUT:-/tmp/wide_keys_out}; mkdir -p "$OUT"; BUDGET=${BUDGET:-80}
D=benchmarks/fwd_tile_hdim128_176
t0=$(date +%s); at() { echo "at $(( $(date +%s) - t0 )) s"; }
SEL="--hdim 128 --dtype fp16,bf16 --arch sm90 --direction fwd,splitkv --causal both --features none"
export NARROW_HDIM=128 NARROW_SELECTION='{"hdim": 128, "dtype": "fp16,bf16", "arch": "sm90", "direction": "fwd,splitkv", "causal": "both", "features": []}'
nvidia-smi --query-gpu=name,driver_version,clocks.sm,temperature.gpu --format=csv,noheader | tee "$OUT/gpu.txt"
timeout 170 python3 -m flashbuild build $SEL --jobs 16 > "$OUT/build.txt" 2>&1; echo "== build rc $? $(at)"
grep -E "^compiled|rror" "$OUT/build.txt" | head -3
(timeout 130 python3 -m flashbuild test $SEL --shapes full > "$OUT/test-full.txt" 2>&1; echo "== rc $?" >> "$OUT/test-full.txt") &
(timeout 130 python3 -m pytest -q -rs -p no:cacheprovider tests/gpu/test_fwd_wide_keys_gpu.py > "$OUT/pytest-wide.txt" 2>&1
 echo "== rc $?" >> "$OUT/pytest-wide.txt") &
(PYTHONPATH=$D:$PYTHONPATH timeout 130 python3 -m pytest -q -rs -p no:cacheprovider -p narrow_plugin \
   tests/gpu/test_hopper_varlen_gpu.py tests/gpu/test_kvcache_prefill_gpu.py > "$OUT/pytest-narrow.txt" 2>&1
 echo "== rc $?" >> "$OUT/pytest-narrow.txt") &
wait; echo "== tests $(at)"
timeout 150 python3 $D/ab.py --out "$OUT" --budget "$BUDGET" > "$OUT/ab.txt" 2>&1; echo "== ab rc $? $(at)"
for f in test-full pytest-wide pytest-narrow; do
  echo "$f: $(grep -E '[0-9]+ (passed|failed)' "$OUT/$f.txt" | tail -1) $(tail -1 "$OUT/$f.txt")"; done
grep -E "FAIL|Error" "$OUT/test-full.txt" "$OUT/pytest-wide.txt" "$OUT/pytest-narrow.txt" | head -20
tail -22 "$OUT/ab.txt"
