#!/usr/bin/env bash
# Issue 45, "A stream-K deal" (README.md): one GPU call on this tree. The default build times the stream-K deal
# (FLASHBUILD_SPLITKV_DEAL=streamk: the `deal=streamk` column) beside the splits in the same process, on the decode
# tile (the default) and on the 64-row tile (`tile=rows64`, `deal=streamk+tile=rows64`).
# Steps, each bounded so the whole stays under DEADLINE seconds: the builds (bench, the KV-cache tests' fp16 build
# with causal, the bf16 one); the stream-K GPU tests (both tiles against the fp32 reference) and the decode tile's
# (the splits, unchanged); the table on a host running nothing else; the KV-cache, one-launch and kept-descriptor
# tests. Logs under $OUT/r (tarred to $OUT/r.tar.gz), the short tables last. Run from the tree's root.
# The deal was taken out of main after run 14 (README.md, "A stream-K deal"): run this from the last commit that has
# it (3a46448); on a tree without kernels/common/splitkv_streamk.h it stops at once and says so.
set -u
if [ ! -f kernels/common/splitkv_streamk.h ]; then
  echo "streamk_run.sh: this tree ($PWD) has no stream-K deal (kernels/common/splitkv_streamk.h): it was taken out of" \
       "main after issue 45's run 14. Run it from the last commit that has it:" \
       "git worktree add /tmp/streamk 3a46448 && cd /tmp/streamk && bash benchmarks/decode/streamk_run.sh" >&2
  exit 2
fi
OUT=${OUT:-streamk-run}
R=${R:-/tmp/r-streamk}
rm -rf "$R"
mkdir -p "$R" "$OUT"
DEADLINE=${DEADLINE:-300}
start=$(date +%s)
since() { echo "$(( $(date +%s) - start ))s"; }
left() { local rest=$(( DEADLINE - ($(date +%s) - start) )); (( rest < $1 )) && echo $(( rest > 1 ? rest : 1 )) || echo "$1"; }
export FLASHBUILD_CACHE_DIR=${FLASHBUILD_CACHE_DIR:-/tmp/fbc}
plain="--dtype fp16 --arch native --causal off --no-local --no-softcap"
fb="python3 -m flashbuild"
timeout "$(left 110)" $fb --hdim 64,128 --direction splitkv $plain --jobs 4 > "$R/build-bench.log" 2>&1 &
timeout "$(left 110)" $fb --hdim 64,128 --direction splitkv --dtype fp16 --arch native --causal both --jobs 9 \
  > "$R/build-tests.log" 2>&1 &
timeout "$(left 110)" $fb --hdim 64,128 --direction splitkv --dtype bf16 --arch native --causal off --no-local \
  --no-softcap --jobs 3 > "$R/build-bf16.log" 2>&1 &
wait
echo "builds done at $(since)"
for f in "$R"/build-*.log; do echo "$f: $(tail -n 1 "$f")"; done
py="python3 -m pytest -q -rfE -p no:cacheprovider"
timeout "$(left 60)" $py tests/gpu/test_splitkv_streamk_gpu.py > "$R/streamk-tests.log" 2>&1
echo "stream-K tests rc=$? at $(since)"
timeout "$(left 110)" python3 benchmarks/decode/decode_table.py --reps 10 \
  --paths deal=streamk,tile=rows64,deal=streamk+tile=rows64 --skip-no-idx \
  --json "$R/decode_table.json" > "$R/decode_table.txt" 2>&1
echo "table rc=$? at $(since)"
timeout "$(left 40)" $py tests/gpu/test_kvcache_decode_tile_gpu.py tests/gpu/test_kvcache_gpu.py \
  tests/gpu/test_kvcache_one_launch_gpu.py tests/gpu/test_kvcache_descriptor_cache_gpu.py > "$R/kvcache-tests.log" 2>&1
echo "kvcache tests rc=$? at $(since)"
tar -czf "$OUT/r.tar.gz" -C "$(dirname "$R")" "$(basename "$R")"
cp "$R/decode_table.txt" "$R/decode_table.json" "$R/streamk-tests.log" "$R/kvcache-tests.log" "$OUT/" 2>/dev/null
echo "== stream-K tests"; grep -E "^(FAILED|ERROR)|passed|failed|Error" "$R/streamk-tests.log" | tail -n 12
echo "== kvcache tests"; grep -E "^(FAILED|ERROR)|passed|failed" "$R/kvcache-tests.log" | tail -n 8
echo "== table"; grep -E "^(\||HBM|max)" "$R/decode_table.txt"
