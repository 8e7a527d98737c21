#!/bin/bash
# One GPU call of a backward A/B built on this folder's ab.py harness (a study's ab.py sets its arms and rows): the
# study's builds side by side (`ab.py --print-builds`), `flashbuild test --shapes full` of each named arm's first build,
# then the study's ab.py (each arm bitwise against base in deterministic mode, then the rows in turns with SDPA cuDNN).
# Logs and results.tgz under $OUT, the table last. A study's run.sh calls it; from the tree's root on the GPU host:
#   OUT=$OUT [BUDGET=300] bash benchmarks/hopper_bwd_uniform/ab_call.sh STUDY "ARM ..." JOBS [ab.py options]
if [ "$1" = -h ] || [ "$1" = --help ]; then sed -n 2,6p "$0" | cut -c3-; exit 0; fi
STUDY=$1 TESTED=$2 JOBS=$3; shift 3  # TESTED, not ARMS: a study's ab.py may read ARMS from the environment
export PYTHONUNBUFFERED=1 PYTHONDONTWRITEBYTECODE=1
HERE=benchmarks/$STUDY
OUT=${OUT:-/tmp/${STUDY}_out}; W=/tmp/${STUDY}_work; mkdir -p "$OUT" "$W"; BUDGET=${BUDGET:-300}
t0=$(date +%s); at() { echo "at $(( $(date +%s) - t0 )) s"; }
nvidia-smi --query-gpu=name,driver_version,clocks.sm,temperature.gpu --format=csv,noheader | tee "$W/gpu.txt"
S="--arch sm90 --direction bwd --no-local --no-softcap"
fb() {
  local limit=$1 log=$2; shift 2
  timeout "$limit" python3 -m flashbuild "$@" > "$W/$log.txt" 2>&1; echo "== rc $?" >> "$W/$log.txt"
}
python3 "$HERE/ab.py" --print-builds > "$W/builds.txt" || exit 1
while read -r name args; do fb 200 "build-$name" build $args $S -j "$JOBS" & done < "$W/builds.txt"
wait; echo "== builds $(at)"
for f in "$W"/build-*.txt; do
  echo "$(basename "$f" .txt): $(grep -E '^compiled|rror|^== rc' "$f" | head -3 | tr '\n' ' ')"
done
for arm in $TESTED; do
  read -r name args < <(grep "^${arm}0 " "$W/builds.txt")
  fb 90 "test-$name" test $args $S --shapes full
  echo "test-$name: $(grep -E 'passed, [0-9]+ failed' "$W/test-$name.txt" | tail -1) $(tail -1 "$W/test-$name.txt")"
done
echo "== tests $(at)"
left=$(( BUDGET - ($(date +%s) - t0) - 25 )); [ "$left" -lt 15 ] && left=15
timeout $(( left + 60 )) python3 "$HERE/ab.py" --out "$W" --budget "$left" "$@" > "$W/ab.txt" 2>&1
echo "== ab rc $? $(at)"
tar -czf "$OUT/results.tgz" -C "$W" .
cp "$W/ab.txt" "$OUT/ab.txt"; cp "$W/ab.json" "$OUT/ab.json" 2>/dev/null
grep -E "^equivalence|CHECK FAILED" "$W/ab.txt"
sed -n '/^variant /,$p' "$W/ab.txt"
