# The bench-order runs of order-bias.rows.txt: the bf16 hdim-256 1k row alone and after the 16k row. Run once
# with the bench that timed backends one after the other (commit 5169dc4) and once with it timing them in turns.
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl 2>/dev/null
export PYTHONUNBUFFERED=1 PYTHONPATH=/tmp/site:$PWD FLASHBUILD_CACHE_DIR=/tmp/fbc
t0=$(date +%s)
S="--arch sm90 --direction fwd --no-local --no-softcap --hdim 256 --causal off"
python3 -m flashbuild $S --dtype fp16,bf16 -j 4 > /dev/null 2>&1
for r in 1 2 3; do
  timeout 60 python3 -m flashbuild bench $S --dtype bf16 --seqlens 1024 --reps 30 > /tmp/a.txt 2>&1; echo "== bf16 1k alone r$r"; grep -E "^fwd_" /tmp/a.txt | awk '{print $1,$2,$4,$7}'
  timeout 60 python3 -m flashbuild bench $S --dtype bf16 --seqlens 16384,1024 --reps 30 > /tmp/a.txt 2>&1; echo "== bf16 16k then 1k r$r"; grep -E "^fwd_" /tmp/a.txt | awk '{print $1,$2,$4,$7}'
done
echo "t $(( $(date +%s) - t0 )) s"
