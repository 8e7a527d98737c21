# Run from the repository root on the nvidia-h200 machine: bash benchmarks/dq_chunks/chunks_ab_hdim256.sh
# c1 / c2 = -DFLASHBUILD_BWD_DQ_CHUNKS unset (then 1 at every head dim) / 2. Rows: chunks-hdim256.rows.txt.
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl 2>/dev/null
export PYTHONUNBUFFERED=1 PYTHONPATH=/tmp/site:$PWD FLASHBUILD_CACHE_DIR=/tmp/fbc
t0=$(date +%s)
S="--dtype fp16 --arch sm90 --direction bwd --no-local --no-softcap --hdim 256"
V="c1 c2"
declare -A F=([c1]="" [c2]="--nvcc-flag=-DFLASHBUILD_BWD_DQ_CHUNKS=2")
for v in $V; do python3 -m flashbuild $S ${F[$v]} -j 4 > /dev/null 2>&1 & done; wait
echo "build $(( $(date +%s) - t0 )) s"
python3 -m flashbuild test $S ${F[c2]} --shapes quick 2>&1 | grep -E "passed, [0-9]+ failed" | tail -1
B="bench $S --seqlens 1024,4096,16384 --reps 10"
for r in 1 2; do for v in $V; do timeout 60 python3 -m flashbuild $B ${F[$v]} > /tmp/$v-$r.txt 2>&1; echo "== $v"; grep -E "^(fwd|bwd)_" /tmp/$v-$r.txt | awk '{print $1,$2,$4,$7}'; done; done
echo "t $(( $(date +%s) - t0 )) s"
