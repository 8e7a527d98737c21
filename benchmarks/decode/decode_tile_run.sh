#!/usr/bin/env bash
# Issue 45, "A decode tile: keys in wgmma's M" (README.md), runs 12 and 13: one GPU call on this tree. The default build
# (the decode tile where it serves a call, kernels/hopper/splitkv_decode_launch.h) A/Bs the 64-row tile in the same
# process (FLASHBUILD_SPLITKV_TILE=rows64: the `tile=rows64` column), and a study build with nvcc flag $STUDY is the
# `study` column (run 12: -DFLASHBUILD_HOPPER_DECODE_ROWS=8, the 16-row tile the default then; run 13:
# -DFLASHBUILD_HOPPER_DECODE_STAGES_HDIM64=2, the 8-row tile with three stages at hdim 64 the default).
# Steps, each bounded so the whole stays under DEADLINE seconds: the builds (bench, study, the KV-cache tests' fp16
# build, the decode tile tests' bf16 one); the decode tile's GPU tests (both tiles against the fp32 reference); the
# table on a host running nothing else; test_kvcache_gpu.py, the one-launch and kept-descriptor tests (the decode
# tile is their default now); flashbuild test's split-KV checks with what time is left. Logs under $OUT/r (tarred to
# $OUT/r.tar.gz), the short tables last. Run from the tree's root.
set -u
OUT=${OUT:-decode-tile-run}
R=${R:-/tmp/r-decode-tile}
rm -rf "$R"
mkdir -p "$R" "$OUT"
DEADLINE=${DEADLINE:-235}
start=$(date +%s)
since() { echo "$(( $(date +%s) - start ))s"; }
left() { local rest=$(( DEADLINE - ($(date +%s) - start) )); (( rest < $1 )) && echo $(( rest > 1 ? rest : 1 )) || echo "$1"; }
export FLASHBUILD_CACHE_DIR=${FLASHBUILD_CACHE_DIR:-/tmp/fbc}
STUDY=${STUDY:--DFLASHBUILD_HOPPER_DECODE_STAGES_HDIM64=2}
plain="--dtype fp16 --arch native --causal off --no-local --no-softcap"
fb="python3 -m flashbuild"
timeout "$(left 110)" $fb --hdim 64,128 --direction splitkv $plain --jobs 3 > "$R/build-bench.log" 2>&1 &
timeout "$(left 110)" $fb --hdim 64,128 --direction splitkv $plain --nvcc-flag=$STUDY --jobs 2 \
  > "$R/build-study.log" 2>&1 &
timeout "$(left 110)" $fb --hdim 64,128 --direction splitkv --dtype fp16 --arch native --causal both --jobs 9 \
  > "$R/build-tests.log" 2>&1 &
timeout "$(left 110)" $fb --hdim 64,128 --direction splitkv --dtype bf16 --arch native --causal off --no-local \
  --no-softcap --jobs 2 > "$R/build-bf16.log" 2>&1 &
wait
echo "builds done at $(since)"
for f in "$R"/build-*.log; do echo "$f: $(tail -n 1 "$f")"; done
py="python3 -m pytest -q -rfE -p no:cacheprovider -x"
timeout "$(left 45)" $py tests/gpu/test_kvcache_decode_tile_gpu.py > "$R/decode-tile-tests.log" 2>&1
echo "decode tile tests rc=$? at $(since)"
study=""
grep -q "^extension" "$R/build-study.log" && study="--study-nvcc-flag=$STUDY"
timeout "$(left 110)" python3 benchmarks/decode/decode_table.py --reps 10 --paths tile=rows64 --skip-no-idx $study \
  --json "$R/decode_table.json" > "$R/decode_table.txt" 2>&1
echo "table rc=$? at $(since)"
timeout "$(left 50)" python3 -m pytest -q -rfE -p no:cacheprovider tests/gpu/test_kvcache_gpu.py \
  tests/gpu/test_kvcache_one_launch_gpu.py tests/gpu/test_kvcache_descriptor_cache_gpu.py > "$R/kvcache-tests.log" 2>&1
echo "kvcache tests rc=$? at $(since)"
timeout "$(left 40)" $fb test --hdim 64,128 --direction splitkv --dtype fp16 --arch native --causal both \
  --shapes quick > "$R/flashbuild-test.log" 2>&1
echo "flashbuild test rc=$? at $(since)"
tar -czf "$OUT/r.tar.gz" -C "$(dirname "$R")" "$(basename "$R")"
cp "$R/decode_table.txt" "$R/decode_table.json" "$R/decode-tile-tests.log" "$R/kvcache-tests.log" \
  "$R/flashbuild-test.log" "$OUT/" 2>/dev/null
echo "== decode tile tests"; grep -E "^(FAILED|ERROR)|passed|failed|Error" "$R/decode-tile-tests.log" | tail -n 8
echo "== kvcache tests"; grep -E "^(FAILED|ERROR)|passed|failed" "$R/kvcache-tests.log" | tail -n 6
echo "== flashbuild test"; grep -E "passed|failed|FAIL" "$R/flashbuild-test.log" | tail -n 4
echo "== table"; grep -E "^(\||HBM|max)" "$R/decode_table.txt"
