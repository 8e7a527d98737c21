#!/usr/bin/env bash
# The merged tree of the 2026-11-29 fourth session (the cluster merge, w46x's kSkipIdleBlock) in one nvidia-h200 call:
# the tests/gpu files both touch (merged-8/call.sh, FILES below, SUITE_LIMIT seconds), then issue 45's decode table
# with the default (the cluster merge) beside lane-merge (the L2 tail), then the hdim-64 causal forward against SDPA
# at 1k-16k (flashbuild bench). From the repo root, after the README's wheel install line:
#     OUT=$OUT [SUITE_LIMIT=400] bash benchmarks/checks/merged-10/run.sh     # results under $OUT, a summary last
if [ "${1:-}" = -h ] || [ "${1:-}" = --help ]; then sed -n 2,6p "$0" | cut -c3-; exit 0; fi
set -u
: "${OUT:?set OUT to the output folder}"
mkdir -p "$OUT"
t0=$(date +%s); at() { echo "at $(( $(date +%s) - t0 )) s"; }
FILES="test_kvcache_gpu test_kvcache_decode_tile_gpu test_kvcache_descriptor_cache_gpu test_kvcache_index_checks_gpu
  test_kvcache_prefill_gpu test_graph_capture_gpu test_hostile_inputs_gpu test_api_gpu test_host_binding_gpu
  test_splitkv_streamk_gpu test_fwd_gpu test_fwd_causal_pairs_gpu test_hopper_varlen_gpu test_softmax_extremes_gpu
  test_fwd_packed_rows_gpu test_features_gpu test_persistent_fwd_gpu" LIMIT=${SUITE_LIMIT:-400} OUT="$OUT/suite" \
  bash benchmarks/checks/merged-8/call.sh > "$OUT/suite.txt" 2>&1
echo "== suite $(at)"
export FLASHBUILD_CACHE_DIR=/tmp/fbc-suite  # the suite's builds, where they serve
timeout 150 python3 benchmarks/decode/decode_table.py --reps 10 --skip-no-idx --paths lane-merge \
  --json "$OUT/table.json" > "$OUT/table.txt" 2>&1
echo "== table rc $? $(at)"
timeout 120 python3 -m flashbuild bench --hdim 64 --arch sm90 --direction fwd --dtype fp16 --features none \
  --causal on --seqlens 1024,4096,16384 --reps 10 > "$OUT/bench-fwd64.txt" 2>&1
echo "== bench rc $? $(at)"
tail -n 25 "$OUT/suite.txt"; tail -n 20 "$OUT/table.txt"; tail -n 15 "$OUT/bench-fwd64.txt"
