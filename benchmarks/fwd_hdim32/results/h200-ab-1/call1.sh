#!/bin/bash
# hdim 32 on the Hopper forward (hd32 tree) vs main (Ampere path at hdim 32), and GQA packing at batch 64.
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl 2>/dev/null
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
t0=$(date +%s)
mkdir -p $OUT/ab
OUT=$OUT/ab TREES="base=.device/base new=." SEL="--hdim 32 --dtype fp16,bf16 --arch sm90 --direction fwd --causal both --no-local --no-softcap" \
  RUNS=2 REPS=20 bash benchmarks/checks/ab_trees.sh > $OUT/ab.txt 2>&1
echo "== ab done at $(( $(date +%s) - t0 )) s"
grep -E "^== test|passed|failed" $OUT/ab.txt | head -5
FLASHBUILD_CACHE_DIR=/tmp/gqa_cache timeout 200 python3 benchmarks/fwd_pack_gqa/measure.py --batch 64 --hdims 64,128 \
  --seqlens-q 1,4,16,64 --seqlens-k 4096 --groups 8 --reps 20 --json $OUT/pack-b64.json > $OUT/pack-b64.txt 2>&1
echo "== gqa rc $? at $(( $(date +%s) - t0 )) s"
cat $OUT/pack-b64.txt | tail -12
echo "== ab table"; tail -30 $OUT/ab.txt
