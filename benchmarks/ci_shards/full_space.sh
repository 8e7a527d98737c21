#!/bin/bash
# Issue 20: the full variant space (576 kernel TUs: every head dim, dtype, direction, causal value and
# feature variant for sm80, sm86, sm89 and sm90) compiled on one 16-core machine and timed, then split by
# its measured per-TU costs (the build dir's .ninja_log, which `--shard` reads by default) into n = 4 and
# n = 16 shards. ≈26,000 core-seconds by the per-kind estimate is ≈27 minutes on 16 cores: more than one
# 10-minute device call. So run this same command again at once on the same warm machine: ninja resumes
# (finished objects stay in the checkout's git-ignored .flashbuild-cache), each call adds its build's wall
# time to wall.log there, and the call that completes the build prints the totals and both splits.
#   LIMIT=560 bash benchmarks/ci_shards/full_space.sh      # SEL="..." for another selection
set -o pipefail
# Every call builds from one snapshot of the checkout, taken by the first call (tar keeps its mtimes): a
# device call copies the tree anew, and fresh mtimes on the kernel headers would make ninja start over.
SNAP=$PWD/.flashbuild-cache/full-space-tree
if [ ! -d "$SNAP" ]; then
  mkdir -p "$SNAP.part" && tar --exclude=./.flashbuild-cache --exclude=./.whl --exclude=./.git -cf - . | tar -C "$SNAP.part" -xf - \
    && mv "$SNAP.part" "$SNAP" || exit 1
fi
cd "$SNAP" || exit 1
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH} PYTHONDONTWRITEBYTECODE=1
OUT=${OUT:-/tmp/full_space_out}; mkdir -p "$OUT"
export FLASHBUILD_CACHE_DIR=${FLASHBUILD_CACHE_DIR:-$(dirname "$SNAP")}
mkdir -p "$FLASHBUILD_CACHE_DIR"
read -r -a SEL <<< "${SEL:---arch sm80,sm86,sm89,sm90}"
FB="python3 -m flashbuild"
WALL_LOG=$FLASHBUILD_CACHE_DIR/full-space-wall.log
call=$(( $(cat "$WALL_LOG" 2>/dev/null | wc -l) + 1 ))
s=$(date +%s.%N)
# SIGINT at the limit: flashbuild stops ninja, whose finished objects and .ninja_log lines stay.
timeout -s INT -k 20 "${LIMIT:-560}" $FB build "${SEL[@]}" --jobs "$(nproc)" --compile-only > "$OUT/build-call$call.txt" 2>&1
rc=$?
wall=$(python3 -c "print(round($(date +%s.%N) - $s, 1))")
echo "$call $rc $wall" >> "$WALL_LOG"
echo "== call $call: rc $rc, ${wall} s; $(grep -cE '^\[[0-9]+/' "$OUT/build-call$call.txt") compiles finished in this call"
tail -3 "$OUT/build-call$call.txt" | cut -c1-200
build_dir=$($FB build "${SEL[@]}" --dry-run 2>&1 | awk '$1 == "build" && $2 == "dir" {print $3}')
cp "$build_dir/.ninja_log" "$OUT/ninja_log-call$call.txt" 2>/dev/null   # kept even if a later call never comes
[ $call = 1 ] && { nproc; lscpu | grep -E "^Model name|^Thread|^Core|^Socket"; free -g | head -2; } > "$OUT/host.txt"
[ $rc = 0 ] || { echo "== not complete: run the same command again now (the machine keeps the objects for 30 s idle)"; exit 0; }
cp "$WALL_LOG" "$OUT/"
cp "$build_dir/.ninja_log" "$OUT/ninja_log.txt"
python3 - "$WALL_LOG" "$build_dir/.ninja_log" <<'PY'
import sys
calls = [line.split() for line in open(sys.argv[1]) if line.strip()]
print(f"one machine, {len(calls)} call(s): build wall {sum(float(c[2]) for c in calls):.1f} s "
      f"({' + '.join(c[2] for c in calls)}; a TU cut at a call's limit compiles again in the next)")
rows = [line.split("\t") for line in open(sys.argv[2]) if not line.startswith("#")]
last = {}
for start, end, _mtime, target, *_ in rows:   # the last run of each target is the one that finished
    last[target] = (int(end) - int(start)) / 1000
kernels = {t: s for t, s in last.items() if t.endswith(".o") and "binding" not in t}
print(f"{len(kernels)} kernel objects, {sum(kernels.values()):.0f} s of compile (each TU's own wall, summed); "
      f"longest TU {max(kernels.values()):.1f} s")
PY
for n in 4 16; do
  $FB build "${SEL[@]}" --dry-run --shard 1/$n 2>&1 | grep -E "^split of|^  shard" | cut -c1-110 | head -$((n + 1))
done | tee "$OUT/splits.txt"
