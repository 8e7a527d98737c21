#!/bin/bash
# .device/head: `git archive 55a598f` (the Hopper split-KV), .device/old: `git archive d055165` (the Ampere-path one).
# 1. The edit loop at HEAD (cold main job first, on the fresh machine). 2. Decode GPU time (decode_bandwidth.py
# --graph, the head's script for both trees), old then new, hdim 128 and 64. 3. Two more cold main jobs.
cd .device
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site ../.whl/*.whl 2>/dev/null
export PYTHONUNBUFFERED=1
(cd head && export PYTHONPATH=/tmp/site:$PWD && mkdir -p $OUT/edit && \
 BWD_HEADERS="kernels/hopper/bwd_mainloop.h kernels/hopper/bwd_epilogue.h" \
 FWD_HEADERS="kernels/hopper/mainloop.h kernels/ampere/fwd_kernel.h" BUDGET=200 OUT=$OUT/edit bash benchmarks/edit_loop/run.sh > $OUT/edit-loop.txt 2>&1)
echo "edit loop rc $?"; cat $OUT/edit/summary.txt
grep -A6 "^compiled" $OUT/edit/cold-main-job.txt | head -7
run() {  # TREE HDIM
  (cd $1 && PYTHONPATH=/tmp/site:$PWD FLASHBUILD_CACHE_DIR=/tmp/cache_dec_$1 timeout 100 python3 ../head/benchmarks/decode/decode_bandwidth.py \
     --graph --hdim $2 --batch 1,8,64 --cache 4096,65536 --json $OUT/graph-$1-h$2.json > $OUT/graph-$1-h$2.txt 2>&1)
  echo "== $1 hdim $2 (graph) rc $?"; grep "^|" $OUT/graph-$1-h$2.txt | tail -6
}
run old 128; run head 128; run old 64; run head 64
now() { date +%s.%N; }
for r in 2 3; do
  export FLASHBUILD_CACHE_DIR=/tmp/cold_$r; rm -rf $FLASHBUILD_CACHE_DIR
  t0=$(now); (cd head && PYTHONPATH=/tmp/site:$PWD python3 -m flashbuild --hdim 64 --dtype fp16 --arch sm90 > $OUT/cold-$r.txt 2>&1); t1=$(now)
  echo "cold main job round $r: $(python3 -c "print(round($t1-$t0,2))") s; $(grep -o 'compiled [0-9]* targets in [0-9.]*s' $OUT/cold-$r.txt); longest: $(grep -A1 '^compiled' $OUT/cold-$r.txt | tail -1)"
done
