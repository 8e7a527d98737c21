# Run from the repository root on the nvidia-h200 machine: the remaining quick checks on the
# two-chunk kernels (hdim 32/96/192 both dtypes, hdim 128 fp16 with local and softcap, the forced
# sm86 hdim-192 tile, splitkv at hdim 64/128). Outputs in benchmarks/bwd_dq_chunks/.
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl 2>/dev/null
export PYTHONUNBUFFERED=1 PYTHONPATH=/tmp/site:$PWD FLASHBUILD_CACHE_DIR=/tmp/fbc
t0=$(date +%s)
T="--nvcc-flag=-DFLASHBUILD_BWD_BLOCK_M=32 --nvcc-flag=-DFLASHBUILD_BWD_BLOCK_N=64 --nvcc-flag=-DFLASHBUILD_BWD_STAGES=1"
A="--arch sm90 --shapes quick"
run() { name=$1; shift; timeout 300 python3 -m flashbuild test "$@" > $OUT/$name.txt 2>&1; echo "$name rc $? $(grep -E "passed, [0-9]+ failed" $OUT/$name.txt | tail -1)"; }
for dt in fp16 bf16; do python3 -m flashbuild --hdim 32,96,192 --dtype $dt --arch sm90 --direction fwd,bwd --no-local --no-softcap -j 5 > /dev/null 2>&1 & done
python3 -m flashbuild --hdim 128 --dtype fp16 --arch sm90 --direction fwd,bwd -j 6 > /dev/null 2>&1 &
wait; echo "build1 $(( $(date +%s) - t0 )) s"
python3 -m flashbuild --hdim 192 --dtype bf16 --arch sm90 --direction bwd --no-local --no-softcap $T -j 8 > /dev/null 2>&1 &
python3 -m flashbuild --hdim 64,128 --dtype fp16 --arch sm90 --direction splitkv -j 8 > /dev/null 2>&1 &
run fp16-h32-96-192 --hdim 32,96,192 --dtype fp16 --direction fwd,bwd --no-local --no-softcap $A
run bf16-h32-96-192 --hdim 32,96,192 --dtype bf16 --direction fwd,bwd --no-local --no-softcap $A
run fp16-h128-features --hdim 128 --dtype fp16 --direction fwd,bwd $A
wait; echo "build2 $(( $(date +%s) - t0 )) s"
run bf16-h192-tile32x64 --hdim 192 --dtype bf16 --direction bwd --no-local --no-softcap $T $A
run fp16-h64-128-splitkv --hdim 64,128 --dtype fp16 --direction splitkv $A
echo "t $(( $(date +%s) - t0 )) s"
