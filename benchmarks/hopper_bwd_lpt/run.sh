#!/usr/bin/env bash
# The causal Hopper backward's grid longest first across heads (-DFLASHBUILD_HOPPER_BWD_LONGEST_FIRST=1) against the
# grid's own order, one nvidia-h200 call (carry `.whl`), from the root of a tree at 555ba2a (the last commit with the
# form; ab.py refuses elsewhere) after the wheel line:
#   OUT=$OUT [BUDGET=200] [ARMSET=sections] bash benchmarks/hopper_bwd_lpt/run.sh [ab.py options]
# ab.py's two builds side by side, then ab.py (the form bitwise against base in deterministic mode, within tolerance
# in default mode, then the rows in turns with SDPA cuDNN).
. "$(dirname "$0")/../study_start.sh"
HERE=benchmarks/hopper_bwd_lpt
S="--arch sm90 --direction bwd --no-local --no-softcap"
python3 $HERE/ab.py ${ARMSET:-} --print-builds > "$OUT/builds.txt" || exit 1
while read -r name args; do
  timeout 240 python3 -m flashbuild build $args $S -j 4 > "$OUT/build-$name.txt" 2>&1 &
done < "$OUT/builds.txt"
wait; echo "== builds $(at)"; tail -qn 1 "$OUT"/build-*.txt | cut -c1-160
timeout $(( ${BUDGET:-200} + 200 )) python3 $HERE/ab.py ${ARMSET:-} --out "$OUT" --budget "${BUDGET:-200}" --rounds 5 "$@" \
  > "$OUT/ab.txt" 2>&1
echo "== ab rc $? $(at)"; grep -E "^equivalence|CHECK FAILED" "$OUT/ab.txt"; sed -n '/^variant /,$p' "$OUT/ab.txt"
