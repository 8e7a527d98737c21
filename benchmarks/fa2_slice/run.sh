#!/bin/bash
# The flash-attn 2 slice on the GPU machine: build it (every feature, then every feature compiled out),
# measure each TU, check the narrowed switch's error, and run the tree's own tests on the slice.
# From the repository root, carrying .device/fa2/flash_attn-2.8.3.tar.gz (the sdist, git-ignored):
#   bash benchmarks/fa2_slice/run.sh build            # both builds, per-TU figures, the hdim-128 error
#   bash benchmarks/fa2_slice/run.sh tests I N SECS   # shard I of N (I = 0..N-1) of the tree's tests, for at most SECS
# The builds go to .flashbuild-cache/ in the checkout (git-ignored), which a warm machine keeps between
# calls; a cold one rebuilds first. Logs and JSON under $OUT; a short summary is printed last.
set -o pipefail
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD PYTHONDONTWRITEBYTECODE=1
OUT=${OUT:-/tmp/fa2_out}
mkdir -p "$OUT" /tmp/fa2
[ -d /tmp/fa2/flash_attn-2.8.3 ] || tar -C /tmp/fa2 -xzf .device/fa2/flash_attn-2.8.3.tar.gz
TREE=/tmp/fa2/flash_attn-2.8.3
export FLASHBUILD_CACHE_DIR=$PWD/.flashbuild-cache
# The measuring launcher is part of every command line in build.ninja: every command here passes it,
# or ninja would see new commands and compile everything again.
SLICE=(--source "$TREE" --profile flash-attn-2 --hdim 64 --dtype fp16 --arch sm90
       --launcher "$PWD/benchmarks/fa2_slice/measure.py")
# FEATURES=uneven_k (say) builds the `tests` phase's slice with only those features: a shorter build,
# and the plugin deselects (and counts) the cases that need the others.
[ -n "$FEATURES" ] && SLICE+=(--features "$FEATURES")
FB="python3 -m flashbuild"
t0=$(date +%s)
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; nproc
python3 -c "import torch; print('torch', torch.__version__)"

build() {  # NAME EXTRA-FLAGS...: a measured build of the slice
  local name=$1; shift
  local start=$(date +%s.%N)
  FB_MEASURE_LOG=$OUT/tu-$name.jsonl $FB build "${SLICE[@]}" "$@" --jobs "$(nproc)" > "$OUT/build-$name.txt" 2>&1
  local rc=$?
  echo "== build $name rc $rc wall $(python3 -c "print(round($(date +%s.%N) - $start, 1))") s"
  tail -14 "$OUT/build-$name.txt"
  return $rc
}

hdim128() {  # a head dim the slice does not hold: the narrowed switch's error, not a crash or another kernel
  (cd /tmp && $FB run "${SLICE[@]}" -- python3 - > "$OUT/hdim128.txt" 2>&1) <<'PY'
import torch, flash_attn
q = torch.randn(2, 128, 4, 128, device="cuda", dtype=torch.float16)
try:
    flash_attn.flash_attn_func(q, q, q)
    print("NO ERROR: a wrong kernel ran")
except RuntimeError as exc:
    print("RuntimeError:", exc)
q = torch.randn(2, 128, 4, 64, device="cuda", dtype=torch.float16)
print("hdim 64 after the error: finite =", bool(flash_attn.flash_attn_func(q, q, q).isfinite().all()))
PY
  tail -3 "$OUT/hdim128.txt"
}

if [ "$1" = build ]; then
  rm -rf "$FLASHBUILD_CACHE_DIR"
  build all || exit 1
  build none --features none || exit 1
  hdim128
  python3 - "$OUT" <<'PY'
import json, sys, pathlib
out = pathlib.Path(sys.argv[1])
for name in ("all", "none"):
    rows = [json.loads(l) for l in (out / f"tu-{name}.jsonl").read_text().splitlines()]
    cpu = sum(r["cpu_s"] for r in rows)
    print(f"{name}: {len(rows)} compiles, {cpu:.0f} CPU-s, peak {max(r['max_rss_gib'] for r in rows):.2f} GiB")
    for r in sorted(rows, key=lambda r: -r["wall_s"]):
        print(f"  {r['output']:<40} {r['wall_s']:7.1f} s wall {r['cpu_s']:7.1f} CPU-s {r['max_rss_gib']:.2f} GiB")
PY
fi

if [ "$1" = tests ]; then
  shard=$2; count=$3; secs=${4:-480}
  $FB build "${SLICE[@]}" --jobs "$(nproc)" > "$OUT/rebuild.txt" 2>&1 || { tail -5 "$OUT/rebuild.txt"; exit 1; }
  echo "== slice ready at $(( $(date +%s) - t0 )) s"; grep -A12 "^compiled" "$OUT/rebuild.txt"
  [ -f "$OUT/hdim128.txt" ] || hdim128
  cd /tmp  # pytest's rootdir: nothing is written into the tree
  # SIGINT at the time limit: pytest stops, and still prints its counts and writes the JUnit file.
  FLASHBUILD_SLICE_HDIMS=40,59,64 FLASHBUILD_SLICE_SHARD=$shard/$count timeout -s INT -k 20 "$secs" \
    python3 -m flashbuild run "${SLICE[@]}" -- python3 -m pytest "$TREE/tests/test_flash_attn.py" \
    -p flashbuild.sources.pytest_slice -p no:cacheprovider -q -n 12 --junitxml="$OUT/tests-$shard-of-$count.xml" \
    > "$OUT/tests-$shard-of-$count.txt" 2>&1
  echo "== tests shard $shard/$count rc $? at $(( $(date +%s) - t0 )) s"
  grep -E "flashbuild slice|passed|failed|error" "$OUT/tests-$shard-of-$count.txt" | tail -5
  grep -E "^FAILED" "$OUT/tests-$shard-of-$count.txt" | head -10
fi
echo "== done at $(( $(date +%s) - t0 )) s"
