#!/bin/bash
# .device/head: `git archive c832ce6` (the small kernels once per head dim and dtype), .device/old: `git archive 8546797`.
# 1. The cold main job (fresh cache each) of both trees in turns, twice. 2. On the head: the main job's full test, the
# KV-cache GPU tests, the Hopper backward's GPU tests at hdim 96/192/256 (not the feature ones), deterministic included.
cd .device
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site ../.whl/*.whl 2>/dev/null
export PYTHONUNBUFFERED=1
python3 -c "import torch"
now() { date +%s.%N; }
cold() {  # TREE ROUND
  export FLASHBUILD_CACHE_DIR=/tmp/cold_$1_$2; rm -rf $FLASHBUILD_CACHE_DIR
  t0=$(now); (cd $1 && PYTHONPATH=/tmp/site:$PWD python3 -m flashbuild --hdim 64 --dtype fp16 --arch sm90 > $OUT/cold-$1-$2.txt 2>&1); t1=$(now)
  echo "cold main job $1 round $2: $(python3 -c "print(round($t1-$t0,2))") s; $(grep -o 'compiled [0-9]* targets in [0-9.]*s' $OUT/cold-$1-$2.txt); longest: $(grep -A1 '^compiled' $OUT/cold-$1-$2.txt | tail -1)"
}
cold old 1; cold head 1; cold head 2; cold old 2
cd head
export PYTHONPATH=/tmp/site:$PWD FLASHBUILD_CACHE_DIR=/tmp/cold_head_1
timeout 200 python3 -m flashbuild test --hdim 64 --dtype fp16 --arch sm90 --shapes full > $OUT/test-main.txt 2>&1
echo "main job full rc $?: $(tail -1 $OUT/test-main.txt)"
timeout 200 python3 -m pytest -q -p no:cacheprovider tests/gpu/test_kvcache_gpu.py tests/gpu/test_kvcache_prefill_gpu.py > $OUT/test-kvcache.txt 2>&1
echo "kvcache tests rc $?: $(tail -1 $OUT/test-kvcache.txt)"
timeout 280 python3 -m pytest -q -p no:cacheprovider tests/gpu/test_hopper_bwd_gpu.py -k "not feature" > $OUT/test-hopper-bwd.txt 2>&1
echo "hopper bwd tests (hdim 96/192/256) rc $?: $(tail -1 $OUT/test-hopper-bwd.txt)"
