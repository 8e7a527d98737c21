#!/usr/bin/env bash
# The merged tree of the 2026-11-29 second session (branches w45r, w46s, w46b, w46q) in one nvidia-h200 call: the
# tests/gpu files (pytest-xdist, WORKERS workers on the one GPU) the merges touch first, then the ones merged-7 did
# not reach or re-run, one line a test (-v) so that a call cut short still says which passed (FILES overrides the
# list). The peer table is peer.sh beside this. From the repo root, after the README's wheel install line:
#     LIMIT=400 OUT=$OUT bash benchmarks/checks/merged-8/call.sh      # results under $OUT, a short summary last
if [ "${1:-}" = -h ] || [ "${1:-}" = --help ]; then sed -n 2,6p "$0" | cut -c3-; exit 0; fi
LIMIT_DEFAULT=400; . benchmarks/checks/call_env.sh
FILES=${FILES:-"test_hopper_bwd_gpu test_bwd_deterministic_gpu test_fwd_gpu test_fwd_causal_pairs_gpu
  test_persistent_fwd_gpu test_fwd_wide_keys_gpu test_hopper_varlen_gpu test_hopper_varlen_bwd_gpu
  test_softmax_extremes_gpu test_fwd_packed_rows_gpu test_kvcache_prefill_gpu test_two_builds_gpu
  test_kvcache_decode_tile_gpu test_graph_capture_gpu test_api_gpu test_hostile_inputs_gpu test_features_gpu"}
PATHS=(); for f in $FILES; do PATHS+=("tests/gpu/$f.py"); done
FLASHBUILD_CACHE_DIR=/tmp/fbc-suite timeout -s INT -k 20 $(( LIMIT - 25 )) python3 -m pytest -v -rfE \
  -p no:cacheprovider -n "${WORKERS:-5}" --durations=15 "${PATHS[@]}" > "$OUT/pytest-gpu.txt" 2>&1
echo "tests/gpu rc $? at $(( $(date +%s) - t0 )) s" >> "$OUT/pytest-gpu.txt"
echo "== host"; cat "$OUT/host.txt"
echo "== tests/gpu by file (passed / failed / skipped / error)"
python3 - "$OUT/pytest-gpu.txt" <<'PY'
import collections, re, sys
count = collections.defaultdict(collections.Counter)
for line in open(sys.argv[1], errors="replace"):
    m = re.search(r"(PASSED|FAILED|SKIPPED|ERROR) (tests/gpu/\w+\.py)", line)
    if m:
        count[m.group(2)][m.group(1)] += 1
for name, c in count.items():
    print(f"{name}: {c['PASSED']} / {c['FAILED']} / {c['SKIPPED']} / {c['ERROR']}")
total = sum(count.values(), collections.Counter())
print(f"total: {total['PASSED']} passed, {total['FAILED']} failed, {total['SKIPPED']} skipped, {total['ERROR']} errors")
PY
grep -E "^(FAILED|ERROR)" "$OUT/pytest-gpu.txt" | cut -c1-240 | head -20; tail -2 "$OUT/pytest-gpu.txt"
