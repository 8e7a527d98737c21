#!/bin/bash
# GPU tests of hdim 32 on the Hopper forward and the packed one-row GQA calls; then the packing A/B
# (flash_attn_func alone, base = main's binding, new = this tree) at batch 4-64, in turns.
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl 2>/dev/null
export PYTHONUNBUFFERED=1 PYTHONDONTWRITEBYTECODE=1
t0=$(date +%s); at() { echo "at $(( $(date +%s) - t0 )) s"; }
root=$PWD
fb() { (cd "$1" && PYTHONPATH=/tmp/site:$PWD FLASHBUILD_CACHE_DIR=/tmp/c_$2 python3 -m flashbuild build --hdim 64,128 --dtype fp16 \
  --arch sm90 --direction fwd --causal off --no-local --no-softcap -j 4 > $OUT/build-$2.txt 2>&1; echo "== build $2 rc $?"); }
fb .device/base base & fb . new &
(PYTHONPATH=/tmp/site:$PWD FLASHBUILD_CACHE_DIR=/tmp/c_tests timeout 420 python3 -m pytest -q -rs -p no:cacheprovider \
  tests/gpu/test_fwd_packed_rows_gpu.py tests/gpu/test_kvcache_prefill_gpu.py tests/gpu/test_hopper_varlen_gpu.py > $OUT/tests.txt 2>&1; echo "== tests rc $?") &
wait; at
tail -3 $OUT/tests.txt; grep -E "FAILED|Error" $OUT/tests.txt | head -10
for r in 1 2; do for b in 4 8 16 64; do for t in base new; do
  d=$root; [ $t = base ] && d=$root/.device/base
  (cd $d && PYTHONPATH=/tmp/site:$PWD FLASHBUILD_CACHE_DIR=/tmp/c_$t timeout 100 python3 $root/benchmarks/fwd_pack_gqa/measure.py --api-only \
    --batch $b --hdims 64,128 --seqlens-q 1 --seqlens-k 4096,16384 --groups 8 --reps 30 > $OUT/api-$t-b$b-r$r.txt 2>&1)
done; done; done; at
python3 - $OUT <<'PY'
import sys, re, glob
out = sys.argv[1]
rows = {}
for f in glob.glob(f"{out}/api-*.txt"):
    t, b, r = re.search(r"api-(\w+)-b(\d+)-r(\d)", f).groups()
    for line in open(f):
        p = line.split()
        if len(p) == 7 and p[0].isdigit():
            rows.setdefault((int(b), int(p[0]), int(p[2])), {}).setdefault(t, []).append(float(p[4]))
print(f"{'batch':>5} {'hdim':>4} {'sk':>6} {'base us':>16} {'new us':>16} {'base/new':>9}")
for k in sorted(rows):
    v = rows[k]; bs, ns = v.get("base", []), v.get("new", [])
    if bs and ns:
        print(f"{k[0]:>5} {k[1]:>4} {k[2]:>6} {' '.join(f'{x:.1f}' for x in bs):>16} {' '.join(f'{x:.1f}' for x in ns):>16} "
              f"{min(bs) / min(ns):>9.2f}")
PY
