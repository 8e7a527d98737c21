# Run from the repository root on the nvidia-h200 machine: memcheck, the forced 32x32 (sm86) tile at
# hdim 256, and five repeats of the fp16 hdim-256 causal forward at 1k. Outputs in this folder.
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl 2>/dev/null
export PYTHONUNBUFFERED=1 PYTHONPATH=/tmp/site:$PWD FLASHBUILD_CACHE_DIR=/tmp/fbc
t0=$(date +%s)
T="--nvcc-flag=-DFLASHBUILD_BWD_BLOCK_M=32 --nvcc-flag=-DFLASHBUILD_BWD_BLOCK_N=32 --nvcc-flag=-DFLASHBUILD_BWD_STAGES=1"
python3 -m flashbuild --hdim 64,128,256 --dtype fp16 --arch sm90 --direction fwd,bwd --no-local --no-softcap -j 8 > /dev/null 2>&1 &
python3 -m flashbuild --hdim 256 --dtype fp16 --arch sm90 --direction bwd --no-local --no-softcap $T -j 8 > /dev/null 2>&1 &
wait; echo "build $(( $(date +%s) - t0 )) s"
PYTORCH_NO_CUDA_MEMORY_CACHING=1 timeout 200 compute-sanitizer --tool memcheck python3 benchmarks/bwd_dq_atomics/memcheck_calls.py > $OUT/memcheck.txt 2>&1; echo "memcheck rc $?"; tail -n 2 $OUT/memcheck.txt
timeout 100 python3 -m flashbuild test --hdim 256 --dtype fp16 --arch sm90 --direction bwd --no-local --no-softcap $T --shapes quick > $OUT/fp16-h256-tile32x32.txt 2>&1; echo "tile32 rc $?"; grep -E "passed, [0-9]+ failed" $OUT/fp16-h256-tile32x32.txt | tail -1
for i in 1 2 3 4 5; do timeout 60 python3 -m flashbuild bench --hdim 256 --dtype fp16 --arch sm90 --direction fwd --causal on --no-local --no-softcap --seqlens 1024 --reps 30 > /tmp/f$i.txt 2>&1; grep -E "^fwd_" /tmp/f$i.txt | awk '{print $1,$2,$4,$7}'; done | tee $OUT/fwd-h256-causal-1k-x5.txt  # kept in benchmarks/archive/fwd_hdim256_1k/
echo "t $(( $(date +%s) - t0 )) s"
