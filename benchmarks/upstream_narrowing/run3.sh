#!/bin/bash
# Issue 43, run-3 on the H200: nvcc's host and device front ends at once (pipeline/nvcc_overlap.py), FA2's
# device-picked kernels left out of an sm90 slice ([[switches.device]]), and watch's check process started a
# round ahead. From the repository root, with the trees carried as archives in $DATA (git-ignored: hopper/ +
# CUTLASS of flash-attention 0251105a, and the flash-attn 2.8.3 sdist; docs/fa3.md says how):
#   DATA=.device/wup-data bash benchmarks/upstream_narrowing/run3.sh
# 1. TUs, compile-only, started together (at most ~14 compiler processes on the 16 cores): FA3 hdim-128 fp16
#    forward causal-only TU through the overlap driver and with FLASHBUILD_NVCC_OVERLAP=0, and un-narrowed
#    (every switch feature); FA2 2.8.3 hdim-128 fp16 forward causal TU the same three ways.
# 2. Cold builds with link: the FA3 hdim-128 fwd+bwd slice (causal on, features none) and FA2's fwd slice
#    (watched in 4) and fwd+bwd slice (tested in 3).
# 3. Each tree's own tests on its narrowed slice (pytest_slice), for a bounded time.
# 4. watch on the FA3 slice (touch the forward mainloop header) and on the FA2 fwd slice (touch
#    flash_fwd_kernel.h): save->verdict of the edit's round.
set -o pipefail
export PYTHONUNBUFFERED=1 PYTHONDONTWRITEBYTECODE=1 PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH}
if [ "$1" = --help ]; then sed -n 2,14p "$0"; exit 0; fi
RESULTS=${OUT:-/tmp/narrow3_results}; OUT=/tmp/narrow3_out; DATA=${DATA:-.device/wup-data}; BUDGET=${BUDGET:-540}
t0=$(date +%s); deadline=$((t0 + BUDGET)); left() { echo $((deadline - $(date +%s))); }
since() { python3 -c "print(round($(date +%s.%N) - $1, 1))"; }
mkdir -p "$OUT" /tmp/trees/fa3
[ -d /tmp/trees/fa3/hopper ] || tar -C /tmp/trees/fa3 -xzf "$DATA/fa3-0251105a-cutlass-7127592.tar.gz" || exit 1
[ -d /tmp/trees/flash_attn-2.8.3 ] || tar -C /tmp/trees -xzf "$DATA/flash_attn-2.8.3.tar.gz" || exit 1
export FLASHBUILD_CACHE_DIR=/tmp/narrow3_cache
FB="python3 -m flashbuild"
FA3=(--source /tmp/trees/fa3 --profile flash-attn-3 --hdim 128 --dtype fp16 --arch sm90)
FA2=(--source /tmp/trees/flash_attn-2.8.3 --profile flash-attn-2 --hdim 128 --dtype fp16 --arch sm90)
ALL3=local,varlen,appendkv,qv,deterministic,gqa,cluster
{ nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; echo "cores $(nproc)"; nvcc --version | tail -2;
  python3 -c "import torch; print('torch', torch.__version__, 'cuda', torch.version.cuda)"; } > "$OUT/host.txt" 2>&1

timed() {  # NAME CMD...: in the background, wall seconds to $OUT/NAME.wall (env NAME=... before CMD is allowed)
  local name=$1; shift
  ( s=$(date +%s.%N); timeout "$(left)" env "$@" > "$OUT/$name.txt" 2>&1; rc=$?
    echo "$(since "$s") rc $rc" > "$OUT/$name.wall" ) &
}
B=/tmp/narrow3_dirs
# 1. the TUs
timed fa3-tu-overlap    $FB build "${FA3[@]}" --direction fwd --causal on --features none --compile-only --jobs 2 --build-dir $B/fa3-overlap
timed fa3-tu-plain      FLASHBUILD_NVCC_OVERLAP=0 $FB build "${FA3[@]}" --direction fwd --causal on --features none --compile-only --jobs 2 --build-dir $B/fa3-plain
timed fa3-tu-unnarrowed $FB build "${FA3[@]}" --direction fwd --causal both --features $ALL3 --compile-only --jobs 2 --build-dir $B/fa3-unnarrowed
timed fa2-tu-overlap    $FB build "${FA2[@]}" --direction fwd --causal on --features none --compile-only --jobs 1 --build-dir $B/fa2-overlap
timed fa2-tu-plain      FLASHBUILD_NVCC_OVERLAP=0 $FB build "${FA2[@]}" --direction fwd --causal on --features none --compile-only --jobs 1 --build-dir $B/fa2-plain
timed fa2-tu-unnarrowed $FB build "${FA2[@]}" --direction fwd --causal on --compile-only --jobs 1 --build-dir $B/fa2-unnarrowed
until [ -f $OUT/fa3-tu-overlap.wall ] && [ -f $OUT/fa3-tu-plain.wall ] && [ -f $OUT/fa2-tu-plain.wall ] \
      && [ -f $OUT/fa2-tu-overlap.wall ] || [ "$(left)" -lt 300 ]; do sleep 1; done
echo "== narrowed TUs done at $(( $(date +%s) - t0 )) s"

# 2. the slices (the un-narrowed TUs may still be compiling beside them)
SLICE3=("${FA3[@]}" --direction fwd,bwd --causal on --features none)
WATCH2=("${FA2[@]}" --direction fwd --causal on --features none)
TEST2=("${FA2[@]}" --direction fwd,bwd --causal on --features none)
timed fa2-slice-fwd $FB build "${WATCH2[@]}" --jobs 3
timed fa2-slice-fwdbwd $FB build "${TEST2[@]}" --jobs 3
s=$(date +%s.%N); timeout "$(left)" $FB build "${SLICE3[@]}" --jobs 5 > "$OUT/fa3-slice.txt" 2>&1
echo "$(since "$s") rc $?" > "$OUT/fa3-slice.wall"
until [ -f $OUT/fa2-slice-fwd.wall ] && [ -f $OUT/fa2-slice-fwdbwd.wall ] || [ "$(left)" -lt 200 ]; do sleep 1; done
echo "== slices built at $(( $(date +%s) - t0 )) s"

# 3. the trees' tests on the narrowed slices, beside each other (SIGINT at the limit: pytest prints its counts)
(cd /tmp && timeout -s INT -k 15 "${TEST_SECS:-45}" $FB run "${SLICE3[@]}" -- python3 -m pytest \
  /tmp/trees/fa3/hopper/test_flash_attn.py -p flashbuild.sources.pytest_slice -p no:cacheprovider --import-mode=append \
  -q -rfE -x) > "$OUT/fa3-tests.txt" 2>&1 &
p3=$!
(cd /tmp && timeout -s INT -k 15 "${TEST_SECS:-45}" $FB run "${TEST2[@]}" -- python3 -m pytest \
  /tmp/trees/flash_attn-2.8.3/tests/test_flash_attn.py -k "test_flash_attn_output" -p flashbuild.sources.pytest_slice \
  -p no:cacheprovider --import-mode=append -q -rfE -x) > "$OUT/fa2-tests.txt" 2>&1 &
p2=$!
wait $p3 $p2
echo "== tests done at $(( $(date +%s) - t0 )) s"

# 4. watch: first round, then an edit (touch) and the next verdict
watch_one() {  # NAME FILE-TO-TOUCH SELECTION...
  local name=$1 file=$2; shift 2
  rm -f "$OUT/$name.jsonl"
  (cd /tmp && exec timeout "$(( $(left) - 5 ))" $FB watch "$@" --jobs 5 --json "$OUT/$name.jsonl") > "$OUT/$name.txt" 2>&1 &
  local wpid=$!
  until [ "$(wc -l < "$OUT/$name.jsonl" 2>/dev/null || echo 0)" -ge 1 ] || ! kill -0 $wpid 2>/dev/null; do sleep 1; done
  sleep 4; touch "$file"   # the spare check process has started by now
  until [ "$(wc -l < "$OUT/$name.jsonl" 2>/dev/null || echo 0)" -ge 2 ] || ! kill -0 $wpid 2>/dev/null; do sleep 1; done
  kill $wpid 2>/dev/null; wait $wpid 2>/dev/null
  echo "== $name done at $(( $(date +%s) - t0 )) s"
}
watch_one fa3-watch /tmp/trees/fa3/hopper/mainloop_fwd_sm90_tma_gmma_ws.hpp "${SLICE3[@]}"
watch_one fa2-watch /tmp/trees/flash_attn-2.8.3/csrc/flash_attn/src/flash_fwd_kernel.h "${WATCH2[@]}"
wait

# per-TU times (ninja's log: start, end ms) and kernels per object (distinct host launch stubs)
for d in $B/* "$FLASHBUILD_CACHE_DIR"/*/; do
  [ -f "$d/.ninja_log" ] && awk -v d="$(basename "$d")" 'NR>1 {printf "%s %s %.1f\n", d, $4, ($2-$1)/1000}' "$d/.ninja_log"
done > "$OUT/tu_times.txt"
for f in $B/*/obj/*.o "$FLASHBUILD_CACHE_DIR"/*/obj/*.o; do
  n=$(nm "$f" 2>/dev/null | grep -oE '_ZGVZL[0-9]+__device_stub__[A-Za-z0-9_]+' | sort -u | wc -l)
  echo "$(basename "$(dirname "$(dirname "$f")")")/$(basename "$f") $n"
done > "$OUT/kernels.txt"
echo "== wall (s, rc)"; for w in "$OUT"/*.wall; do echo "$(basename "$w" .wall): $(cat "$w")"; done
echo "== TU times (s)"; grep -E "flash_fwd_hdim128|flash_bwd_hdim128|flash_api|scheduler" "$OUT/tu_times.txt"
echo "== kernels per object"; grep -E "fwd_hdim128|bwd_hdim128" "$OUT/kernels.txt"
echo "== tests"; for t in fa3 fa2; do echo "$t: $(grep -E "passed|failed|error" "$OUT/$t-tests.txt" | tail -1)"; grep -E "^FAILED|^ERROR|deselected" "$OUT/$t-tests.txt" | head -4 | cut -c1-300; done
echo "== watch"; grep -hE "^\[" "$OUT/fa3-watch.txt" "$OUT/fa2-watch.txt" | cut -c1-400
mkdir -p "$RESULTS"; tar -czf "$RESULTS/logs.tgz" -C "$OUT" .
