# The forward rows nearest to FA2 (hdim 256 at 1k and 4k), five runs each in one job, --reps 30.
# From the repository root on the nvidia-h200 machine; output fwd-h256-repeats.txt (benchmarks/archive/fwd_hdim256_1k/).
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl 2>/dev/null
export PYTHONUNBUFFERED=1 PYTHONPATH=/tmp/site:$PWD FLASHBUILD_CACHE_DIR=/tmp/fbc
S="--hdim 256 --dtype fp16,bf16 --arch sm90 --direction fwd --no-local --no-softcap"
python3 -m flashbuild $S -j 8 > /dev/null 2>&1
for i in 1 2 3 4 5; do
  timeout 100 python3 -m flashbuild bench $S --seqlens 1024,4096 --reps 30 > /tmp/r$i.txt 2>&1
  grep -E "^fwd_" /tmp/r$i.txt | awk -v i=$i '{print "run" i, $1, $2, $4, $7}'
done | tee $OUT/fwd-h256-repeats.txt
