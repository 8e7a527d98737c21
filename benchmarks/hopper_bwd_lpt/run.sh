#!/usr/bin/env bash
# The causal Hopper backward's grid longest first across sections of heads against the grid's own order
# (-DFLASHBUILD_HOPPER_BWD_LPT_SECTION, kernels/hopper/bwd_params.h), one nvidia-h200 call (carry `.whl`), from the repo
# root after the wheel line:
#   OUT=$OUT [BUDGET=200] [ARMSET=odd|softcap] ([ARMSET=sections|grid] at 02a586b) bash benchmarks/hopper_bwd_lpt/run.sh [ab.py options]
# ab.py's builds side by side, then ab.py (each arm bitwise against base in deterministic mode, within tolerance in
# default mode, then the rows in turns with SDPA cuDNN).
# PART=tests (the default form, HDIMS=64,128,256 unless given): one build of those (fwd and bwd, fp16 and bf16,
# causal both, no features), `flashbuild test --shapes full` on it, then the backward GPU files narrowed to it
# (../fwd_tile_hdim128_176/narrow_plugin.py; the softcap / local feature tests deselected: their kernels keep the
# grid's own order).
. "$(dirname "$0")/../study_start.sh"
if [ "${PART:-}" = tests ]; then
  HD=${HDIMS:-64,128,256}
  SEL="--hdim $HD --dtype fp16,bf16 --arch native --direction fwd,bwd --causal both --no-local --no-softcap"
  timeout 240 python3 -m flashbuild test $SEL --shapes full --jobs 16 > "$OUT/test.txt" 2>&1
  echo "== flashbuild test rc $? $(at)"; grep -E "passed, [0-9]+ failed" "$OUT/test.txt" | tail -1
  export NARROW_HDIM=$HD PYTHONPATH=benchmarks/fwd_tile_hdim128_176:$PYTHONPATH
  export NARROW_SELECTION='{"hdim": ['"$HD"'], "dtype": ["fp16", "bf16"], "arch": "native", "direction": "fwd,bwd", "causal": "both", "features": []}'
  timeout $(( ${DEADLINE:-450} - ($(date +%s) - t0) )) python3 -m pytest -q -p no:cacheprovider -p narrow_plugin -n 4 \
    -k "not feature" tests/gpu/test_hopper_bwd_gpu.py tests/gpu/test_hopper_varlen_bwd_gpu.py \
    tests/gpu/test_bwd_deterministic_gpu.py > "$OUT/pytest.txt" 2>&1
  echo "== pytest rc $? $(at)"; tail -n 3 "$OUT/pytest.txt" | cut -c1-240
  exit 0
fi
HERE=benchmarks/hopper_bwd_lpt
S="--arch sm90 --direction bwd"; case " ${ARMSET:-} " in *" softcap "*) ;; *) S="$S --no-local --no-softcap";; esac
python3 $HERE/ab.py ${ARMSET:-} --print-builds > "$OUT/builds.txt" || exit 1
while read -r name args; do
  timeout 240 python3 -m flashbuild build $args $S -j 4 > "$OUT/build-$name.txt" 2>&1 &
done < "$OUT/builds.txt"
wait; echo "== builds $(at)"; tail -qn 1 "$OUT"/build-*.txt | cut -c1-160
timeout $(( ${BUDGET:-200} + 200 )) python3 $HERE/ab.py ${ARMSET:-} --out "$OUT" --budget "${BUDGET:-200}" --rounds 5 "$@" \
  > "$OUT/ab.txt" 2>&1
echo "== ab rc $? $(at)"; grep -E "^equivalence|CHECK FAILED" "$OUT/ab.txt"; sed -n '/^variant /,$p' "$OUT/ab.txt"
