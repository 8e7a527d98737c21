#!/bin/bash
# The Hopper forward with the softmax of each key block under its own warpgroup's P V (kOverlapSoftmax,
# kernels/hopper/fwd_traits.h) against the tree before it, on the H200, in one call: builds side by side,
# correctness of the new tree, then `flashbuild bench` of the trees in turns (cuDNN beside in every run).
# From the repository root on the GPU machine, carrying .device/w46f-base (the tree before the change):
#   git archive <base commit> kernels flashbuild templates configs pyproject.toml | tar -x -C .device/w46f-base
#   bash benchmarks/fwd_softmax_overlap/ab.sh       # output under $OUT; the rows last
# Trees: base (.device/w46f-base), new (this tree), hints (this tree with -DFLASHBUILD_HOPPER_FWD_L2_HINTS=1:
# K/V loads EVICT_LAST, Q EVICT_FIRST; fp16 only). BUDGET (s, default 440): no bench round starts past it.
if [ "$1" = -h ] || [ "$1" = --help ]; then sed -n 2,9p "$0" | cut -c3-; exit 0; fi
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl 2>/dev/null
export PYTHONUNBUFFERED=1 PYTHONDONTWRITEBYTECODE=1
OUT=${OUT:-/tmp/overlap_out}; mkdir -p "$OUT"; BUDGET=${BUDGET:-440}; REPS=${REPS:-25}
t0=$(date +%s); at() { echo "at $(( $(date +%s) - t0 )) s"; }
BASE=${BASE:-.device/w46f-base}
S="--hdim 128,256 --dtype fp16,bf16 --arch sm90 --direction fwd --causal both --no-local --no-softcap"
S16="--hdim 128,256 --dtype fp16 --arch sm90 --direction fwd --causal both --no-local --no-softcap"
HINTS="--nvcc-flag=-DFLASHBUILD_HOPPER_FWD_L2_HINTS=1"
fb_new() { local limit=$1; shift; PYTHONPATH=/tmp/site:$PWD FLASHBUILD_CACHE_DIR=/tmp/fbc_new timeout "$limit" python3 -m flashbuild "$@"; }
fb_hints() { local limit=$1; shift; PYTHONPATH=/tmp/site:$PWD FLASHBUILD_CACHE_DIR=/tmp/fbc_hints timeout "$limit" python3 -m flashbuild "$@"; }
fb_base() { local limit=$1; shift; (cd "$BASE" && PYTHONPATH=/tmp/site:$PWD FLASHBUILD_CACHE_DIR=/tmp/fbc_base \
  timeout "$limit" python3 -m flashbuild "$@"); }
nvidia-smi --query-gpu=name,driver_version,clocks.sm,temperature.gpu --format=csv,noheader | tee "$OUT/gpu.txt"
fb_new 240 $S -j 8 > "$OUT/build-new.txt" 2>&1 &
fb_base 240 $S -j 5 > "$OUT/build-base.txt" 2>&1 &
fb_hints 240 $S16 $HINTS -j 3 > "$OUT/build-hints.txt" 2>&1 &
wait; echo "== builds $(at)"; for v in new base hints; do echo "$v: $(grep -E '^compiled|rror' "$OUT/build-$v.txt" | head -2)"; done
# Correctness of the new tree: every built variant on the full shapes; the masked-first-blocks rows (hdim 128 and
# 256: the rescale moved) and the persistent hdim-256 kernel; hdim 128 causal with local+softcap compiled in.
(fb_new 150 test $S --shapes full > "$OUT/test-new.txt" 2>&1; echo "== rc $?" >> "$OUT/test-new.txt") &
(PYTHONPATH=/tmp/site:$PWD FLASHBUILD_CACHE_DIR=/tmp/fbc_new timeout 200 python3 -m pytest -q -rs -p no:cacheprovider \
  tests/gpu/test_softmax_extremes_gpu.py tests/gpu/test_persistent_fwd_gpu.py > "$OUT/pytest-new.txt" 2>&1
 echo "== rc $?" >> "$OUT/pytest-new.txt") &
(fb_new 200 test --hdim 128 --dtype fp16 --arch sm90 --direction fwd --causal on --shapes quick > "$OUT/test-new-features.txt" 2>&1
 echo "== rc $?" >> "$OUT/test-new-features.txt") &
(fb_hints 100 test $S16 $HINTS --shapes quick > "$OUT/test-hints.txt" 2>&1; echo "== rc $?" >> "$OUT/test-hints.txt") &
wait; echo "== tests $(at)"
for f in test-new test-new-features test-hints; do echo "$f: $(grep -E 'passed, [0-9]+ failed' "$OUT/$f.txt" | tail -1) $(tail -1 "$OUT/$f.txt")"; done
echo "pytest-new: $(grep -E 'passed|failed' "$OUT/pytest-new.txt" | tail -1) $(tail -1 "$OUT/pytest-new.txt")"
for r in 1 2 3; do
  [ $(( $(date +%s) - t0 )) -gt "$BUDGET" ] && { echo "== budget: round $r not started"; break; }
  for v in base new hints; do
    if [ "$v" = hints ]; then sel="$S16 $HINTS"; else sel="$S"; fi
    fb_$v 100 bench $sel --seqlens 1024,4096,16384 --reps "$REPS" --json "$OUT/bench-$v-$r.json" > "$OUT/bench-$v-$r.txt" 2>&1
    echo "== bench $v r$r rc $? $(at)"; done; done
python3 benchmarks/fwd_softmax_overlap/rows.py "$OUT" base new hints | tee "$OUT/rows.txt"
