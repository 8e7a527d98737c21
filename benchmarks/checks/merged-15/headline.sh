#!/usr/bin/env bash
# One direction of the current-numbers table (benchmarks/current.py) on the tree as it is, in one nvidia-h200 call:
# the sm90 build of every head dim the direction serves (fp16 and bf16, causal both, no features) on all cores, then
# `flashbuild bench` of it in turns with SDPA's backends, JSON and log under $OUT. From the repo root, after the
# README's wheel install line:
#     DIRECTION=fwd LIMIT=560 OUT=$OUT bash benchmarks/checks/merged-15/headline.sh     # or DIRECTION=bwd
if [ "${1:-}" = -h ] || [ "${1:-}" = --help ]; then sed -n 2,6p "$0" | cut -c3-; exit 0; fi
LIMIT_DEFAULT=560; . benchmarks/checks/call_env.sh
DIRECTION=${DIRECTION:-fwd}
case $DIRECTION in
  fwd) HDIMS=32,64,96,128,192,256; REPS=${REPS:-30} ;;
  bwd) HDIMS=64,96,128,192,256; REPS=${REPS:-15} ;;  # hdim 32's backward runs on the Ampere path
  *) echo "headline.sh: DIRECTION=$DIRECTION: fwd or bwd" >&2; exit 2 ;;
esac
SEL=(--hdim "$HDIMS" --dtype fp16,bf16 --arch sm90 --direction "$DIRECTION" --causal both --no-local --no-softcap)
export FLASHBUILD_CACHE_DIR=/tmp/fbc-headline
timeout -k 10 $(( $(left) - 60 )) python3 -m flashbuild build "${SEL[@]}" -j "$(nproc)" > "$OUT/build-$DIRECTION.txt" 2>&1
echo "build rc $? at $(( $(date +%s) - t0 )) s" | tee -a "$OUT/build-$DIRECTION.txt"
timeout -s INT -k 10 $(( $(left) - 15 )) python3 -m flashbuild bench "${SEL[@]}" --seqlens 1024,4096,16384 \
  --reps "$REPS" --json "$OUT/bench-$DIRECTION.json" > "$OUT/bench-$DIRECTION.txt" 2>&1
echo "bench rc $? at $(( $(date +%s) - t0 )) s" | tee -a "$OUT/bench-$DIRECTION.txt"
tail -45 "$OUT/bench-$DIRECTION.txt"
