#!/usr/bin/env bash
# The merged tree of issues 45 and 46 (branches w45h, w46c, w46n, w46e) in one nvidia-h200 call (one GPU):
#   from the start: FA3's slice (hopper/ 0251105a) and ours built for the peer bench on the CPUs, and the
#   tests/gpu suite (pytest-xdist, WORKERS workers on the one GPU, the files the merge touches first) until
#   LIMIT; once both peer builds are done the suite is stopped (SIGSTOP, its whole process group), the peer
#   bench (`flashbuild bench`, ours beside FA3 and SDPA, fp16, hdim 64/128, fwd+bwd, causal both) runs on the
#   idle GPU, and the suite goes on (SIGCONT). From the repo root, carrying .whl and .device/fa3, after the
#   README's wheel install line:
#     LIMIT=470 OUT=$OUT bash benchmarks/checks/merged-6/call.sh      # results under $OUT, a short summary last
if [ "${1:-}" = -h ] || [ "${1:-}" = --help ]; then sed -n 2,9p "$0" | cut -c3-; exit 0; fi
LIMIT_DEFAULT=470; . benchmarks/checks/call_env.sh
PEER_ARGS=(--hdim 64,128 --dtype fp16 --arch sm90 --direction fwd,bwd --features none)

( export FLASHBUILD_CACHE_DIR=/tmp/fbc-peer
  timeout 300 python3 -m flashbuild build --source "$TREE" --profile flash-attn-3 "${PEER_ARGS[@]}" --jobs 8 \
    > "$OUT/build-fa3.txt" 2>&1; echo "rc $? at $(( $(date +%s) - t0 )) s" >> "$OUT/build-fa3.txt" ) &
fa3_build=$!
( export FLASHBUILD_CACHE_DIR=/tmp/fbc-peer
  timeout 300 python3 -m flashbuild build "${PEER_ARGS[@]}" --jobs 4 > "$OUT/build-ours.txt" 2>&1
  echo "rc $? at $(( $(date +%s) - t0 )) s" >> "$OUT/build-ours.txt" ) &
ours_build=$!

# The suite, in its own process group (setsid) so that it can be stopped and resumed whole.
FILES="test_fwd_wide_keys_gpu test_fwd_causal_pairs_gpu test_hopper_bwd_gpu test_hopper_varlen_gpu test_fwd_packed_rows_gpu
  test_kvcache_descriptor_cache_gpu test_kvcache_one_launch_gpu test_kvcache_gpu test_kvcache_index_checks_gpu
  test_graph_capture_gpu test_kvcache_prefill_gpu test_softmax_extremes_gpu test_persistent_fwd_gpu
  test_hopper_varlen_bwd_gpu test_bwd_deterministic_gpu test_hostile_inputs_gpu test_fwd_gpu test_api_gpu
  test_features_gpu test_host_binding_gpu test_two_builds_gpu test_debug_loop_gpu"
PATHS=(); for f in $FILES; do PATHS+=("tests/gpu/$f.py"); done
setsid bash -c "FLASHBUILD_CACHE_DIR=/tmp/fbc-suite timeout -s INT -k 20 $(( LIMIT - 20 )) python3 -m pytest -q -rfE \
  -p no:cacheprovider -n ${WORKERS:-5} --durations=15 ${PATHS[*]} > $OUT/pytest-gpu.txt 2>&1;
  echo \"tests/gpu rc \$? at \$(( \$(date +%s) - $t0 )) s\" >> $OUT/pytest-gpu.txt" &
suite=$!

while { kill -0 $fa3_build 2>/dev/null || kill -0 $ours_build 2>/dev/null; } && (( $(left) > 150 )); do sleep 2; done
if ! kill -0 $fa3_build 2>/dev/null && ! kill -0 $ours_build 2>/dev/null; then
  kill -STOP -- -$suite 2>/dev/null; sleep 3
  echo "suite stopped at $(( $(date +%s) - t0 )) s for the peer bench" > "$OUT/peer.txt"
  (export FLASHBUILD_CACHE_DIR=/tmp/fbc-peer; cd /tmp && timeout -s INT -k 10 $(( $(left) > 170 ? 160 : $(left) - 10 )) \
    python3 -m flashbuild bench "${PEER_ARGS[@]}" --causal both --peer-source "$TREE" --peer-profile flash-attn-3 \
    --seqlens 1024,4096,16384 --reps 10 --json "$OUT/peer.json") >> "$OUT/peer.txt" 2>&1
  echo "peer rc $? at $(( $(date +%s) - t0 )) s" >> "$OUT/peer.txt"
  kill -CONT -- -$suite 2>/dev/null
else
  echo "peer builds not done with $(left) s left: no bench" > "$OUT/peer.txt"
fi
wait $suite
echo "== host"; cat "$OUT/host.txt"
echo "== builds"; tail -1 "$OUT/build-fa3.txt"; tail -1 "$OUT/build-ours.txt"
echo "== tests/gpu"; grep -E "^(FAILED|ERROR)" "$OUT/pytest-gpu.txt" | cut -c1-240 | head -20; tail -3 "$OUT/pytest-gpu.txt"
echo "== peer"; grep -vE "^(measuring|using build|nothing to compile|not measured|  )" "$OUT/peer.txt" | tail -45
