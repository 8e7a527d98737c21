#!/bin/bash
# One H200 call: ab.py's arms built side by side (hdim 128, fp16 + bf16, causal both, no features), `flashbuild test
# --shapes full` of every arm but the base (side by side) and tests/gpu/test_fwd_wide_keys_gpu.py, then ab.py (the arms and SDPA's cuDNN in turns, one
# process) until BUDGET seconds from the start. Logs and results.tgz under $OUT, the table last.
# From the tree's root on the GPU host, PYTHONPATH and FLASHBUILD_CACHE_DIR set as the call sets them:
#   OUT=$OUT BUDGET=300 bash benchmarks/fwd_sass_fa3/run.sh [ab.py options]
if [ "$1" = -h ] || [ "$1" = --help ]; then sed -n 2,6p "$0" | cut -c3-; exit 0; fi
export PYTHONUNBUFFERED=1 PYTHONDONTWRITEBYTECODE=1
# The work folder starts empty: a second run in one call would otherwise list the first one's test logs as its own.
OUT=${OUT:-/tmp/fwd_sass_fa3_out}; W=/tmp/fwd_sass_fa3_work; rm -rf "$W"; mkdir -p "$OUT" "$W"; BUDGET=${BUDGET:-300}
t0=$(date +%s); at() { echo "at $(( $(date +%s) - t0 )) s"; }
nvidia-smi --query-gpu=name,driver_version,clocks.sm,temperature.gpu --format=csv,noheader | tee "$W/gpu.txt"
S="--arch sm90 --direction fwd --no-local --no-softcap"
python3 benchmarks/fwd_sass_fa3/ab.py --print-builds "$@" > "$W/builds.txt" || exit 1
n=$(wc -l < "$W/builds.txt"); jobs=$(( ($(nproc) + n - 1) / n ))
while read -r name args; do
  (timeout 200 python3 -m flashbuild build $args $S -j "$jobs" > "$W/build-$name.txt" 2>&1
   echo "== rc $?" >> "$W/build-$name.txt") &
done < "$W/builds.txt"
# The wide-keys GPU test (the 176-key kernel and the 128-key one a variant keeps) on the tree's defaults: its
# own build (fwd + split-KV) alongside.
(timeout 200 python3 -m pytest -q -rs -p no:cacheprovider tests/gpu/test_fwd_wide_keys_gpu.py > "$W/pytest-wide.txt" 2>&1
 echo "== rc $?" >> "$W/pytest-wide.txt") &
wide=$!
wait $(jobs -p | grep -vx "$wide"); echo "== builds $(at)"
for f in "$W"/build-*.txt; do echo "$(basename "$f" .txt): $(grep -E 'rror|^== rc' "$f" | head -3 | tr '\n' ' ')"; done
# (not a pipeline: `wait` waits only for this shell's own jobs)
while read -r name args; do
  (timeout 90 python3 -m flashbuild test $args $S --shapes full > "$W/test-$name.txt" 2>&1
   echo "== rc $?" >> "$W/test-$name.txt") &
done < <(tail -n +2 "$W/builds.txt")
wait; echo "== tests $(at)"
for f in "$W"/test-*.txt "$W"/pytest-*.txt; do echo "$(basename "$f" .txt): $(grep -E "passed|failed" "$f" | tail -1) $(tail -1 "$f")"; done
left=$(( BUDGET - ($(date +%s) - t0) - 10 )); [ "$left" -lt 15 ] && left=15
timeout $(( left + 40 )) python3 benchmarks/fwd_sass_fa3/ab.py --out "$W" --budget "$left" "$@" > "$W/ab.txt" 2>&1
echo "== ab rc $? $(at)"
tar -czf "$OUT/results.tgz" -C "$W" .
cp "$W/ab.txt" "$OUT/ab.txt"; cp "$W/ab.json" "$OUT/ab.json" 2>/dev/null
sed -n '/^variant /,$p' "$W/ab.txt"; tail -2 "$W/ab.txt"
