# Run from the repository root with tried-bulk-reduce.diff applied (FLASHBUILD_AB_BULK_SKIP: see the diff).
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl 2>/dev/null
export PYTHONUNBUFFERED=1 PYTHONPATH=/tmp/site:$PWD FLASHBUILD_CACHE_DIR=/tmp/fbc
t0=$(date +%s)
S="--dtype fp16 --arch sm90 --direction bwd --no-local --no-softcap --hdim 128,256 --causal off"
V="base bulk s1 s2 s4 s5"
declare -A F=([base]="--nvcc-flag=-DFLASHBUILD_AB_DQ_ATOMICS" [bulk]="" [s1]="--nvcc-flag=-DFLASHBUILD_AB_BULK_SKIP=1" [s2]="--nvcc-flag=-DFLASHBUILD_AB_BULK_SKIP=2" [s4]="--nvcc-flag=-DFLASHBUILD_AB_BULK_SKIP=4" [s5]="--nvcc-flag=-DFLASHBUILD_AB_BULK_SKIP=5")
for v in $V; do python3 -m flashbuild $S ${F[$v]} -j 3 > /dev/null 2>&1 & done; wait
echo "build $(( $(date +%s) - t0 )) s"
B="bench $S --seqlens 16384 --reps 10"
for r in 1 2; do for v in $V; do timeout 60 python3 -m flashbuild $B ${F[$v]} > /tmp/$v-$r.txt 2>&1; echo "== $v"; grep -E "^(fwd|bwd)_" /tmp/$v-$r.txt | awk '{print $1,$2,$4,$7}'; done; done
echo "t $(( $(date +%s) - t0 )) s"
