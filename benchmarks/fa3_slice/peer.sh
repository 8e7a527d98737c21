#!/bin/bash
# Our kernels and FA3's slice side by side in one `flashbuild bench` run on the H200 (issue 21's "measured
# peer"): hdim 64/128, fp16/bf16, fwd+bwd, causal both, against SDPA's flash, cuDNN and efficient backends.
# From the repository root, carrying .device/fa3 (the tree and its CUTLASS, git-ignored):
#   bash benchmarks/fa3_slice/peer.sh                 # BUDGET seconds in all (default 560); output under $OUT
# HDIMS, DTYPES, DIRECTION (default fwd,bwd: DIRECTION=fwd builds FA3's forward alone), SEQLENS, REPS narrow it;
# ALONE=S times each backend alone in windows of S seconds (`flashbuild bench --alone`) instead of --reps in turns.
# Our slice is built first (and checked with `flashbuild test`), then FA3's (features compiled out: the
# bench calls plain attention), then the bench; each phase under a timeout, a short summary last.
set -o pipefail
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH} PYTHONDONTWRITEBYTECODE=1
OUT=${OUT:-/tmp/fa3_peer_out}
BUDGET=${BUDGET:-560}
t0=$(date +%s); deadline=$((t0 + BUDGET))
left() { echo $((deadline - $(date +%s))); }
mkdir -p "$OUT" /tmp/fa3
TREE=/tmp/fa3/flash-attention-0251105a
[ -d "$TREE" ] || tar -C /tmp/fa3 -xzf .device/fa3/flash-attention-0251105a-hopper-cutlass-7127592.tar.gz || exit 1
export FLASHBUILD_CACHE_DIR=$PWD/.flashbuild-cache
FB="python3 -m flashbuild"
OURS=(--hdim "${HDIMS:-64,128}" --dtype "${DTYPES:-fp16,bf16}" --arch sm90 --direction "${DIRECTION:-fwd,bwd}" --features none)
PEER=(--source "$TREE" --profile flash-attn-3 --hdim "${HDIMS:-64,128}" --dtype "${DTYPES:-fp16,bf16}" --arch sm90
      --direction "${DIRECTION:-fwd,bwd}" --features none)
{ nvidia-smi --query-gpu=name,driver_version,clocks.sm,temperature.gpu --format=csv,noheader; echo "cores $(nproc)";
  python3 -c "import torch; print('torch', torch.__version__, 'cudnn', torch.backends.cudnn.version())"; } | tee "$OUT/host.txt"

timeout 150 $FB build "${OURS[@]}" > "$OUT/build-ours.txt" 2>&1
echo "== ours: build rc $? at $(( $(date +%s) - t0 )) s"; grep -E "^compiled|^extension|error" "$OUT/build-ours.txt" | head -5
timeout 60 $FB test "${OURS[@]}" --shapes quick > "$OUT/test-ours.txt" 2>&1
echo "== ours: test rc $? at $(( $(date +%s) - t0 )) s"; tail -2 "$OUT/test-ours.txt"
timeout $(( $(left) - 150 )) $FB build "${PEER[@]}" > "$OUT/build-fa3.txt" 2>&1
echo "== fa3: build rc $? at $(( $(date +%s) - t0 )) s"; grep -E "^compiled|^extension|error" "$OUT/build-fa3.txt" | head -5

TIMING=(--reps "${REPS:-15}"); [ -z "${ALONE:-}" ] || TIMING=(--alone "$ALONE")
(cd /tmp && timeout -s INT -k 10 $(( $(left) - 5 )) $FB bench "${OURS[@]}" --peer-source "$TREE" --peer-profile flash-attn-3 \
  --seqlens "${SEQLENS:-1024,4096,16384}" "${TIMING[@]}" --json "$OUT/bench.json") > "$OUT/bench.txt" 2>&1
echo "== bench rc $? at $(( $(date +%s) - t0 )) s"
grep -vE "^(measuring|using build|nothing to compile|not measured|  )" "$OUT/bench.txt" | tail -40
