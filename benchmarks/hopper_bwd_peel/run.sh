#!/bin/bash
# Issue 46's causal backward peel in one call on the H200: ab.py's builds (base: PEEL=0, new: the default,
# peel2: PEEL=2) and a softcap selection side by side; correctness of the new build (`flashbuild test --shapes
# full` of its selections, causal softcap on the quick shapes, the packed-sequence GPU tests); then ab.py
# (base/new equivalence in deterministic mode, every row in turns). Logs and results.tgz under $OUT, table last.
# From the tree's root on the GPU host, PYTHONPATH and FLASHBUILD_CACHE_DIR set as the call sets them:
#   OUT=$OUT [BUDGET=170] bash benchmarks/hopper_bwd_peel/run.sh
if [ "$1" = -h ] || [ "$1" = --help ]; then sed -n 2,7p "$0" | cut -c3-; exit 0; fi
export PYTHONUNBUFFERED=1 PYTHONDONTWRITEBYTECODE=1
OUT=${OUT:-/tmp/bwd_peel_out}; W=/tmp/bwd_peel_work; mkdir -p "$OUT" "$W"; BUDGET=${BUDGET:-170}
t0=$(date +%s); at() { echo "at $(( $(date +%s) - t0 )) s"; }
nvidia-smi --query-gpu=name,driver_version,clocks.sm,temperature.gpu --format=csv,noheader | tee "$W/gpu.txt"
S="--arch sm90 --direction bwd --no-local --no-softcap"
SC="--hdim 96,256 --dtype fp16 --causal on --arch sm90 --direction bwd --no-local"  # causal + causal_softcap
fb() {
  local limit=$1 log=$2; shift 2
  timeout "$limit" python3 -m flashbuild "$@" > "$W/$log.txt" 2>&1; echo "== rc $?" >> "$W/$log.txt"
}
python3 benchmarks/hopper_bwd_peel/ab.py --print-builds > "$W/builds.txt" || exit 1
while read -r name args; do fb 240 "build-$name" build $args $S -j 3 & done < "$W/builds.txt"
fb 240 build-softcap build $SC -j 3 &
wait; echo "== builds $(at)"
for f in "$W"/build-*.txt; do
  echo "$(basename "$f" .txt): $(grep -E '^compiled|rror|^== rc' "$f" | head -3 | tr '\n' ' ')"
done
(fb 90 test-new0 test $(sed -n "s/^new0 //p" "$W/builds.txt") $S --shapes full
 fb 60 test-new1 test $(sed -n "s/^new1 //p" "$W/builds.txt") $S --shapes full) &
fb 90 test-softcap test $SC --shapes quick &
(timeout 90 python3 -m pytest -q -rs -p no:cacheprovider tests/gpu/test_hopper_varlen_bwd_gpu.py \
  > "$W/pytest-varlen.txt" 2>&1; echo "== rc $?" >> "$W/pytest-varlen.txt") &
wait; echo "== tests $(at)"
for f in test-new0 test-new1 test-softcap; do
  echo "$f: $(grep -E 'passed, [0-9]+ failed' "$W/$f.txt" | tail -1) $(tail -1 "$W/$f.txt")"
done
echo "pytest-varlen: $(grep -E 'passed|failed' "$W/pytest-varlen.txt" | tail -1) $(tail -1 "$W/pytest-varlen.txt")"
left=$(( BUDGET - ($(date +%s) - t0) - 10 )); [ "$left" -lt 20 ] && left=20
timeout $(( left + 40 )) python3 benchmarks/hopper_bwd_peel/ab.py --out "$W" --budget "$left" "$@" > "$W/ab.txt" 2>&1
echo "== ab rc $? $(at)"
tar -czf "$OUT/results.tgz" -C "$W" .
cp "$W/ab.txt" "$OUT/ab.txt"; cp "$W/ab.json" "$OUT/ab.json" 2>/dev/null
grep -E "^equivalence|CHECK FAILED" "$W/ab.txt"
sed -n '/^variant /,$p' "$W/ab.txt"
