#!/usr/bin/env bash
# Issue 46: the forward of ours and FA3's at the clocks the card picks itself (probe.py: SM clock, power, TFLOPS per
# GHz, the arms in turns); with NCU=1, then ../fwd_l2_ncu/run.sh again with ncu leaving the clocks alone (its h200-1
# locked them at base). One nvidia-h200 call from the repo root after the wheel line, carrying .whl and .device/fa3:
#   OUT=$OUT [ARMS=ours,fa3] [ARMS2=] [HDIMS=128,256] [CAUSAL=off,on] [SEQLENS=16384] [TURN_REPS=0] [ROUNDS=3] \
#     [SECONDS_EACH=1.5] [DIRECTION=fwd] [NCU=0] [TESTS=0] [LIMIT=420] bash benchmarks/fwd_clock_power/run.sh
# DIRECTION=bwd times mha_bwd instead (builds of both directions; h200-8: DIRECTION=bwd HDIMS=128 ARMS=ours,fa3).
# TESTS=1: then the causal forward's correctness on this tree: tests/gpu/test_fwd_causal_pairs_gpu.py (every
# FLASHBUILD_HOPPER_FWD_PAIRS setting) and `flashbuild test` of the forward, causal, HDIMS, fp16 and bf16.
# ARMS2: a second probe's arms, in a process of its own (one FA3 build a process: fa3-nocluster goes there).
# h200-1: the defaults with NCU=1. h200-3: ARMS=ours,ours-pairs,fa3 ARMS2=ours,fa3-nocluster ROUNDS=4.
# h200-4: ARMS=ours,ours-pairs,ours-pairs4 HDIMS=64,128,192,256 CAUSAL=on SEQLENS=8192,16384 TURN_REPS=200 ROUNDS=4.
# h200-5 (all:2 the default): ARMS=ours,ours@short HDIMS=64,128,192,256 CAUSAL=on SEQLENS=1024,4096,16384
#   TURN_REPS=200 ROUNDS=3 SECONDS_EACH=1.2 TESTS=1. h200-6 (the default: one tail round up to 32 query blocks
#   a head, two past it): ARMS=ours,ours@short,ours@all:2 HDIMS=64,128,192,256 CAUSAL=on SEQLENS=1024,16384
#   TURN_REPS=100 ROUNDS=2 SECONDS_EACH=1.0 TESTS=1. h200-7: ARMS=ours,fa3 TURN_REPS=100 ROUNDS=3 SECONDS_EACH=1.2.
. "$(dirname "$0")/../study_start.sh"
set -o pipefail
LIMIT=${LIMIT:-420}; HDIMS=${HDIMS:-128,256}; ARMS=${ARMS:-ours,fa3}; ARMS2=${ARMS2:-}
DIRECTION=${DIRECTION:-fwd}; BUILD_DIRECTION=$([ "$DIRECTION" = bwd ] && echo fwd,bwd || echo fwd)
TREE=/tmp/fa3/flash-attention-0251105a
TARBALL=.device/fa3/flash-attention-0251105a-hopper-cutlass-7127592.tar.gz
[[ ",$ARMS,$ARMS2," != *,fa3* ]] || [ -d "$TREE" ] || { mkdir -p /tmp/fa3 && tar -C /tmp/fa3 -xzf "$TARBALL"; }
BUILD_S=$([ "$DIRECTION" = bwd ] && echo 450 || echo 240)  # FA3's backward TUs take minutes on 16 cores
fa3() {  # FA3's slice with the given features
  timeout "$BUILD_S" python3 -m flashbuild build --source "$TREE" --profile flash-attn-3 --hdim "$HDIMS" --dtype fp16 \
    --arch native --direction "$BUILD_DIRECTION" --features "$1" --jobs "$2" > "$OUT/build-fa3-$1.txt" 2>&1
}
[[ ",$ARMS,$ARMS2," == *,fa3,* ]] && fa3 cluster 12 &
[[ ",$ARMS,$ARMS2," == *,fa3-nocluster,* ]] && fa3 none 6 &
JOBS=$([[ ",$ARMS,$ARMS2," == *,fa3* ]] && echo 4 || echo 16)
( timeout "$BUILD_S" python3 -m flashbuild build --hdim "$HDIMS" --dtype fp16 --arch native \
    --direction "$BUILD_DIRECTION" --causal both --features none --jobs "$JOBS" > "$OUT/build-ours.txt" 2>&1 ) &
wait; echo "== builds $(at)"
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,power.draw,power.limit,temperature.gpu --format=csv \
  | tee "$OUT/card.txt"
probe() {
  python3 benchmarks/fwd_clock_power/probe.py --out "$OUT" --name "$1" --arms "$2" --hdims "$HDIMS" \
    --direction "$DIRECTION" --causal "${CAUSAL:-off,on}" --seqlens "${SEQLENS:-16384}" --turn-reps "${TURN_REPS:-0}" \
    --rounds "${ROUNDS:-3}" --seconds "${SECONDS_EACH:-1.5}" > "$OUT/$1.txt" 2>&1
  echo "== $1 ($2) rc $? $(at)"
}
probe probe "$ARMS"
[ -n "$ARMS2" ] && probe probe2 "$ARMS2"
if [ "${NCU:-0}" = 1 ]; then
  OUT=$OUT HDIMS="${HDIMS//,/ }" LIMIT=$(( LIMIT - ($(date +%s) - t0) )) bash benchmarks/fwd_l2_ncu/run.sh | tail -n 48
  echo "== ncu $(at)"
fi
if [ "${TESTS:-0}" = 1 ]; then
  th=${TEST_HDIMS:-$HDIMS}
  timeout 200 python3 -m pytest -q -p no:cacheprovider tests/gpu/test_fwd_causal_pairs_gpu.py > "$OUT/tests.txt" 2>&1
  echo "== pairs tests rc $? $(at): $(tail -n 1 "$OUT/tests.txt")"
  timeout 300 python3 -m flashbuild test --hdim "$th" --dtype fp16,bf16 --arch native --direction fwd --causal on \
    --no-local --no-softcap --shapes full -j 16 >> "$OUT/tests.txt" 2>&1
  echo "== flashbuild test rc $? $(at): $(tail -n 1 "$OUT/tests.txt")"
fi
tail -qn 20 "$OUT"/probe*.txt
