#!/bin/bash
# Issue 46, the Hopper forward's tile turnover (sO in V's ring, causal pairs; README.md) on the H200 in one call:
# builds the new tree, the base tree (BASE, main before the change) and FA3's forward slice side by side; checks
# the new tree (`flashbuild test --shapes full`, the pairs and persistent GPU tests); ncu counters of one 1k causal
# call per tree; then `flashbuild bench` of base, new and alt (new without pairs) in turns (fp16, cuDNN beside) and, through
# ../fa3_slice/peer.sh, new beside FA3 (hdim 64/128/256, fp16 and bf16, forward).
# From the new tree's root on the GPU machine, carrying the trees (git-ignored):
#   git archive <base commit> kernels flashbuild templates configs pyproject.toml | tar -x -C .device/w46p/base
#   OUT=$OUT BASE=../base FA3_TAR=../../fa3/flash-attention-0251105a-hopper-cutlass-7127592.tar.gz \
#     bash benchmarks/fwd_tile_turnover/run.sh         # everything under $OUT; BUDGET (s, 380): no A/B round after it
if [ "$1" = -h ] || [ "$1" = --help ]; then sed -n 2,10p "$0" | cut -c3-; exit 0; fi
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site "${WHL:-../../../.whl}"/*.whl 2>/dev/null
export PYTHONUNBUFFERED=1 PYTHONDONTWRITEBYTECODE=1 PYTHONPATH=/tmp/site:$PWD
OUT=${OUT:-/tmp/turnover_out}; W=$OUT/work; mkdir -p "$W" /tmp/fa3; BUDGET=${BUDGET:-380}; REPS=${REPS:-15}
t0=$(date +%s); at() { echo "at $(( $(date +%s) - t0 )) s"; }
BASE=${BASE:-../base}
TREE=/tmp/fa3/flash-attention-0251105a
[ -d "$TREE" ] || tar -C /tmp/fa3 -xzf "${FA3_TAR:?the FA3 tarball (.device/fa3)}" || exit 1
AB="--hdim 64,128,192,256 --dtype fp16 --arch sm90 --direction fwd --causal both --no-local --no-softcap"
PEER="--hdim 64,128,256 --dtype fp16,bf16 --arch sm90 --direction fwd --features none"
PEERC=$PWD/.flashbuild-cache  # peer.sh's cache
fb_new() { local limit=$1; shift; FLASHBUILD_CACHE_DIR=/tmp/fbc_new timeout "$limit" python3 -m flashbuild "$@"; }
# alt: the new tree without pairs (longest first alone), to tell sO in V's ring from the pairs at hdim 192/256.
ALT="--hdim 192,256 --dtype fp16 --arch sm90 --direction fwd --causal on --no-local --no-softcap
  --nvcc-flag=-DFLASHBUILD_HOPPER_FWD_PAIR_MAX_BLOCKS=0"
fb_alt() { local limit=$1; shift; FLASHBUILD_CACHE_DIR=/tmp/fbc_alt timeout "$limit" python3 -m flashbuild "$@"; }
fb_base() { local limit=$1; shift; (cd "$BASE" && PYTHONPATH=/tmp/site:$PWD FLASHBUILD_CACHE_DIR=/tmp/fbc_base \
  timeout "$limit" python3 -m flashbuild "$@"); }
nvidia-smi --query-gpu=name,driver_version,clocks.sm,temperature.gpu --format=csv,noheader | tee "$W/gpu.txt"
# FA3's forward and our slice of the same selection into peer.sh's cache, beside the A/B builds.
(FLASHBUILD_CACHE_DIR=$PEERC timeout 300 python3 -m flashbuild build --source "$TREE" --profile flash-attn-3 $PEER -j 7 \
  > "$W/build-fa3.txt" 2>&1; echo "== rc $?" >> "$W/build-fa3.txt") & fa3=$!
(FLASHBUILD_CACHE_DIR=$PEERC timeout 200 python3 -m flashbuild build $PEER -j 3 > "$W/build-peer-ours.txt" 2>&1) & peer=$!
fb_new 200 build $AB -j 6 > "$W/build-new.txt" 2>&1 & new=$!
fb_base 200 build $AB -j 4 > "$W/build-base.txt" 2>&1 & base=$!
fb_alt 200 build $ALT -j 2 > "$W/build-alt.txt" 2>&1 & alt=$!
wait $new; echo "== new built $(at): $(grep -E '^compiled|rror' "$W/build-new.txt" | head -2)"
# Checks of the new tree while the rest builds (the GPU is idle meanwhile; the checks share it).
(fb_new 120 test $AB --shapes full > "$W/test-new.txt" 2>&1; echo "== rc $?" >> "$W/test-new.txt") & t1=$!
(FLASHBUILD_CACHE_DIR=/tmp/fbc_new timeout 150 python3 -m pytest -q -rs -p no:cacheprovider \
  tests/gpu/test_fwd_causal_pairs_gpu.py tests/gpu/test_persistent_fwd_gpu.py > "$W/pytest-new.txt" 2>&1
 echo "== rc $?" >> "$W/pytest-new.txt") & t2=$!
wait $peer; echo "== peer-ours built $(at)"
(FLASHBUILD_CACHE_DIR=$PEERC timeout 120 python3 -m flashbuild test $PEER --shapes full > "$W/test-new-peer.txt" 2>&1
 echo "== rc $?" >> "$W/test-new-peer.txt") & t3=$!
wait $t1 $t2 $t3 $base $alt; echo "== checks done, base built $(at)"
for f in test-new test-new-peer pytest-new; do echo "$f: $(grep -E 'passed|failed' "$W/$f.txt" | tail -1) $(tail -1 "$W/$f.txt")"; done
# ncu: DRAM bytes, L2 hit rate and tensor-pipe activity of one 1k causal call (b16, 2048 / hdim heads) per tree.
if command -v ncu > /dev/null; then
  for v in base new; do
    dir=.; [ $v = base ] && dir=$BASE
    (cd "$dir" && PYTHONPATH=/tmp/site:$PWD FLASHBUILD_CACHE_DIR=/tmp/fbc_$v timeout 45 ncu --clock-control none -k regex:fwd_kernel \
      --metrics gpu__time_duration.sum,dram__bytes_read.sum,lts__t_sector_hit_rate.pct,sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active \
      python3 "$OLDPWD/benchmarks/fwd_tile_turnover/one_call.py" --hdim 128,256) > "$W/ncu-$v.txt" 2>&1
    echo "== ncu $v rc $? $(at)"; done
fi
wait $fa3; echo "== fa3 built $(at): $(grep -E '^compiled|^== rc' "$W/build-fa3.txt" | tr '\n' ' ')"
for r in 1 2; do
  for v in base new alt; do
    sel=$AB; [ $v = alt ] && sel=$ALT
    fb_$v 100 bench $sel --seqlens 1024,4096,16384 --reps "$REPS" --json "$W/bench-$v-$r.json" > "$W/bench-$v-$r.txt" 2>&1
    echo "== bench $v r$r rc $? $(at)"; done
  if [ $r = 1 ]; then  # ours beside FA3 (and SDPA) in one run, before a second A/B round that may not fit
    OUT=$W/peer BUDGET=200 HDIMS=64,128,256 DTYPES=fp16,bf16 DIRECTION=fwd \
      REPS=$REPS bash benchmarks/fa3_slice/peer.sh > "$W/peer.txt" 2>&1; echo "== peer rc $? $(at)"
  fi
  [ $(( $(date +%s) - t0 )) -gt "$BUDGET" ] && { echo "== budget: no second A/B round"; break; }
done
python3 benchmarks/fwd_softmax_overlap/rows.py "$W" base new alt > "$OUT/rows.txt"
python3 benchmarks/fwd_tile_turnover/peer_rows.py "$W/peer/bench.json" > "$OUT/peer_rows.txt"
tar -czf "$OUT/results.tgz" -C "$W" . && rm -rf "$W"   # the run tool brings back a few files only
echo "== $(at)"; cat "$OUT/rows.txt" "$OUT/peer_rows.txt"
