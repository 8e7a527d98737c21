#!/bin/bash
# The Hopper forward's persistent scheduler dealing each round of tiles alternately forwards and
# backwards (kernels/hopper/tile_scheduler.h) against dealing every round forwards ("base"), on the
# H200: correctness of the new tree, then `flashbuild bench` of both in turns, causal (the longest-first
# order it changes) and non-causal (untouched: the control).
# From the repository root on the GPU machine, carrying .device/sched-base, the tree before the change:
#   git archive <base commit> kernels flashbuild templates configs pyproject.toml | tar -x -C .device/sched-base
#   bash benchmarks/fwd_scheduler/ab.sh          # output under $OUT; the rows last
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl 2>/dev/null
export PYTHONUNBUFFERED=1 PYTHONDONTWRITEBYTECODE=1
OUT=${OUT:-/tmp/sched_out}; mkdir -p "$OUT"
t0=$(date +%s)
S="--hdim 64,128 --dtype fp16 --arch sm90 --direction fwd --causal both --no-local --no-softcap"
# fb_new / fb_base LIMIT ARGS...: flashbuild from this tree or the base tree, each with its own cache
fb_new() { local limit=$1; shift; PYTHONPATH=/tmp/site:$PWD FLASHBUILD_CACHE_DIR=/tmp/fbc_new timeout "$limit" python3 -m flashbuild "$@"; }
fb_base() { local limit=$1; shift; (cd .device/sched-base && PYTHONPATH=/tmp/site:$PWD FLASHBUILD_CACHE_DIR=/tmp/fbc_base \
  timeout "$limit" python3 -m flashbuild "$@"); }
fb_new 200 $S -j 8 > "$OUT/build-new.txt" 2>&1 &
fb_base 200 $S -j 8 > "$OUT/build-base.txt" 2>&1 &
wait; echo "== builds at $(( $(date +%s) - t0 )) s"; tail -1 "$OUT/build-new.txt"; tail -1 "$OUT/build-base.txt"
fb_new 120 test $S --shapes full > "$OUT/test-new.txt" 2>&1; echo "== test new rc $?"
grep -E "passed, [0-9]+ failed" "$OUT/test-new.txt" | tail -1
fb_new 150 test --hdim 64 --dtype fp16 --arch sm90 --direction fwd --causal on --shapes quick > "$OUT/test-new-local.txt" 2>&1
echo "== test new, local+softcap too: rc $?"; grep -E "passed, [0-9]+ failed" "$OUT/test-new-local.txt" | tail -1
for r in 1 2 3; do for v in base new; do
  fb_$v 90 bench $S --seqlens 1024,4096,16384 --reps 30 --json "/tmp/$v-$r.json" > "/tmp/$v-$r.txt" 2>&1
  echo "== $v r$r rc $? at $(( $(date +%s) - t0 )) s"; done; done
python3 - "$OUT" <<'PY' | tee "$OUT/rows.txt"
import json, statistics, sys
out = sys.argv[1]
runs = {v: [json.load(open(f"/tmp/{v}-{r}.json")) for r in (1, 2, 3)] for v in ("base", "new")}
json.dump(runs, open(f"{out}/bench-runs.json", "w"))
def cells(run):
    c = {(x["variant"], x["seqlen"], x["backend"]): x["tflops"] for x in run["results"]}
    return {(v, s): c[(v, s, "flashbuild")] / c[(v, s, "sdpa-cudnn")] for (v, s, b) in c if b == "flashbuild"}, c
print(f"{'variant':<30} {'seqlen':>6} {'base x cuDNN (3 runs)':>24} {'new x cuDNN (3 runs)':>24} {'new/base':>9} {'new TFLOPS':>11}")
base = [cells(r) for r in runs["base"]]; new = [cells(r) for r in runs["new"]]
for key in base[0][0]:
    b = [x[0][key] for x in base]; n = [x[0][key] for x in new]
    tf = statistics.median(x[1][(*key, "flashbuild")] for x in new)
    print(f"{key[0]:<30} {key[1]:>6} {' '.join(f'{x:.3f}' for x in b):>24} {' '.join(f'{x:.3f}' for x in n):>24} "
          f"{statistics.median(n) / statistics.median(b):>9.3f} {tf:>11.1f}")
PY
echo "t $(( $(date +%s) - t0 )) s"
