#!/usr/bin/env bash
# Issue 45's third H200 call: the three builds at once, then the prefill-chunk test (Hopper forward reading the
# checked indices), the decode table (eager fast path beside the op path), and the existing KV-cache GPU tests
# (tests/gpu/test_kvcache_gpu.py, its hostile values now raised by check_errors). Logs under $OUT.
set -u
OUT=${OUT:-serving-out}
mkdir -p "$OUT"
common="--dtype fp16 --arch native"
start=$(date +%s)
python3 -m flashbuild --hdim 64 --direction fwd,splitkv $common --causal off --no-local --no-softcap > "$OUT/build-h64.log" 2>&1 &
python3 -m flashbuild --hdim 64,128 --direction splitkv $common --causal off --no-local --no-softcap > "$OUT/build-bench.log" 2>&1 &
python3 -m flashbuild --hdim 64,128 --direction splitkv $common --causal both > "$OUT/build-kvcache.log" 2>&1 &
wait
echo "builds in $(( $(date +%s) - start ))s"
timeout 60 python3 -m pytest -q -rA -p no:cacheprovider \
  "tests/gpu/test_kvcache_index_checks_gpu.py::test_a_prefill_chunk_on_the_forward_kernel_reads_checked_indices[hopper]" \
  > "$OUT/prefill.log" 2>&1
echo "prefill test rc=$? at $(( $(date +%s) - start ))s"
timeout 60 python3 benchmarks/decode/decode_table.py --json "$OUT/decode_table.json" > "$OUT/decode_table.txt" 2>&1
echo "decode table rc=$? at $(( $(date +%s) - start ))s"
timeout 70 python3 -m pytest -q -rA -p no:cacheprovider tests/gpu/test_kvcache_gpu.py > "$OUT/kvcache.log" 2>&1
echo "kvcache tests rc=$? at $(( $(date +%s) - start ))s"
tail -n 3 "$OUT/prefill.log"
grep -E "^(FAILED|ERROR)|passed|failed" "$OUT/kvcache.log" | tail -n 12
tail -n 22 "$OUT/decode_table.txt"
