#!/usr/bin/env bash
# Issue 46: K/V multicast in clusters of two CTAs (kernels/hopper/fwd_params.h, kMulticastKV), one nvidia-h200 call from
# the repo root after the wheel line, carrying .whl:
#   OUT=$OUT [HDIMS=128,192,256] [PROBE_HDIMS=$HDIMS] [ARMS=ours,ours-nomc] [SEQLENS=1024,4096,16384] [ROUNDS=3]
#     [SECONDS_EACH=1.0] [TURN_REPS=100] [TESTS=1] [NCU=1] [SANITIZE=1] [LIMIT=560] bash benchmarks/fwd_kv_multicast/run.sh
# h200-1: the defaults (multicast in every non-causal kernel from hdim 128 then). h200-2 (the 128-key hdim-128 kernel
# alone): PROBE_HDIMS=128 ARMS=ours,ours-nomc,ours-base SEQLENS=1024,2048,4096,16384 ROUNDS=5 TURN_REPS=200 NCU=0.
# Builds the GPU tests' selections (HDIMS, fp16 and bf16, non-causal, softcap; test_fwd_wide_keys_gpu.py's) and the
# probe's (HDIMS, fp16, causal both) side by side; TESTS=1 runs tests/gpu/test_fwd_kv_multicast_gpu.py and test_fwd_wide_keys_gpu.py, then
# `flashbuild test --shapes full` of the non-causal forward; then ../fwd_clock_power/probe.py with the arms ours
# (clusters) and ours-nomc (FLASHBUILD_HOPPER_FWD_KV_MULTICAST=off, the same build), non-causal: alone at the card's
# own clocks (SM clock, power, TFLOPS per GHz) and in turns; NCU=1 one clustered call a head dim under ncu's launch
# statistics (the cluster size it ran with); SANITIZE=1 compute-sanitizer memcheck and racecheck on small clustered
# calls. Results under $OUT, the probe's table printed last.
. "$(dirname "$0")/../study_start.sh"
set -o pipefail
LIMIT=${LIMIT:-560}; HDIMS=${HDIMS:-128,192,256}; export FLASHBUILD_CACHE_DIR=${FLASHBUILD_CACHE_DIR:-/tmp/fbc}
left() { echo $(( LIMIT - ($(date +%s) - t0) )); }
build() {  # name, then flashbuild build's selection
  local name=$1; shift
  timeout 330 python3 -m flashbuild build "$@" > "$OUT/build-$name.txt" 2>&1; echo "rc $?" >> "$OUT/build-$name.txt"
}
build tests --hdim "$HDIMS" --dtype fp16,bf16 --arch sm90 --direction fwd --causal off --features softcap --jobs 6 &
PROBE_HDIMS=${PROBE_HDIMS:-$HDIMS}; ARMS=${ARMS:-ours,ours-nomc}
build probe --hdim "$PROBE_HDIMS" --dtype fp16 --arch native --direction fwd --causal both --features none --jobs 5 &
[[ ",$ARMS," == *,ours-base,* ]] && build base --hdim "$PROBE_HDIMS" --dtype fp16 --arch native --direction fwd \
  --causal both --features none --nvcc-flag=-DFLASHBUILD_HOPPER_FWD_MULTICAST_KERNELS=0 --jobs 3 &
[ "${TESTS:-1}" = 1 ] && build wide --hdim 128 --dtype fp16,bf16 --arch sm90 --direction fwd,splitkv --causal both \
  --features none --jobs 5 &
wait; echo "== builds $(at): $(for f in "$OUT"/build-*.txt; do echo -n "$(basename "$f" .txt) $(tail -1 "$f"); "; done)"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,power.limit --format=csv > "$OUT/card.txt" 2>&1
# A first clustered call a head dim under a short bound: a hang in the hand-over stops the call here.
timeout 60 python3 benchmarks/fwd_kv_multicast/calls.py --hdims "$PROBE_HDIMS" --small > "$OUT/smoke.txt" 2>&1
smoke=$?; echo "== smoke rc $smoke $(at)"; cat "$OUT/smoke.txt" | tail -6
[ "$smoke" = 0 ] || exit "$smoke"
if [ "${TESTS:-1}" = 1 ]; then
  timeout -s INT -k 10 $(( $(left) / 3 )) python3 -m pytest -v -rfE -p no:cacheprovider \
    tests/gpu/test_fwd_kv_multicast_gpu.py tests/gpu/test_fwd_wide_keys_gpu.py > "$OUT/pytest.txt" 2>&1
  echo "== pytest rc $? $(at): $(tail -1 "$OUT/pytest.txt")"
  grep -E "^(FAILED|ERROR)" "$OUT/pytest.txt" | cut -c1-200 | head -8
  timeout 150 python3 -m flashbuild test --hdim "$HDIMS" --dtype fp16,bf16 --arch native --direction fwd --causal off \
    --features softcap --shapes full > "$OUT/flashbuild-test.txt" 2>&1
  echo "== flashbuild test rc $? $(at): $(grep -E "passed|failed" "$OUT/flashbuild-test.txt" | tail -1)"
fi
if [ "${SANITIZE:-1}" = 1 ] && command -v compute-sanitizer > /dev/null; then
  for tool in memcheck racecheck; do
    timeout 90 compute-sanitizer --tool "$tool" --error-exitcode 9 python3 benchmarks/fwd_kv_multicast/calls.py \
      --hdims "$PROBE_HDIMS" --small > "$OUT/sanitize-$tool.txt" 2>&1
    echo "== compute-sanitizer $tool rc $? $(at): $(grep -E "ERROR SUMMARY|RACECHECK SUMMARY" "$OUT/sanitize-$tool.txt" | tail -1)"
  done
fi
if [ "${NCU:-1}" = 1 ] && command -v ncu > /dev/null; then
  timeout 120 ncu --section LaunchStats -k regex:fwd_kernel python3 benchmarks/fwd_kv_multicast/calls.py \
    --hdims "$PROBE_HDIMS" > "$OUT/ncu-launch.txt" 2>&1
  echo "== ncu rc $? $(at)"; grep -E "fwd_kernel|Cluster Size|Grid Size" "$OUT/ncu-launch.txt" | sed 's/  */ /g' | cut -c1-120 | head -24
fi
timeout $(( $(left) - 5 )) python3 benchmarks/fwd_clock_power/probe.py --out "$OUT" --name probe --arms "$ARMS" \
  --hdims "$PROBE_HDIMS" --causal off --seqlens "${SEQLENS:-1024,4096,16384}" --turn-reps "${TURN_REPS:-100}" \
  --rounds "${ROUNDS:-3}" --seconds "${SECONDS_EACH:-1.0}" > "$OUT/probe.txt" 2>&1
echo "== probe rc $? $(at)"
grep "^|" "$OUT/probe.txt" | tail -n 14
