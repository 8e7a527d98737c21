# The hdim-256 non-causal forward tiles side by side (default 128x64/8, 64x64/4, 128x32/8), two rounds,
# --reps 30; from the repository root on the nvidia-h200 machine. Rows: tiles.rows.txt.
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl 2>/dev/null
export PYTHONUNBUFFERED=1 PYTHONPATH=/tmp/site:$PWD FLASHBUILD_CACHE_DIR=/tmp/fbc
t0=$(date +%s)
S="--hdim 256 --dtype fp16,bf16 --arch sm90 --direction fwd --causal off --no-local --no-softcap"
declare -A F=([t128]="" [t64]="--nvcc-flag=-DFLASHBUILD_FWD_BLOCK_M=64 --nvcc-flag=-DFLASHBUILD_FWD_BLOCK_N=64 --nvcc-flag=-DFLASHBUILD_FWD_WARPS=4" [t128n32]="--nvcc-flag=-DFLASHBUILD_FWD_BLOCK_M=128 --nvcc-flag=-DFLASHBUILD_FWD_BLOCK_N=32 --nvcc-flag=-DFLASHBUILD_FWD_WARPS=8")
V="t128 t64 t128n32"
for v in $V; do python3 -m flashbuild $S ${F[$v]} -j 4 > /dev/null 2>&1 & done; wait
echo "build $(( $(date +%s) - t0 )) s"
for r in 1 2; do for v in $V; do timeout 80 python3 -m flashbuild bench $S ${F[$v]} --seqlens 1024,4096,16384 --reps 30 > /tmp/$v-$r.txt 2>&1; echo "== $v"; grep -E "^fwd_" /tmp/$v-$r.txt | awk '{print $1,$2,$4,$7}'; done; done
echo "t $(( $(date +%s) - t0 )) s"
