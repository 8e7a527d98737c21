#!/bin/bash
# Arms of the Hopper backward (nvcc defines) timed in `flashbuild bench`'s own protocol, the one issue 46's FA3
# table uses: each arm built into its own build, then ROUNDS rounds of one `flashbuild bench` a arm (in turns with
# SDPA's flash and cuDNN inside each run), the arms' order rotated each round. Then bench_turns.py: each arm's median
# TFLOPS over the rounds against base's, raw and as ours / cuDNN. An arm is NAME or NAME=FLAG[,FLAG...] (nvcc
# flags). TEST=1 runs `flashbuild test --shapes full` on each arm's build first (TEST=NAME[,NAME...]: on those arms'
# only). From the repo root on the GPU host after the README's wheel line:
#   OUT=$OUT [LIMIT=560] HDIMS=64 CAUSAL=on DTYPES=fp16 ROUNDS=4 ARMS="base vec=-DFLASHBUILD_HOPPER_BWD_DKV_VEC=1" \
#     bash benchmarks/hopper_bwd_bench_turns/run.sh
if [ "${1:-}" = -h ] || [ "${1:-}" = --help ]; then sed -n 2,9p "$0" | cut -c3-; exit 0; fi
set -u
export PYTHONUNBUFFERED=1 PYTHONDONTWRITEBYTECODE=1
OUT=${OUT:-/tmp/bench_turns}; mkdir -p "$OUT"
LIMIT=${LIMIT:-560}; t0=$(date +%s); left() { echo $(( LIMIT - ($(date +%s) - t0) )); }
HDIMS=${HDIMS:-64}; CAUSAL=${CAUSAL:-both}; DTYPES=${DTYPES:-fp16}; ROUNDS=${ROUNDS:-4}
SEQLENS=${SEQLENS:-1024,4096,16384}; REPS=${REPS:-10}
ARMS=${ARMS:-"base vec=-DFLASHBUILD_HOPPER_BWD_DKV_VEC=1"}
SEL=(--hdim "$HDIMS" --dtype "$DTYPES" --arch sm90 --direction bwd --causal "$CAUSAL" --features none)
names=(); flags=()
for arm in $ARMS; do names+=("${arm%%=*}"); [ "$arm" = "${arm#*=}" ] && flags+=("") || flags+=("${arm#*=}"); done
nflag() { local f; IFS=, read -r -a f <<< "${flags[$1]}"; for x in "${f[@]}"; do echo "--nvcc-flag=$x"; done; }
{ nvidia-smi --query-gpu=name,driver_version,clocks.sm,temperature.gpu --format=csv,noheader; echo "cores $(nproc)"
  python3 -c "import torch; print('torch', torch.__version__, 'cudnn', torch.backends.cudnn.version())"
  git log --oneline -1 2>/dev/null; } > "$OUT/host.txt" 2>&1
jobs_each=$(( $(nproc) / ${#names[@]} )); pids=()
for i in "${!names[@]}"; do
  ( timeout $(( LIMIT - 60 )) python3 -m flashbuild build "${SEL[@]}" $(nflag "$i") --jobs "$jobs_each" \
      > "$OUT/build-${names[$i]}.txt" 2>&1
    echo "rc $? at $(( $(date +%s) - t0 )) s" >> "$OUT/build-${names[$i]}.txt" ) &
  pids+=($!)
done
wait "${pids[@]}"
echo "== builds"
for n in "${names[@]}"; do echo "$n: $(grep -E '^compiled' "$OUT/build-$n.txt") $(tail -1 "$OUT/build-$n.txt")"; done
if [ "${TEST:-0}" != 0 ]; then  # each arm's build checked first: `flashbuild test --shapes full` (the correctness rule)
  for i in "${!names[@]}"; do
    [ "$TEST" = 1 ] || [[ ",$TEST," == *",${names[$i]},"* ]] || continue
    timeout $(( $(left) - 30 )) python3 -m flashbuild test "${SEL[@]}" $(nflag "$i") --shapes full \
      > "$OUT/test-${names[$i]}.txt" 2>&1
    echo "== test ${names[$i]}: rc $? $(tail -1 "$OUT/test-${names[$i]}.txt")"
  done
fi
for r in $(seq 1 "$ROUNDS"); do
  for k in "${!names[@]}"; do
    i=$(( (k + r - 1) % ${#names[@]} ))
    (( $(left) > 30 )) || { echo "== round $r ${names[$i]}: $(left) s left, not run"; continue; }
    (cd /tmp && timeout -s INT -k 10 $(( $(left) - 10 )) python3 -m flashbuild bench "${SEL[@]}" $(nflag "$i") \
      --seqlens "$SEQLENS" --reps "$REPS" --json "$OUT/r$r-${names[$i]}.json") > "$OUT/r$r-${names[$i]}.txt" 2>&1
    echo "== round $r ${names[$i]}: rc $? at $(( $(date +%s) - t0 )) s"
  done
done
python3 benchmarks/hopper_bwd_bench_turns/bench_turns.py "$OUT" "${names[@]}" | tee "$OUT/table.txt"
(cd "$OUT" && shopt -s nullglob && logs=(build-*.txt test-*.txt r*-*.txt r*-*.json) && tar -czf logs.tgz "${logs[@]}" &&
  rm -f "${logs[@]}")
