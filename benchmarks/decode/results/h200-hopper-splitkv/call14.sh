#!/bin/bash
# .device/head: `git archive a3f8c6f`, .device/old: `git archive d055165`. Decode call time (CUDA events, host
# included: the binding, the launches), hdim 128 and 64, the trees alternating: old, new, old, new.
cd .device
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site ../.whl/*.whl 2>/dev/null
export PYTHONUNBUFFERED=1
run() {  # TREE HDIM ROUND
  (cd $1 && PYTHONPATH=/tmp/site:$PWD FLASHBUILD_CACHE_DIR=/tmp/cache_dec_$1 timeout 110 python3 ../head/benchmarks/decode/decode_bandwidth.py \
     --hdim $2 --batch 1,8,64 --cache 4096,65536 --json $OUT/ev-$1-h$2-r$3.json > $OUT/ev-$1-h$2-r$3.txt 2>&1)
  echo "== $1 hdim $2 round $3 rc $?"; grep "^|" $OUT/ev-$1-h$2-r$3.txt | tail -6
}
run old 128 1; run head 128 1; run old 128 2; run head 128 2; run old 64 1; run head 64 1
