#!/usr/bin/env bash
# The merged tree's second nvidia-h200 call: ours beside FA3 at hdim 128 (fp16, fwd+bwd, causal both, 1k/4k/16k),
# and the tests/gpu files the first call's time limit left unreached. Both builds for the bench run first, on the
# CPUs, with exactly the selections `flashbuild bench` loads (FA3's with its speed feature, cluster); the suite
# files run from the start in their own process group, stopped whole (SIGSTOP) while the bench times, then resumed
# until LIMIT. From the repo root, carrying .whl and .device/fa3, after the README's wheel install line:
#   LIMIT=340 OUT=$OUT bash benchmarks/checks/merged-6/peer_rest.sh      # results under $OUT, a short summary last
if [ "${1:-}" = -h ] || [ "${1:-}" = --help ]; then sed -n 2,7p "$0" | cut -c3-; exit 0; fi
LIMIT_DEFAULT=340; . benchmarks/checks/call_env.sh
OURS=(--hdim 128 --dtype fp16 --arch sm90 --direction fwd,bwd)
( export FLASHBUILD_CACHE_DIR=/tmp/fbc-peer
  timeout 260 python3 -m flashbuild build --source "$TREE" --profile flash-attn-3 "${OURS[@]}" --features cluster --jobs 8 \
    > "$OUT/build-fa3.txt" 2>&1; echo "rc $? at $(( $(date +%s) - t0 )) s" >> "$OUT/build-fa3.txt" ) &
fa3_build=$!
( export FLASHBUILD_CACHE_DIR=/tmp/fbc-peer
  timeout 260 python3 -m flashbuild build "${OURS[@]}" --features none --jobs 4 > "$OUT/build-ours.txt" 2>&1
  echo "rc $? at $(( $(date +%s) - t0 )) s" >> "$OUT/build-ours.txt" ) &
ours_build=$!
FILES="test_hostile_inputs_gpu test_api_gpu test_fwd_gpu test_features_gpu test_host_binding_gpu test_two_builds_gpu
  test_debug_loop_gpu"
PATHS=(); for f in $FILES; do PATHS+=("tests/gpu/$f.py"); done
setsid bash -c "FLASHBUILD_CACHE_DIR=/tmp/fbc-suite timeout -s INT -k 15 $(( LIMIT - 15 )) python3 -m pytest -q -rfE \
  -p no:cacheprovider -n ${WORKERS:-4} ${PATHS[*]} > $OUT/pytest-gpu.txt 2>&1;
  echo \"tests/gpu rc \$? at \$(( \$(date +%s) - $t0 )) s\" >> $OUT/pytest-gpu.txt" &
suite=$!
while { kill -0 $fa3_build 2>/dev/null || kill -0 $ours_build 2>/dev/null; } && (( $(left) > 70 )); do sleep 2; done
if ! kill -0 $fa3_build 2>/dev/null && ! kill -0 $ours_build 2>/dev/null; then
  kill -STOP -- -$suite 2>/dev/null; sleep 3
  echo "suite stopped at $(( $(date +%s) - t0 )) s for the peer bench" > "$OUT/peer.txt"
  (export FLASHBUILD_CACHE_DIR=/tmp/fbc-peer; cd /tmp && timeout -s INT -k 10 $(( $(left) - 15 )) \
    python3 -m flashbuild bench "${OURS[@]}" --features none --causal both --peer-source "$TREE" \
    --peer-profile flash-attn-3 --seqlens 1024,4096,16384 --reps 10 --json "$OUT/peer.json") >> "$OUT/peer.txt" 2>&1
  echo "peer rc $? at $(( $(date +%s) - t0 )) s" >> "$OUT/peer.txt"
  kill -CONT -- -$suite 2>/dev/null
else
  echo "peer builds not done with $(left) s left: no bench" > "$OUT/peer.txt"
fi
wait $suite
echo "== builds"; tail -1 "$OUT/build-fa3.txt"; tail -1 "$OUT/build-ours.txt"
echo "== tests/gpu"; grep -E "^(FAILED|ERROR)" "$OUT/pytest-gpu.txt" | cut -c1-240 | head -20; tail -2 "$OUT/pytest-gpu.txt"
echo "== peer"; grep -vE "^(measuring|using build|nothing to compile|not measured|  )" "$OUT/peer.txt" | tail -30
