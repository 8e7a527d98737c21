#!/bin/bash
# Issue 46, the Hopper forward at hdim 192/256 (README.md) on the H200 in one call. Builds side by side:
#   base  the base tree (BASE: git archive of the commit before), hdim 192/256, fp16/bf16, causal both
#   rl    the base tree with the row limits (-DFLASHBUILD_HOPPER_FWD_ROW_LIMITS=1), causal
#   new   this tree (a -DFLASHBUILD_AB_TAG flag gives it a key of its own: ab.py), the same selection as base
#   nrl   this tree without the row limits, hdim 192 causal
#   pp    this tree with ping-pong on (-DFLASHBUILD_HOPPER_PINGPONG=1), hdim 192 (call 2 ran on the tree before
#         ping-pong became the 112-key causal default, so there `new` was the tile without it)
# then `flashbuild test --shapes full` of new, nrl and pp, and ab.py: the builds and SDPA's cuDNN in turns in one
# process (fp16 and bf16, 1k/4k/16k, causal both; same-arithmetic builds checked for the same bits). A table last.
# From this tree's root on the GPU machine:
#   OUT=$OUT BASE=../w46s-base bash benchmarks/fwd_short_hdim256/run.sh     # BUDGET: seconds for the timing (100)
if [ "$1" = -h ] || [ "$1" = --help ]; then sed -n 2,12p "$0" | cut -c3-; exit 0; fi
export PYTHONUNBUFFERED=1 PYTHONDONTWRITEBYTECODE=1
OUT=${OUT:-/tmp/short256_out}; mkdir -p "$OUT"; BASE=${BASE:-../w46s-base}; BUDGET=${BUDGET:-100}
t0=$(date +%s); at() { echo "at $(( $(date +%s) - t0 )) s"; }
F="--arch sm90 --direction fwd --no-local --no-softcap"
SEL="--hdim 192,256 --dtype fp16,bf16 $F --causal both"
NEW="$SEL --nvcc-flag=-DFLASHBUILD_AB_TAG=1"
RL="--hdim 192,256 --dtype fp16,bf16 $F --causal on --nvcc-flag=-DFLASHBUILD_HOPPER_FWD_ROW_LIMITS=1"
NRL="--hdim 192 --dtype fp16,bf16 $F --causal on --nvcc-flag=-DFLASHBUILD_HOPPER_FWD_ROW_LIMITS=0"
PP="--hdim 192 --dtype fp16,bf16 $F --causal both --nvcc-flag=-DFLASHBUILD_HOPPER_PINGPONG=1"
fb() { local cache=$1 limit=$2; shift 2; FLASHBUILD_CACHE_DIR=/tmp/fbc_$cache timeout "$limit" python3 -m flashbuild "$@"; }
fbb() { (cd "$BASE" && PYTHONPATH=/tmp/site:$PWD fb "$@"); }
nvidia-smi --query-gpu=name,driver_version,clocks.sm,temperature.gpu --format=csv,noheader | tee "$OUT/gpu.txt"
fb new 170 build $NEW -j 5 > "$OUT/build-new.txt" 2>&1 & new=$!
fbb base 170 build $SEL -j 5 > "$OUT/build-base.txt" 2>&1 & base=$!
fbb rl 170 build $RL -j 2 > "$OUT/build-rl.txt" 2>&1 & rl=$!
fb nrl 170 build $NRL -j 2 > "$OUT/build-nrl.txt" 2>&1 & nrl=$!
fb pp 170 build $PP -j 2 > "$OUT/build-pp.txt" 2>&1 & pp=$!
wait $new $nrl $pp; echo "== new, nrl, pp built $(at)"
(fb new 100 test $NEW --shapes full > "$OUT/test-new.txt" 2>&1; echo "== rc $?" >> "$OUT/test-new.txt"
 fb nrl 60 test $NRL --shapes full > "$OUT/test-nrl.txt" 2>&1; echo "== rc $?" >> "$OUT/test-nrl.txt"
 fb pp 60 test $PP --shapes full > "$OUT/test-pp.txt" 2>&1; echo "== rc $?" >> "$OUT/test-pp.txt") & t1=$!
wait $base $rl; echo "== base, rl built $(at)"
wait $t1; echo "== tests done $(at)"
for b in new base rl nrl pp; do echo "build $b: $(grep -E '^compiled|rror' "$OUT/build-$b.txt" | head -2)"; done
for f in test-new test-nrl test-pp; do echo "$f: $(grep -E 'passed|failed' "$OUT/$f.txt" | tail -1) $(tail -1 "$OUT/$f.txt")"; done
so() { grep -E '^extension' "$OUT/build-$1.txt" | awk '{print $2}' | tail -1; }
timeout $(( BUDGET + 60 )) python3 benchmarks/fwd_short_hdim256/ab.py --out "$OUT" --budget "$BUDGET" --hdim 256,192 \
  --build base="$(so base)" --build new="$(so new)" --build rl="$(so rl)" --build nrl="$(so nrl)" --build pp="$(so pp)" \
  --only rl=256:causal --only rl=192:causal --only nrl=192:causal --only pp=192:causal --only pp=192:plain \
  --same base=new:256 --same rl=new:256 --same base=rl --same nrl=new:192 --same pp=new:192 2>&1 | tee "$OUT/ab.txt" | tail -32
echo "== done $(at)"
