#!/usr/bin/env bash
# The new defaults of 2026-11-29 (third session: the staged dK/dV at hdim 128, row limits and the idle-Q K^T skip in
# the hdim-64 causal forward) checked in one nvidia-h200 call: `flashbuild test --shapes full` of every variant they
# touch (all features), then the tests/gpu files that run those kernels (pytest-xdist, WORKERS workers on the one
# GPU), one line a test, until LIMIT seconds from the start. From the repo root, after the README's wheel install line:
#     LIMIT=300 OUT=$OUT bash benchmarks/checks/merged-9/call.sh      # results under $OUT, a short summary last
if [ "${1:-}" = -h ] || [ "${1:-}" = --help ]; then sed -n 2,6p "$0" | cut -c3-; exit 0; fi
LIMIT_DEFAULT=300; . benchmarks/checks/call_env.sh
export FLASHBUILD_CACHE_DIR=/tmp/fbc-suite
fbtest() {  # name, flashbuild test arguments
  local name=$1; shift
  timeout $(( $(left) - 30 )) python3 -m flashbuild test --arch sm90 --shapes full -j 16 "$@" > "$OUT/test-$name.txt" 2>&1
  local rc=$?
  echo "test-$name: $(grep -E 'passed, [0-9]+ failed' "$OUT/test-$name.txt" | tail -1) rc $rc at $(( $(date +%s) - t0 )) s"
}
fbtest bwd128 --hdim 128 --dtype fp16,bf16 --direction bwd --causal both
fbtest fwd64 --hdim 64 --dtype fp16,bf16 --direction fwd --causal on
FILES=${FILES:-"test_hopper_bwd_gpu test_bwd_deterministic_gpu test_fwd_causal_pairs_gpu test_hopper_varlen_bwd_gpu
  test_fwd_gpu test_hopper_varlen_gpu test_features_gpu test_softmax_extremes_gpu"}
PATHS=(); for f in $FILES; do PATHS+=("tests/gpu/$f.py"); done
timeout -s INT -k 20 $(( $(left) - 15 )) python3 -m pytest -v -rfE -p no:cacheprovider -n "${WORKERS:-6}" \
  --durations=15 "${PATHS[@]}" > "$OUT/pytest-gpu.txt" 2>&1
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
