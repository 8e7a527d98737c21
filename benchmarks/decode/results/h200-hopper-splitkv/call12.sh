#!/bin/bash
# .device/head: `git archive 69adab1` (the Hopper split-KV), .device/old: `git archive d055165` (the Ampere-path one).
# 1. The cold main job (fresh cache each) of both trees in turns, twice. 2. Decode GPU time
# (decode_bandwidth.py --kernel-time, the head's script for both trees), old then new, hdim 128 and 64.
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
run() {  # TREE HDIM
  (cd $1 && PYTHONPATH=/tmp/site:$PWD FLASHBUILD_CACHE_DIR=/tmp/cache_dec_$1 timeout 120 python3 ../head/benchmarks/decode/decode_bandwidth.py \
     --kernel-time --hdim $2 --batch 1,8,64 --cache 4096,65536 --json $OUT/ktime-$1-h$2.json > $OUT/ktime-$1-h$2.txt 2>&1)
  echo "== $1 hdim $2 (kernel time) rc $?"; grep "^|" $OUT/ktime-$1-h$2.txt | tail -6; tail -2 $OUT/ktime-$1-h$2.txt | grep -i error
}
run old 128; run head 128; run old 64; run head 64
