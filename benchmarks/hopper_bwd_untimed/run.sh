#!/bin/bash
# ab.py's arms against the tree's defaults at one head dim (HDIMS, ARMS: ab.py --help), one call on the H200: the
# builds side by side, `flashbuild test --shapes full` of each arm's build, then ab.py (bitwise checks against base in
# deterministic mode, the rows in turns with SDPA cuDNN). Logs and results.tgz under $OUT, the table last. From the
# tree's root on the GPU host, PYTHONPATH and FLASHBUILD_CACHE_DIR set as the call sets them:
#   OUT=$OUT [BUDGET=220] HDIMS=96 ARMS=base,halves bash benchmarks/hopper_bwd_untimed/run.sh [ab.py options]
if [ "$1" = -h ] || [ "$1" = --help ]; then sed -n 2,6p "$0" | cut -c3-; exit 0; fi
export PYTHONUNBUFFERED=1 PYTHONDONTWRITEBYTECODE=1
OUT=${OUT:-/tmp/hopper_bwd_untimed_out}; W=/tmp/hopper_bwd_untimed_work; rm -rf "$W"; mkdir -p "$OUT" "$W"; BUDGET=${BUDGET:-220}
t0=$(date +%s); at() { echo "at $(( $(date +%s) - t0 )) s"; }
nvidia-smi --query-gpu=name,driver_version,clocks.sm,temperature.gpu --format=csv,noheader | tee "$W/gpu.txt"
S="--arch sm90 --direction bwd --no-local --no-softcap"
fb() {
  local limit=$1 log=$2; shift 2
  timeout "$limit" python3 -m flashbuild "$@" > "$W/$log.txt" 2>&1; echo "== rc $?" >> "$W/$log.txt"
}
python3 benchmarks/hopper_bwd_untimed/ab.py --print-builds > "$W/builds.txt" || exit 1
while read -r name args; do fb 200 "build-$name" build $args $S -j 8 & done < "$W/builds.txt"
wait; echo "== builds $(at)"
for f in "$W"/build-*.txt; do
  echo "$(basename "$f" .txt): $(grep -E '^compiled|rror|^== rc' "$f" | head -3 | tr '\n' ' ')"
done
while read -r name args; do
  case $name in base*) continue ;; esac
  fb 100 "test-$name" test $args $S --shapes full
  echo "test-$name: $(grep -E 'passed, [0-9]+ failed' "$W/test-$name.txt" | tail -1) $(tail -1 "$W/test-$name.txt")"
done < "$W/builds.txt"
echo "== tests $(at)"
left=$(( BUDGET - ($(date +%s) - t0) - 30 )); [ "$left" -lt 20 ] && left=20
timeout $(( left + 60 )) python3 benchmarks/hopper_bwd_untimed/ab.py --out "$W" --budget "$left" "$@" > "$W/ab.txt" 2>&1
echo "== ab rc $? $(at)"
tar -czf "$OUT/results.tgz" -C "$W" .
cp "$W/ab.txt" "$OUT/ab.txt"; cp "$W/ab.json" "$OUT/ab.json" 2>/dev/null
grep -E "^equivalence|CHECK FAILED" "$W/ab.txt"
sed -n '/^variant /,$p' "$W/ab.txt"
