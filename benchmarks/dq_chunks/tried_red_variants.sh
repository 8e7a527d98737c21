# Run from the repository root on 3b108a5 with an FLASHBUILD_AB_RED switch in atomic_add4 (1: an L2
# evict_last cache hint on red.v4; 2: four scalar reductions); the switch was removed afterwards.
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl 2>/dev/null
export PYTHONUNBUFFERED=1 PYTHONPATH=/tmp/site:$PWD FLASHBUILD_CACHE_DIR=/tmp/fbc
t0=$(date +%s)
S="--dtype fp16 --arch sm90 --direction bwd --no-local --no-softcap --hdim 128,256 --causal off"
V="r0 r1 r2"
declare -A F=([r0]="" [r1]="--nvcc-flag=-DFLASHBUILD_AB_RED=1" [r2]="--nvcc-flag=-DFLASHBUILD_AB_RED=2")
for v in $V; do python3 -m flashbuild $S ${F[$v]} -j 5 > /dev/null 2>&1 & done; wait
echo "build $(( $(date +%s) - t0 )) s"
python3 -m flashbuild test $S ${F[r1]} --shapes quick 2>&1 | grep -E "passed, [0-9]+ failed" | tail -1
B="bench $S --seqlens 4096,16384 --reps 10"
for r in 1 2; do for v in $V; do timeout 60 python3 -m flashbuild $B ${F[$v]} > /tmp/$v-$r.txt 2>&1; echo "== $v"; grep -E "^(fwd|bwd)_" /tmp/$v-$r.txt | awk '{print $1,$2,$4,$7}'; done; done
echo "t $(( $(date +%s) - t0 )) s"
