#!/usr/bin/env bash
# Issue 45's acceptance instrument on the current tree, one nvidia-h200 call (README.md, h200-5): the builds, the
# graph-capture and index-check GPU files (both kernel families), then the whole decode table (every hdim, batch and
# cache of the issue, eager and graph-replayed, SDPA flash and cuDNN beside, HBM copy measured in the same run).
# From the repo root after the wheel line:   OUT=$OUT [REPS=10] bash benchmarks/decode_paired_heads/table.sh
. "$(dirname "$0")/../study_start.sh"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv > "$OUT/builds.txt" 2>&1
python3 -m flashbuild --hdim 64,128 --direction splitkv --dtype fp16 --arch native --causal off --no-local \
  --no-softcap --jobs 6 > /tmp/b1.log 2>&1 &
python3 -m flashbuild --hdim 64 --direction fwd,splitkv --dtype fp16 --arch native --causal off --no-local \
  --no-softcap --jobs 4 > /tmp/b2.log 2>&1 &
python3 -m flashbuild --hdim 192 --direction splitkv --dtype fp16 --arch native --causal off --no-local \
  --no-softcap --jobs 6 > /tmp/b3.log 2>&1 &
wait; cat /tmp/b1.log /tmp/b2.log /tmp/b3.log >> "$OUT/builds.txt"; echo "== builds $(at)"
timeout 200 python3 -m pytest -q -p no:cacheprovider -rfE tests/gpu/test_graph_capture_gpu.py \
  tests/gpu/test_kvcache_index_checks_gpu.py > "$OUT/tests.txt" 2>&1
echo "== tests rc $? $(at)"; tail -n 3 "$OUT/tests.txt"
timeout 300 python3 benchmarks/decode/decode_table.py --reps "${REPS:-10}" --skip-no-idx --json "$OUT/table.json" \
  > "$OUT/table.txt" 2>&1
echo "== table rc $? $(at)"
tail -n 22 "$OUT/table.txt"
