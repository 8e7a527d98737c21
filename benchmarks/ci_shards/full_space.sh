#!/bin/bash
# Issue 20: the full variant space (624 kernel TUs: every head dim, dtype, direction, causal value and
# feature variant for sm80, sm86, sm89 and sm90, the sm90 Ampere-path fallbacks included, before f7bb2a1) compiled on one
# 16-core machine and timed, then split by its measured per-TU costs into n = 4 and n = 16 shards.
# ≈26,600 core-seconds by the per-kind estimate is ≈28 minutes on 16 cores: more than one 10-minute device
# call, and about all a machine gives before it goes back (30 minutes held). So the space is built in parts
# (PARTS, default the arch pairs "sm80,sm86 sm89,sm90", ≈14 minutes each by the estimate), one after the
# other. Each call builds until LIMIT seconds have passed; run the same command again at once on the same
# warm machine and ninja resumes (finished objects stay in the checkout's git-ignored .flashbuild-cache).
# A part's wall is the sum of its calls' build walls: a full one-machine build of that part. If the machine
# goes back before every part is done, a fresh one goes on with PARTS set to the parts left.
#   LIMIT=570 bash benchmarks/ci_shards/full_space.sh           # on the GPU host, repeated until "all done"
#   python3 benchmarks/ci_shards/full_space_summary.py DIR...   # anywhere: totals and splits from the calls' $OUT
# (EXTRA="--hdim 64 ..." narrows every part: for trying the script on a small selection.)
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
STATE=$FLASHBUILD_CACHE_DIR/full-space-state; mkdir -p "$STATE"
FB="python3 -m flashbuild"
LIMIT=${LIMIT:-560}
start=$(date +%s)
[ -f "$STATE/host.txt" ] || { nproc; lscpu | grep -E "^Model name|^Thread|^Core|^Socket"; free -g | head -2; } > "$STATE/host.txt"
cp "$STATE/host.txt" "$OUT/"
for part in ${PARTS:-sm80,sm86 sm89,sm90}; do
  tag=${part//,/_}  # "_": a file name with "+" does not come back from a device call
  [ -f "$STATE/$tag.done" ] && continue
  left=$(( LIMIT - ($(date +%s) - start) ))
  if [ $left -lt 60 ]; then echo "== $LIMIT s used: run the same command again now"; break; fi
  s=$(date +%s.%N)
  # SIGINT at the limit: flashbuild stops ninja, whose finished objects and .ninja_log lines stay.
  timeout -s INT -k 15 "$left" $FB build --arch "$part" $EXTRA --jobs "$(nproc)" --compile-only > "$OUT/build-$tag-$(date +%H%M%S).txt" 2>&1
  rc=$?
  wall=$(python3 -c "print(round($(date +%s.%N) - $s, 1))")
  echo "$rc $wall" >> "$STATE/$tag.wall"
  build_dir=$($FB build --arch "$part" $EXTRA --dry-run 2>&1 | awk '$1 == "build" && $2 == "dir" {print $3}')
  cp "$build_dir/.ninja_log" "$OUT/ninja_log-$tag.txt" 2>/dev/null
  cp "$STATE/$tag.wall" "$OUT/wall-$tag.txt"
  echo "== part $part: rc $rc, ${wall} s in this call; calls so far: $(tr '\n' ' ' < "$STATE/$tag.wall")"
  if [ $rc = 0 ]; then touch "$STATE/$tag.done" "$OUT/done-$tag"; else echo "== part $part not complete: run the same command again now"; break; fi
done
left_parts=$(for part in ${PARTS:-sm80,sm86 sm89,sm90}; do [ -f "$STATE/${part//,/_}.done" ] || echo "$part"; done)
[ -z "$left_parts" ] && echo "== all done: python3 benchmarks/ci_shards/full_space_summary.py $OUT" || echo "== left: $left_parts"
