#!/bin/bash
# The deterministic backward's GPU tests on the final tree, and the mode's cost before and after it moved to
# the Hopper kernel, one device call on the nvidia-h200 machine, from the repository root:
#   BASE=.device/base BUDGET=570 bash benchmarks/bwd_deterministic/verify_hopper.sh
# BASE: a tree from before the Hopper mode (`git archive 2578607 kernels flashbuild templates configs
# pyproject.toml`), whose deterministic calls run the Ampere path's feature kernel. Builds side by side: the
# GPU tests' selections, and hopper.py's (hdim 128/256 non-causal) in both trees; then
# tests/gpu/test_bwd_deterministic_gpu.py and test_api_gpu.py; then hopper.py in the base tree (with
# features) and in this one, back to back. Logs under $OUT, tables last.
set -o pipefail
export PYTHONUNBUFFERED=1 PYTHONDONTWRITEBYTECODE=1
OUT=${OUT:-/tmp/bwd_det_verify}; mkdir -p "$OUT"
root=$PWD; base=$(cd "${BASE:-.device/base}" && pwd)
t0=$(date +%s); now() { echo $(( $(date +%s) - t0 )); }
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,temperature.gpu,power.draw --format=csv | tee "$OUT/gpu.txt"
BENCH=(--hdims 128,256 --seqlens 4096,16384 --causal off --reps 15)
here() { PYTHONPATH=/tmp/site:$root FLASHBUILD_CACHE_DIR=/tmp/fbv-new "$@"; }
there() { (cd "$base" && PYTHONPATH=/tmp/site:$base FLASHBUILD_CACHE_DIR=/tmp/fbv-base "$@"); }
(cd tests/gpu && here timeout 330 python3 -c "import flashbuild, test_bwd_deterministic_gpu as t, test_api_gpu as a
flashbuild.load(**t.SELECTION); flashbuild.load(**t.PLAIN_SELECTION); flashbuild.load(**a.SELECTION)" \
  > "$OUT/build-tests.txt" 2>&1; echo "== tests' builds rc $? at $(now) s") &
here timeout 330 python3 -m flashbuild build --hdim 128,256 --dtype fp16 --arch sm90 --direction fwd,bwd --causal off \
  --features none -j 4 > "$OUT/build-bench-new.txt" 2>&1 &
there timeout 330 python3 -m flashbuild build --hdim 128,256 --dtype fp16 --arch sm90 --direction fwd,bwd --causal off \
  -j 4 > "$OUT/build-bench-base.txt" 2>&1 &
wait; echo "== builds at $(now) s"
here timeout 240 python3 -m pytest -q -s -rs -p no:cacheprovider tests/gpu/test_bwd_deterministic_gpu.py tests/gpu/test_api_gpu.py \
  > "$OUT/pytest.txt" 2>&1
echo "== pytest rc $? at $(now) s"; grep -E "^FAILED|^ERROR" "$OUT/pytest.txt" | head; tail -2 "$OUT/pytest.txt"
left=$(( ${BUDGET:-570} - $(now) - 5 ))
[ $left -gt 40 ] && there timeout -s INT $(( left / 2 )) python3 "$root/benchmarks/bwd_deterministic/hopper.py" "${BENCH[@]}" \
  --features local,softcap --json "$OUT/bench-base.json" > "$OUT/bench-base.txt" 2>&1
echo "== bench base rc $? at $(now) s"
left=$(( ${BUDGET:-570} - $(now) - 5 ))
[ $left -gt 20 ] && here timeout -s INT $left python3 benchmarks/bwd_deterministic/hopper.py "${BENCH[@]}" \
  --json "$OUT/bench-new.json" > "$OUT/bench-new.txt" 2>&1
echo "== bench new rc $? at $(now) s"
echo "-- base (deterministic calls on the Ampere path's feature kernel)"; grep "^|" "$OUT/bench-base.txt"
echo "-- new (deterministic calls on the Hopper kernel)"; grep "^|" "$OUT/bench-new.txt"
