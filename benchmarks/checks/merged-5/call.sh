#!/usr/bin/env bash
# The merged tree of issues 45 and 46 (branches w45g, w46b, w46p) in one nvidia-h200-x4 call, four jobs at once:
#   GPUs 0-2: the whole tests/gpu suite (pytest-xdist, WORKERS workers, one GPU each: merged-2/gpu_pin.py);
#   GPU 3:    in turn pairs_ab.sh (FLASHBUILD_HOPPER_FWD_PAIRS short against all, one build), issue 45's decode
#             table (decode_table.py), and `flashbuild bench` of ours beside FA3's slice (hopper/ 0251105a),
#             fwd+bwd, hdim 64/128 fp16; the decode build and both peer builds run on the CPUs from the start.
# GPU 3 runs no suite worker, but the benches share the host's CPUs with the suite's builds: eager (host-bound)
# decode columns are not comparable with a quiet host's; the kernel and graph-replayed columns are. From the repo root, carrying .whl and .device/fa3, after the README's wheel
# install line:
#   LIMIT=450 bash benchmarks/checks/merged-5/call.sh        # results under $OUT, a short summary last
if [ "${1:-}" = -h ] || [ "${1:-}" = --help ]; then sed -n 2,11p "$0" | cut -c3-; exit 0; fi
LIMIT_DEFAULT=450; . benchmarks/checks/call_env.sh
PEER_ARGS=(--hdim 64,128 --dtype fp16 --arch sm90 --direction fwd,bwd --features none)

# FA3's slice and ours for the peer bench: built on the CPUs from the start.
( export FLASHBUILD_CACHE_DIR=/tmp/fbc-peer
  timeout 240 python3 -m flashbuild build "${PEER_ARGS[@]}" --jobs 6 > "$OUT/build-ours-peer.txt" 2>&1
  timeout 300 python3 -m flashbuild build --source "$TREE" --profile flash-attn-3 "${PEER_ARGS[@]}" --jobs 10 \
    > "$OUT/build-fa3.txt" 2>&1; echo "rc $? at $(( $(date +%s) - t0 )) s" >> "$OUT/build-fa3.txt" ) &
peer_build=$!

# The suite on GPUs 0-2.
( export FLASHBUILD_CACHE_DIR=/tmp/fbc-suite GPU_PIN_COUNT=3 PYTHONPATH="$PWD/benchmarks/checks/merged-2:${PYTHONPATH:-}"
  timeout -s INT -k 20 $(( LIMIT - 25 )) python3 -m pytest -q -rfE -p no:cacheprovider -p gpu_pin -n "${WORKERS:-9}" \
    --durations=20 tests/gpu > "$OUT/pytest-gpu.txt" 2>&1
  echo "tests/gpu rc $? in $(( $(date +%s) - t0 )) s" >> "$OUT/pytest-gpu.txt" ) &
suite=$!

# The decode build on the CPUs from the start (its table runs on GPU 3 after the pairs).
( export FLASHBUILD_CACHE_DIR=/tmp/fbc-decode
  timeout 200 python3 -m flashbuild --hdim 64,128 --direction splitkv --dtype fp16 --arch native --causal off \
    --no-local --no-softcap --jobs 6 > "$OUT/build-decode.txt" 2>&1 ) &
decode_build=$!

# GPU 3: pairs A/B, then the peer bench.
( export CUDA_VISIBLE_DEVICES=3 FLASHBUILD_CACHE_DIR=/tmp/fbc-pairs
  OUT="$OUT/pairs" BUDGET=70 bash benchmarks/fwd_tile_turnover/pairs_ab.sh --settings short,all --hdim 64,128,256 \
    --dtype fp16 --seqlens 1024,4096,16384 --rounds 2 > "$OUT/pairs.txt" 2>&1
  while kill -0 $decode_build 2>/dev/null && (( $(left) > 200 )); do sleep 2; done
  FLASHBUILD_CACHE_DIR=/tmp/fbc-decode timeout $(( $(left) - 150 )) python3 benchmarks/decode/decode_table.py --reps 10 \
    --paths "" --skip-no-idx --json "$OUT/decode.json" > "$OUT/decode.txt" 2>&1
  echo "decode rc $? at $(( $(date +%s) - t0 )) s" >> "$OUT/decode.txt"
  while kill -0 $peer_build 2>/dev/null && (( $(left) > 100 )); do sleep 5; done
  export FLASHBUILD_CACHE_DIR=/tmp/fbc-peer
  (cd /tmp && timeout -s INT -k 10 $(( $(left) - 10 )) python3 -m flashbuild bench "${PEER_ARGS[@]}" \
    --peer-source "$TREE" --peer-profile flash-attn-3 --seqlens 4096,16384 --reps 10 --json "$OUT/peer.json") \
    > "$OUT/peer.txt" 2>&1; echo "peer rc $? at $(( $(date +%s) - t0 )) s" >> "$OUT/peer.txt" ) &
wait
echo "== host"; cat "$OUT/host.txt"
echo "== tests/gpu"; grep -E "^(FAILED|ERROR)" "$OUT/pytest-gpu.txt" | cut -c1-240 | head -20; tail -2 "$OUT/pytest-gpu.txt"
echo "== fa3 build"; tail -1 "$OUT/build-fa3.txt"
echo "== pairs"; tail -25 "$OUT/pairs.txt"
echo "== decode"; grep -E "^HBM|^\| (64|128) |rc" "$OUT/decode.txt" | head -24
echo "== peer"; grep -vE "^(measuring|using build|nothing to compile|not measured|  )" "$OUT/peer.txt" | tail -20
