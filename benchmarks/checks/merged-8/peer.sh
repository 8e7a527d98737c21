#!/usr/bin/env bash
# Issue 46's acceptance table in one nvidia-h200 call: ours beside FA3 (hopper/ 0251105a through the flash-attn-3
# profile, with its speed feature, cluster) and SDPA's flash and cuDNN, hdim 64/128/256, fwd+bwd, causal both,
# 1k/4k/16k. Four builds (each tree, each dtype) run first, side by side on the CPUs, with exactly the selections
# the benches load; then one bench per dtype (fp16 first, so a short call still has it), each followed by its
# ratio table. From the repo root, carrying .whl and .device/fa3, after the README's wheel install line:
#     LIMIT=560 OUT=$OUT bash benchmarks/checks/merged-8/peer.sh       # HDIMS, DTYPES, REPS narrow it
# ALONE=S times each backend alone in windows of S seconds (`flashbuild bench --alone`) instead of --reps in turns:
# 5 backends x 3 windows x S a row, 36 rows a dtype (about 270 s at S=0.5).
# SUITE=1 also runs call.sh's tests/gpu files from the start, niced, under the same LIMIT (results under $OUT/suite);
# they are stopped whole (SIGSTOP: their process group and every compile marked with their cache dir) while a
# bench times, and resumed after.
if [ "${1:-}" = -h ] || [ "${1:-}" = --help ]; then sed -n 2,12p "$0" | cut -c3-; exit 0; fi
LIMIT_DEFAULT=560; . benchmarks/checks/call_env.sh
HDIMS=${HDIMS:-64,128,256}; DTYPES=${DTYPES:-fp16,bf16}
SEL=(--hdim "$HDIMS" --arch sm90 --direction fwd,bwd)
if [ "${SUITE:-0}" = 1 ]; then
  setsid nice -n 10 env OUT="$OUT/suite" LIMIT=$(( LIMIT - 60 )) bash benchmarks/checks/merged-8/call.sh \
    > "$OUT/suite.txt" 2>&1 &
  suite=$!
fi
suite_signal() {  # SIG: the suite's group, and its compiles (ninja starts each build in a session of its own)
  [ -n "${suite:-}" ] || return 0
  kill -"$1" -- -"$suite" 2>/dev/null
  grep -lz "^FLASHBUILD_COMPILING_IN=/tmp/fbc-suite" /proc/[0-9]*/environ 2>/dev/null | cut -d/ -f3 \
    | xargs -r kill -"$1" 2>/dev/null
}
export FLASHBUILD_CACHE_DIR=/tmp/fbc-peer
pids=()
for dtype in ${DTYPES//,/ }; do  # one build per dtype and tree: the keys the per-dtype benches load
  ( timeout $(( LIMIT - 90 )) python3 -m flashbuild build --source "$TREE" --profile flash-attn-3 "${SEL[@]}" \
      --dtype "$dtype" --features cluster --jobs 6 > "$OUT/build-fa3-$dtype.txt" 2>&1
    echo "rc $? at $(( $(date +%s) - t0 )) s" >> "$OUT/build-fa3-$dtype.txt" ) &
  pids+=($!)
  ( timeout $(( LIMIT - 90 )) python3 -m flashbuild build "${SEL[@]}" --dtype "$dtype" --causal both --features none \
      --jobs 4 > "$OUT/build-ours-$dtype.txt" 2>&1
    echo "rc $? at $(( $(date +%s) - t0 )) s" >> "$OUT/build-ours-$dtype.txt" ) &
  pids+=($!)
done
wait "${pids[@]}"   # the benches time a quiet host: no compile runs beside them
echo "== builds"
for f in "$OUT"/build-*.txt; do echo "$(basename "$f"): $(grep -E '^compiled' "$f") $(tail -1 "$f")"; done
TIMING=(--reps "${REPS:-10}"); [ -z "${ALONE:-}" ] || TIMING=(--alone "$ALONE")
for dtype in ${DTYPES//,/ }; do
  (( $(left) > 40 )) || { echo "== $dtype: $(left) s left, not benched"; continue; }
  suite_signal STOP; sleep 2
  (cd /tmp && timeout -s INT -k 10 $(( $(left) - 10 )) python3 -m flashbuild bench "${SEL[@]}" --dtype "$dtype" \
    --features none --causal both --peer-source "$TREE" --peer-profile flash-attn-3 --seqlens 1024,4096,16384 \
    "${TIMING[@]}" --json "$OUT/peer-$dtype.json") > "$OUT/peer-$dtype.txt" 2>&1
  echo "== $dtype: bench rc $? at $(( $(date +%s) - t0 )) s"
  [ -s "$OUT/peer-$dtype.json" ] && python3 benchmarks/fwd_tile_turnover/peer_rows.py "$OUT/peer-$dtype.json" \
    | tee "$OUT/ratios-$dtype.txt"
  suite_signal CONT
done
if [ -n "${suite:-}" ]; then wait "$suite"; echo "== suite"; tail -30 "$OUT/suite.txt"; fi
echo "== host"; cat "$OUT/host.txt"
# The logs and results in one archive: a call brings back at most 8 files (call 1 lost its suite's log that way).
# Only the names that exist: a glob that matches nothing (suite* without SUITE=1) made tar fail and left them all
# loose, and the call lost the fp16 json and both ratio tables (checks/merged-14). The ratio tables stay out too.
(cd "$OUT" && shopt -s nullglob && logs=(build-*.txt peer-*.txt peer-*.json suite*) &&
  tar -czf logs.tgz "${logs[@]}" && rm -rf "${logs[@]}")
