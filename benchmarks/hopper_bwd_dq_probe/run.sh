#!/bin/bash
# The dQ-reduction probe (-DFLASHBUILD_HOPPER_BWD_PROBE_NO_DQ=1, kernels/hopper/bwd_epilogue.h; dQ comes out zero, so no
# `flashbuild test` of it) against the tree's defaults at hdim 64, 128 and 256 (HDIMS), one call on the H200: both
# builds side by side, then ab.py (dK / dV bitwise against base in deterministic mode, dQ zero, the rows in turns with
# SDPA cuDNN). Logs and results.tgz under $OUT, the table last. From the tree's root on the GPU host, PYTHONPATH and
# FLASHBUILD_CACHE_DIR set as the call sets them:
#   OUT=$OUT [BUDGET=220] bash benchmarks/hopper_bwd_dq_probe/run.sh [ab.py options]
if [ "$1" = -h ] || [ "$1" = --help ]; then sed -n 2,7p "$0" | cut -c3-; exit 0; fi
export PYTHONUNBUFFERED=1 PYTHONDONTWRITEBYTECODE=1
OUT=${OUT:-/tmp/hopper_bwd_dq_probe_out}; W=/tmp/hopper_bwd_dq_probe_work; mkdir -p "$OUT" "$W"; BUDGET=${BUDGET:-220}
t0=$(date +%s); at() { echo "at $(( $(date +%s) - t0 )) s"; }
nvidia-smi --query-gpu=name,driver_version,clocks.sm,temperature.gpu --format=csv,noheader | tee "$W/gpu.txt"
S="--arch sm90 --direction bwd --no-local --no-softcap"
fb() {
  local limit=$1 log=$2; shift 2
  timeout "$limit" python3 -m flashbuild "$@" > "$W/$log.txt" 2>&1; echo "== rc $?" >> "$W/$log.txt"
}
python3 benchmarks/hopper_bwd_dq_probe/ab.py --print-builds > "$W/builds.txt" || exit 1
while read -r name args; do fb 200 "build-$name" build $args $S -j 8 & done < "$W/builds.txt"
wait; echo "== builds $(at)"
for f in "$W"/build-*.txt; do
  echo "$(basename "$f" .txt): $(grep -E '^compiled|rror|^== rc' "$f" | head -3 | tr '\n' ' ')"
done
left=$(( BUDGET - ($(date +%s) - t0) - 30 )); [ "$left" -lt 20 ] && left=20
timeout $(( left + 60 )) python3 benchmarks/hopper_bwd_dq_probe/ab.py --out "$W" --budget "$left" "$@" > "$W/ab.txt" 2>&1
echo "== ab rc $? $(at)"
tar -czf "$OUT/results.tgz" -C "$W" .
cp "$W/ab.txt" "$OUT/ab.txt"; cp "$W/ab.json" "$OUT/ab.json" 2>/dev/null
grep -E "^equivalence|CHECK FAILED" "$W/ab.txt"
sed -n '/^variant /,$p' "$W/ab.txt"
