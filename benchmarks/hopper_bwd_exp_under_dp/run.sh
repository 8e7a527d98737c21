#!/bin/bash
# The exponentials under dP^T's product (-DFLASHBUILD_HOPPER_BWD_EXP_UNDER_DP=1 `pin`, =3 `half`) against the tree's
# defaults at hdim 128, one call on the H200: ab.py's builds side by side (base and the two forms, fp16 and bf16),
# `flashbuild test --shapes full` of each form's fp16 build (causal and not), then ab.py (each form bitwise against base
# in deterministic mode, then the rows in turns with SDPA cuDNN). Logs and results.tgz under $OUT, the table last.
# From the tree's root on the GPU host, PYTHONPATH and FLASHBUILD_CACHE_DIR set as the call sets them:
#   OUT=$OUT [BUDGET=300] bash benchmarks/hopper_bwd_exp_under_dp/run.sh [ab.py options]
# The form lost in call h200-1 and left main (README.md): run this from the last commit that has it, c5aa03e; on a
# tree without kernels/hopper/bwd_exp_under_dp.h it stops at once (exit 2) and says so.
if [ "$1" = -h ] || [ "$1" = --help ]; then sed -n 2,9p "$0" | cut -c3-; exit 0; fi
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
if [ ! -f "$ROOT/kernels/hopper/bwd_exp_under_dp.h" ]; then
  echo "run.sh: this tree ($ROOT) has no exponentials-under-dP^T form (kernels/hopper/bwd_exp_under_dp.h): it lost" \
       "in call h200-1 (benchmarks/hopper_bwd_exp_under_dp/README.md) and was taken out of main, so" \
       "-DFLASHBUILD_HOPPER_BWD_EXP_UNDER_DP would change nothing. Run it from the last commit that has it:" \
       "git worktree add /tmp/eud c5aa03e && cd /tmp/eud && OUT=\$OUT BUDGET=300 bash benchmarks/hopper_bwd_exp_under_dp/run.sh" >&2
  exit 2
fi
export PYTHONUNBUFFERED=1 PYTHONDONTWRITEBYTECODE=1
HERE=benchmarks/hopper_bwd_exp_under_dp
OUT=${OUT:-/tmp/hopper_bwd_exp_under_dp_out}; W=/tmp/hopper_bwd_exp_under_dp_work; mkdir -p "$OUT" "$W"; BUDGET=${BUDGET:-300}
t0=$(date +%s); at() { echo "at $(( $(date +%s) - t0 )) s"; }
nvidia-smi --query-gpu=name,driver_version,clocks.sm,temperature.gpu --format=csv,noheader | tee "$W/gpu.txt"
S="--arch sm90 --direction bwd --no-local --no-softcap"
fb() {
  local limit=$1 log=$2; shift 2
  timeout "$limit" python3 -m flashbuild "$@" > "$W/$log.txt" 2>&1; echo "== rc $?" >> "$W/$log.txt"
}
python3 $HERE/ab.py --print-builds > "$W/builds.txt" || exit 1
while read -r name args; do fb 200 "build-$name" build $args $S -j 3 & done < "$W/builds.txt"
wait; echo "== builds $(at)"
for f in "$W"/build-*.txt; do
  echo "$(basename "$f" .txt): $(grep -E '^compiled|rror|^== rc' "$f" | head -3 | tr '\n' ' ')"
done
for arm in pin half; do
  read -r name args < <(grep "^${arm}0 " "$W/builds.txt")
  fb 90 "test-$name" test $args $S --shapes full
  echo "test-$name: $(grep -E 'passed, [0-9]+ failed' "$W/test-$name.txt" | tail -1) $(tail -1 "$W/test-$name.txt")"
done
echo "== tests $(at)"
left=$(( BUDGET - ($(date +%s) - t0) - 25 )); [ "$left" -lt 15 ] && left=15
timeout $(( left + 60 )) python3 $HERE/ab.py --out "$W" --budget "$left" "$@" > "$W/ab.txt" 2>&1
echo "== ab rc $? $(at)"
tar -czf "$OUT/results.tgz" -C "$W" .
cp "$W/ab.txt" "$OUT/ab.txt"; cp "$W/ab.json" "$OUT/ab.json" 2>/dev/null
grep -E "^equivalence|CHECK FAILED" "$W/ab.txt"
sed -n '/^variant /,$p' "$W/ab.txt"
