#!/bin/bash
# Issue 43 on the H200: upstream TUs narrowed to a slice's switches, each beside the un-narrowed build in
# the same run (all builds start together on the 16 cores; each is one or a few TUs, so none waits for a core).
# From the repository root, with the trees carried as archives in $DATA (git-ignored; docs/fa3.md says how
# they are made: hopper/ + csrc/cutlass/include of flash-attention 0251105a, and the flash-attn 2.8.3 sdist):
#   DATA=.device/wup-data bash benchmarks/upstream_narrowing/run.sh
# 1. FA3 hdim-128 fp16 forward TU, --causal on --features none (narrowed) vs the same TU with every switch
#    feature on (what `--features none` compiled before the switches were narrowed): compile-only, nvcc --time.
# 2. FA2 2.8.3 hdim-128 fp16 forward causal TU, --features none vs the tree's own (every feature): same.
# 3. FA3 hdim-128 fwd+bwd slice, causal on, features none, cold build with link; beside it the same slice
#    with every switch feature on (the un-narrowed slice).
# 4. hopper/test_flash_attn.py on the narrowed slice (pytest_slice: cases needing a compiled-out branch deselected).
# 5. flashbuild watch on the narrowed slice: first round, then an edit (touch) of the forward mainloop header.
# Each compile's kernels are counted from its object (host launch stubs, one per kernel instantiated).
set -o pipefail
export PYTHONUNBUFFERED=1 PYTHONDONTWRITEBYTECODE=1 PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH}
RESULTS=${OUT:-/tmp/narrow_results}; OUT=/tmp/narrow_out; DATA=${DATA:-.device/wup-data}; BUDGET=${BUDGET:-390}
t0=$(date +%s); deadline=$((t0 + BUDGET)); left() { echo $((deadline - $(date +%s))); }
mkdir -p "$OUT" /tmp/trees/fa3
[ -d /tmp/trees/fa3/hopper ] || tar -C /tmp/trees/fa3 -xzf "$DATA/fa3-0251105a-cutlass-7127592.tar.gz" || exit 1
[ -d /tmp/trees/flash_attn-2.8.3 ] || tar -C /tmp/trees -xzf "$DATA/flash_attn-2.8.3.tar.gz" || exit 1
export FLASHBUILD_CACHE_DIR=/tmp/narrow_cache
FB="python3 -m flashbuild"
FA3=(--source /tmp/trees/fa3 --profile flash-attn-3 --hdim 128 --dtype fp16 --arch sm90)
FA2=(--source /tmp/trees/flash_attn-2.8.3 --profile flash-attn-2 --hdim 128 --dtype fp16 --arch sm90)
ALL3=local,varlen,appendkv,qv,deterministic,gqa,cluster   # every switch feature, no TU feature (gqa: the backward's, since this study)
{ nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; echo "cores $(nproc)"; nvcc --version | tail -2;
  python3 -c "import torch; print('torch', torch.__version__, 'cuda', torch.version.cuda)"; } > "$OUT/host.txt" 2>&1

timed() {  # NAME CMD...: run in the background, wall seconds to $OUT/NAME.wall
  local name=$1; shift
  ( s=$(date +%s.%N); timeout "$(left)" "$@" > "$OUT/$name.txt" 2>&1; rc=$?
    echo "$(python3 -c "print(round($(date +%s.%N) - $s, 1))") rc $rc" > "$OUT/$name.wall" ) &
}
timed fa3-fwd-narrowed   $FB build "${FA3[@]}" --direction fwd --causal on --features none --compile-only --profile-compile --jobs 2
timed fa3-fwd-unnarrowed $FB build "${FA3[@]}" --direction fwd --causal both --features $ALL3 --compile-only --profile-compile --jobs 2
timed fa2-fwd-narrowed   $FB build "${FA2[@]}" --direction fwd --causal on --features none --compile-only --profile-compile --jobs 1
timed fa2-fwd-unnarrowed $FB build "${FA2[@]}" --direction fwd --causal on --compile-only --profile-compile --jobs 1
if [ -n "$EXTRA" ]; then  # more CPU than a short run has: the template trace (2x cicc) and the un-narrowed slice
  timed fa3-fwd-narrowed-templates $FB build "${FA3[@]}" --direction fwd --causal on --features none --compile-only --profile-templates --jobs 2
  timed fa3-slice-unnarrowed $FB build "${FA3[@]}" --direction fwd,bwd --causal both --features $ALL3 --jobs 5
fi
SLICE=("${FA3[@]}" --direction fwd,bwd --causal on --features none)
s=$(date +%s.%N); timeout "$(left)" $FB build "${SLICE[@]}" --jobs 5 > "$OUT/fa3-slice-narrowed.txt" 2>&1
echo "$(python3 -c "print(round($(date +%s.%N) - $s, 1))") rc $?" > "$OUT/fa3-slice-narrowed.wall"
echo "== narrowed slice built: $(cat $OUT/fa3-slice-narrowed.wall) at $(( $(date +%s) - t0 )) s"

# 4. upstream tests on the narrowed slice, for a bounded time (SIGINT: pytest still prints its counts)
xdist=(); python3 -c "import xdist" 2>/dev/null && xdist=(-n 4)
(cd /tmp && timeout -s INT -k 15 "${TEST_SECS:-40}" $FB run "${SLICE[@]}" -- python3 -m pytest \
  /tmp/trees/fa3/hopper/test_flash_attn.py -p flashbuild.sources.pytest_slice -p no:cacheprovider --import-mode=append \
  -q "${xdist[@]}") > "$OUT/fa3-tests.txt" 2>&1
echo "== tests rc $? at $(( $(date +%s) - t0 )) s"

# 5. watch: the first round tests the slice; then touch the forward mainloop and wait for the next verdict
rm -f "$OUT/watch.jsonl"
(cd /tmp && exec timeout "$(left)" $FB watch "${SLICE[@]}" --jobs 5 --json "$OUT/watch.jsonl") > "$OUT/watch.txt" 2>&1 &
wpid=$!
until [ "$(wc -l < "$OUT/watch.jsonl" 2>/dev/null || echo 0)" -ge 1 ] || ! kill -0 $wpid 2>/dev/null; do sleep 1; done
sleep 2; touch /tmp/trees/fa3/hopper/mainloop_fwd_sm90_tma_gmma_ws.hpp
until [ "$(wc -l < "$OUT/watch.jsonl" 2>/dev/null || echo 0)" -ge 2 ] || ! kill -0 $wpid 2>/dev/null; do sleep 1; done
kill $wpid 2>/dev/null; wait $wpid 2>/dev/null
echo "== watch done at $(( $(date +%s) - t0 )) s"
wait   # the background builds (each bounded by the budget)

# kernels per object: distinct host launch stubs (nvcc's guard variable of each __global__ instantiation's stub)
for f in "$FLASHBUILD_CACHE_DIR"/*/obj/*.o; do
  n=$(nm "$f" 2>/dev/null | grep -oE '_ZGVZL[0-9]+__device_stub__[A-Za-z0-9_]+' | sort -u | wc -l)
  echo "$(basename "$(dirname "$(dirname "$f")")")/$(basename "$f") $n"
done > "$OUT/kernels.txt"
for d in "$FLASHBUILD_CACHE_DIR"/*/; do [ -f "$d/.ninja_log" ] && cp "$d/.ninja_log" "$OUT/ninja_log-$(basename "$d")"; done
echo "== summary (wall s, rc)"; for w in "$OUT"/*.wall; do echo "$(basename "$w" .wall): $(cat "$w")"; done
echo "== kernels per object"; cat "$OUT/kernels.txt"
echo "== tests"; grep -E "flashbuild slice|collected|passed|failed|deselected" "$OUT/fa3-tests.txt" | tail -4
grep -E "^FAILED|^ERROR" "$OUT/fa3-tests.txt" | head -5 | cut -c1-300
echo "== watch"; grep -E "^\[" "$OUT/watch.txt" | cut -c1-400
mkdir -p "$RESULTS"; tar -czf "$RESULTS/logs.tgz" -C "$OUT" .
