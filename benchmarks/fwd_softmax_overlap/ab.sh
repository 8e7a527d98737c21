#!/bin/bash
# The Hopper forward with the softmax of each key block under its own warpgroup's P V (kOverlapSoftmax,
# kernels/hopper/fwd_traits.h) against the tree before it, on the H200, in one call: builds side by side,
# correctness of the new tree, then `flashbuild bench` of the trees in turns (cuDNN beside in every run).
# From the repository root on the GPU machine, carrying .device/w46f-base (the tree before the change):
#   git archive <base commit> kernels flashbuild templates configs pyproject.toml | tar -x -C .device/w46f-base
#   bash benchmarks/fwd_softmax_overlap/ab.sh       # rows.txt and results.tgz (every log and run) under $OUT
# SEL: the selection (default hdim 128,256, fp16+bf16, causal both, no features); HINTS=1 adds a third tree,
# this one built with -DFLASHBUILD_HOPPER_FWD_L2_HINTS=1 (K/V loads EVICT_LAST, Q EVICT_FIRST: the define
# exists at 7606248 only); TESTS=0 skips the GPU tests, TESTS=sel runs `flashbuild test` of SEL alone;
# BUDGET (s, 440): no bench round starts past it.
if [ "$1" = -h ] || [ "$1" = --help ]; then sed -n 2,11p "$0" | cut -c3-; exit 0; fi
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl 2>/dev/null
export PYTHONUNBUFFERED=1 PYTHONDONTWRITEBYTECODE=1
OUT=${OUT:-/tmp/overlap_out}; W=/tmp/overlap_work; mkdir -p "$OUT" "$W"; BUDGET=${BUDGET:-440}; REPS=${REPS:-25}
t0=$(date +%s); at() { echo "at $(( $(date +%s) - t0 )) s"; }
BASE=${BASE:-.device/w46f-base}
S=${SEL:-"--hdim 128,256 --dtype fp16,bf16 --arch sm90 --direction fwd --causal both --no-local --no-softcap"}
S16="--hdim 128,256 --dtype fp16 --arch sm90 --direction fwd --causal both --no-local --no-softcap"
H="--nvcc-flag=-DFLASHBUILD_HOPPER_FWD_L2_HINTS=1"
trees="base new"; [ "${HINTS:-0}" = 1 ] && trees="base new hints"
fb_new() { local limit=$1; shift; PYTHONPATH=/tmp/site:$PWD FLASHBUILD_CACHE_DIR=/tmp/fbc_new timeout "$limit" python3 -m flashbuild "$@"; }
fb_hints() { local limit=$1; shift; PYTHONPATH=/tmp/site:$PWD FLASHBUILD_CACHE_DIR=/tmp/fbc_hints timeout "$limit" python3 -m flashbuild "$@"; }
fb_base() { local limit=$1; shift; (cd "$BASE" && PYTHONPATH=/tmp/site:$PWD FLASHBUILD_CACHE_DIR=/tmp/fbc_base \
  timeout "$limit" python3 -m flashbuild "$@"); }
sel() { if [ "$1" = hints ]; then echo "$S16 $H"; else echo "$S"; fi; }
nvidia-smi --query-gpu=name,driver_version,clocks.sm,temperature.gpu --format=csv,noheader | tee "$W/gpu.txt"
for v in $trees; do fb_$v 240 $(sel $v) -j 6 > "$W/build-$v.txt" 2>&1 & done
wait; echo "== builds $(at)"; for v in $trees; do echo "$v: $(grep -E '^compiled|rror' "$W/build-$v.txt" | head -2)"; done
if [ "${TESTS:-1}" = sel ]; then
  fb_new 150 test $S --shapes full > "$W/test-new.txt" 2>&1; echo "== test new rc $? $(at)"
  grep -E "passed, [0-9]+ failed" "$W/test-new.txt" | tail -1
elif [ "${TESTS:-1}" = 1 ]; then
  # The new tree: every built variant on the full shapes; the masked-first-blocks rows (hdim 128 and 256) and the
  # persistent hdim-256 kernel; hdim 128 causal with local+softcap compiled in.
  (fb_new 150 test $S --shapes full > "$W/test-new.txt" 2>&1; echo "== rc $?" >> "$W/test-new.txt") &
  (PYTHONPATH=/tmp/site:$PWD FLASHBUILD_CACHE_DIR=/tmp/fbc_new timeout 200 python3 -m pytest -q -rs -p no:cacheprovider \
    tests/gpu/test_softmax_extremes_gpu.py tests/gpu/test_persistent_fwd_gpu.py > "$W/pytest-new.txt" 2>&1
   echo "== rc $?" >> "$W/pytest-new.txt") &
  (fb_new 200 test --hdim 128 --dtype fp16 --arch sm90 --direction fwd --causal on --shapes quick > "$W/test-new-features.txt" 2>&1
   echo "== rc $?" >> "$W/test-new-features.txt") &
  [ "${HINTS:-0}" = 1 ] && (fb_hints 100 test $S16 $H --shapes quick > "$W/test-hints.txt" 2>&1; echo "== rc $?" >> "$W/test-hints.txt") &
  wait; echo "== tests $(at)"
  for f in test-new test-new-features test-hints; do [ -f "$W/$f.txt" ] && echo "$f: $(grep -E 'passed, [0-9]+ failed' "$W/$f.txt" | tail -1) $(tail -1 "$W/$f.txt")"; done
  echo "pytest-new: $(grep -E 'passed|failed' "$W/pytest-new.txt" | tail -1) $(tail -1 "$W/pytest-new.txt")"
fi
for r in 1 2 3; do
  [ $(( $(date +%s) - t0 )) -gt "$BUDGET" ] && { echo "== budget: round $r not started"; break; }
  for v in $trees; do
    fb_$v 100 bench $(sel $v) --seqlens 1024,4096,16384 --reps "$REPS" --json "$W/bench-$v-$r.json" > "$W/bench-$v-$r.txt" 2>&1
    echo "== bench $v r$r rc $? $(at)"; done; done
python3 benchmarks/fwd_softmax_overlap/rows.py "$W" $trees | tee "$OUT/rows.txt"
tar -czf "$OUT/results.tgz" -C "$W" .   # the run tool brings back a few files only
