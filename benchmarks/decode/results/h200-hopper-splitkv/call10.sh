#!/bin/bash
# .device/old: `git archive d055165` (the Ampere-path split-KV on sm90), .device/head: `git archive 2fb4ead` (the Hopper
# split-KV). benchmarks/decode/decode_bandwidth.py of each tree (its own build and cache dir), hdim 128 then 64,
# old then new, paged 256 beside contiguous; then the same two rows again new first.
cd .device
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site ../.whl/*.whl 2>/dev/null
export PYTHONUNBUFFERED=1
run() {  # TREE HDIM ROUND
  (cd $1 && PYTHONPATH=/tmp/site:$PWD FLASHBUILD_CACHE_DIR=/tmp/cache_$1 timeout 150 python3 benchmarks/decode/decode_bandwidth.py \
     --hdim $2 --paged 256 --batch 1,8,64 --cache 4096,65536 --json $OUT/decode-$1-h$2-r$3.json > $OUT/decode-$1-h$2-r$3.txt 2>&1)
  echo "== $1 hdim $2 round $3 rc $?"; grep "^|" $OUT/decode-$1-h$2-r$3.txt | tail -6
}
run old 128 1; run head 128 1; run old 64 1; run head 64 1
run head 128 2; run old 128 2
