#!/bin/bash
# The Hopper backward's newer head dims (kernels/hopper/bwd_traits.h: 96 on BwdSplit::kKeys, 192 and 256
# on BwdSplit::kHeadDim) on the H200, one device call: the slice's build, `flashbuild test --shapes full`, the GPU
# tests (tests/gpu/test_hopper_bwd_gpu.py: long/odd/GQA/MQA shapes, and a profile showing the Hopper
# kernel ran), registers and spills, then `flashbuild bench` beside SDPA's flash and cuDNN. Logs under
# $OUT, a short summary last.
#   BUDGET=560 bash benchmarks/hopper_bwd_split/run.sh
set -o pipefail
export PYTHONUNBUFFERED=1 PYTHONPATH=${PYTHONPATH:+$PYTHONPATH:}$PWD PYTHONDONTWRITEBYTECODE=1
OUT=${OUT:-/tmp/hopper_bwd_split}; mkdir -p "$OUT"
export FLASHBUILD_CACHE_DIR=${FLASHBUILD_CACHE_DIR:-/tmp/fb-split-cache}
FB="python3 -m flashbuild"
t0=$(date +%s); now() { echo $(( $(date +%s) - t0 )); }
SEL=(--hdim "${HDIMS:-96,192,256}" --dtype fp16,bf16 --arch sm90 --direction bwd --features none)
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,temperature.gpu,power.draw --format=csv,noheader | tee "$OUT/gpu.txt"
timeout 260 $FB build "${SEL[@]}" > "$OUT/build.txt" 2>&1
echo "== build rc $? at $(now) s"; grep -E "^compiled|error" "$OUT/build.txt" | head -5
timeout 120 $FB inspect "${SEL[@]}" > "$OUT/inspect.txt" 2>&1
grep -E "hopper|REG|spill|bwd_hdim" "$OUT/inspect.txt" | head -20
timeout 150 $FB test "${SEL[@]}" --shapes full > "$OUT/test.txt" 2>&1
echo "== test rc $? at $(now) s"; grep -E "FAIL" "$OUT/test.txt" | head -8 | cut -c1-220; tail -2 "$OUT/test.txt"
timeout 200 python3 -m pytest -q -x -s tests/gpu/test_hopper_bwd_gpu.py -p no:cacheprovider > "$OUT/pytest.txt" 2>&1
echo "== pytest rc $? at $(now) s"; grep -E "hopper.*bwd_kernel|Error|assert" "$OUT/pytest.txt" | cut -c1-160 | head -8; tail -2 "$OUT/pytest.txt"
left=$(( ${BUDGET:-560} - $(now) - 5 ))
[ $left -gt 30 ] && (cd /tmp && timeout -s INT $left $FB bench "${SEL[@]}" --seqlens 1024,4096,16384 --reps 15 \
  --json "$OUT/bench.json") > "$OUT/bench.txt" 2>&1
echo "== bench at $(now) s"; grep -vE "^(measuring|using build|nothing to compile|not measured|  )" "$OUT/bench.txt" | tail -30
