#!/bin/bash
# Issue 46's causal forward study in one call on the H200: ab.py's builds of PLAN (study, the default, or
# confirm) side by side, and the GPU tests' own selections; correctness of the new build (`flashbuild test
# --shapes full` of its selection, the causal-pairs, persistent and softmax-extremes GPU tests); ab.py (every arm
# in turns in one process); with PLAN=study, ncu DRAM bytes of one hdim-128 16k call per pairs setting if time is
# left (BUDGET, s since the start, 250). Logs and results.tgz under $OUT, the short table last.
# From the tree's root on the GPU host, PYTHONPATH and FLASHBUILD_CACHE_DIR set as the call sets them:
#   OUT=$OUT [PLAN=confirm] bash benchmarks/fwd_causal_fa3/run.sh
if [ "$1" = -h ] || [ "$1" = --help ]; then sed -n 2,8p "$0" | cut -c3-; exit 0; fi
export PYTHONUNBUFFERED=1 PYTHONDONTWRITEBYTECODE=1
OUT=${OUT:-/tmp/fwd_causal_out}; W=/tmp/fwd_causal_work; mkdir -p "$OUT" "$W"; BUDGET=${BUDGET:-250}
t0=$(date +%s); at() { echo "at $(( $(date +%s) - t0 )) s"; }
nvidia-smi --query-gpu=name,driver_version,clocks.sm,temperature.gpu --format=csv,noheader | tee "$W/gpu.txt"
git rev-parse HEAD 2>/dev/null > "$W/commit.txt"
S="--arch sm90 --direction fwd --no-local --no-softcap"
N="--arch native --direction fwd --features none"
fb() { local limit=$1 log=$2; shift 2; timeout "$limit" python3 -m flashbuild "$@" > "$W/$log.txt" 2>&1; echo "== rc $?" >> "$W/$log.txt"; }
PLAN=${PLAN:-study}
python3 benchmarks/fwd_causal_fa3/ab.py --out "$W" --plan "$PLAN" --print-builds > "$W/builds.txt" || exit 1
while read -r name args; do fb 240 "build-$name" build $args $S -j 4 & done < "$W/builds.txt"
fb 240 build-t-pairs build --hdim 64,128,192,256 --dtype fp16 --causal both $N -j 2 &
for h in 64 128 256; do fb 240 build-t-ext$h build --hdim $h --dtype fp16 --causal on $N -j 1 & done
fb 240 build-t-pers build --hdim 256 --dtype fp16 --causal off $N -j 1 &
wait; echo "== builds $(at)"
for f in "$W"/build-*.txt; do echo "$(basename "$f" .txt): $(grep -E '^compiled|rror|^== rc' "$f" | head -3 | tr '\n' ' ')"; done
(timeout 150 python3 -m flashbuild test $(sed -n "s/^new //p" "$W/builds.txt") $S --shapes full \
  > "$W/test-new.txt" 2>&1; echo "== rc $?" >> "$W/test-new.txt") &
(timeout 150 python3 -m pytest -q -rs -p no:cacheprovider tests/gpu/test_fwd_causal_pairs_gpu.py \
  tests/gpu/test_persistent_fwd_gpu.py tests/gpu/test_softmax_extremes_gpu.py > "$W/pytest-new.txt" 2>&1
 echo "== rc $?" >> "$W/pytest-new.txt") &
wait; echo "== tests $(at)"
echo "test-new: $(grep -E 'passed, [0-9]+ failed' "$W/test-new.txt" | tail -1) $(tail -1 "$W/test-new.txt")"
echo "pytest-new: $(grep -E 'passed|failed' "$W/pytest-new.txt" | tail -1) $(tail -1 "$W/pytest-new.txt")"
left=$(( BUDGET - ($(date +%s) - t0) - 15 )); [ "$left" -lt 20 ] && left=20
timeout $(( left + 60 )) python3 benchmarks/fwd_causal_fa3/ab.py --out "$W" --plan "$PLAN" --budget "$left" "$@" > "$W/ab.txt" 2>&1
echo "== ab rc $? $(at)"
if [ "$PLAN" = study ] && command -v ncu > /dev/null && [ $(( $(date +%s) - t0 )) -lt $(( BUDGET + 20 )) ]; then
  for b in base new; do
    timeout 40 ncu --clock-control none -k regex:fwd_kernel --metrics \
      gpu__time_duration.sum,dram__bytes_read.sum,lts__t_sector_hit_rate.pct \
      python3 benchmarks/fwd_causal_fa3/one_call.py --build $b --settings short,all:2 > "$W/ncu-$b.txt" 2>&1
    echo "== ncu $b rc $? $(at)"; done
fi
tar -czf "$OUT/results.tgz" -C "$W" .
cp "$W/ab.txt" "$OUT/ab.txt"; cp "$W/ab.json" "$OUT/ab.json" 2>/dev/null
grep -hE "^\s+(gpu__time|dram__bytes|lts__t_sector_hit)|pairs .*called|fwd_kernel" "$W"/ncu-*.txt 2>/dev/null | cut -c1-110 | head -30
sed -n '/^variant /,$p' "$W/ab.txt"; tail -3 "$W/ab.txt"
