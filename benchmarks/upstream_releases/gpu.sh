#!/bin/bash
# Issues 44 and 43 on the H200 (16 cores, torch 2.11.0+cu130): for each release line one narrowed slice
# built and linked against that torch (the tree detected: no --profile), and a shard of the tree's own tests
# run on it through flashbuild.sources.pytest_slice; beside them, FA2 2.8.3's save->verdict under watch.
# From the repository root, with the data bundle carried (git-ignored; README.md says how it is made):
#   DATA=../w43u-data BUDGET=290 bash benchmarks/upstream_releases/gpu.sh
#   LINES="fa2-2.7 fa3-3.0.0-nopackage fa3-3.0.0" DATA=.device/w44b-data BUDGET=200 bash benchmarks/upstream_releases/gpu.sh
# The bundle: the flash-attn sdists 2.5.9.post1, 2.6.3, 2.7.4.post1, 2.8.3; FA3 hopper/ at v2.8.3 and at
# 0251105a, each with the csrc/cutlass/include it pins; tests/test_flash_attn.py of v2.5.9.post1 and v2.6.3
# (those sdists carry no tests/), copied into their trees' tests/ here.
# Every step is bounded by the budget (timeout), so what finished comes back; the table is printed last.
set -o pipefail
export PYTHONUNBUFFERED=1 PYTHONDONTWRITEBYTECODE=1 PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH}
RESULTS=${OUT:-/tmp/releases_results}; LOGS=${LOGS:-/tmp/releases_logs}; DATA=${DATA:-.device/w43u-data}
BUDGET=${BUDGET:-290}; TEST_SECS=${TEST_SECS:-100}
t0=$(date +%s); deadline=$((t0 + BUDGET)); left() { echo $((deadline - $(date +%s))); }
since() { python3 -c "print(round($(date +%s.%N) - $1, 1))"; }
mkdir -p "$RESULTS" "$LOGS"
export FLASHBUILD_CACHE_DIR=/tmp/releases_cache
FB=${FB:-python3 -m flashbuild}   # FB=fake.sh rehearses the control flow without a GPU
{ nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; echo "cores $(nproc)"; nvcc --version | tail -2
  python3 -c "import torch; print('torch', torch.__version__, 'cuda', torch.version.cuda)"; free -g | head -2; } > "$LOGS/host.txt" 2>&1

# flash-attn 2.5 and 2.6 kernels include ATen/cuda/CUDAContext.h, which needs the toolkit's cuSPARSE /
# cuBLAS / cuSOLVER headers: where nvcc does not find them, the pip packages' include dirs go on CPATH
if ! printf '#include <cusparse.h>\n#include <cublas_v2.h>\n#include <cusolverDn.h>\n' | nvcc -E -x cu - > /dev/null 2>&1; then
  extra=$(find "$(python3 -c 'import sys; print(sys.prefix)')" /usr/local /opt -name cusparse.h -o -name cublas_v2.h -o -name cusolverDn.h 2>/dev/null \
          | xargs -r -n1 dirname | sort -u | paste -sd:)
  export CPATH=${extra}${CPATH:+:$CPATH}; echo "CPATH=$CPATH (the math libraries' headers)" >> "$LOGS/host.txt"
fi

# ---- the trees (the bundle's digests checked first); LINES picks the release lines (default: the six
# issue 44 names), each unpacked from its archive in the bundle
LINES=${LINES:-"fa2-2.5 fa2-2.6 fa2-2.7.4 fa2-2.8 fa3-3.0.0b1 fa3-3.0.0"}; WATCH=${WATCH:-1}
T=${TREES:-/tmp/trees}
( cd "$DATA" && sha256sum -c --quiet SHA256SUMS ) > "$LOGS/unpack.txt" 2>&1 || { cat "$LOGS/unpack.txt"; exit 1; }
fa2_tree() { case $1 in fa2-2.5) echo 2.5.9.post1;; fa2-2.6) echo 2.6.3;; fa2-2.7) echo 2.7.3;; fa2-2.7.4) echo 2.7.4.post1;; fa2-2.8) echo 2.8.3;; esac; }
fa3_tree() { case $1 in fa3-3.0.0b1) echo v2.8.3-cutlass-dc48179;; fa3-3.0.0-nopackage) echo b02b07e1-cutlass-7127592;; fa3-3.0.0) echo 0251105a-cutlass-7127592;; esac; }
for name in $LINES; do
  case $name in
    fa2-*) v=$(fa2_tree $name); mkdir -p $T && tar -C $T -xzf "$DATA/flash_attn-$v.tar.gz" || exit 1
           if [ ! -d $T/flash_attn-$v/tests ]; then   # 2.5.9.post1 and 2.6.3 carry no tests/: the tag's, from the bundle
             tar -C $T -xzf "$DATA/fa2-tests-2.5.9.post1-2.6.3.tar.gz" || exit 1
             mkdir -p $T/flash_attn-$v/tests && cp $T/tests-$v/tests/test_flash_attn.py $T/flash_attn-$v/tests/ || exit 1; fi ;;
    fa3-*) mkdir -p $T/$name && tar -C $T/$name -xzf "$DATA/fa3-$(fa3_tree $name).tar.gz" || exit 1 ;;
    *) echo "unknown line $name" >> "$LOGS/unpack.txt"; exit 1 ;;
  esac
done
if [ "$WATCH" = 1 ]; then mkdir -p $T/watch && tar -C $T/watch -xzf "$DATA/flash_attn-2.8.3.tar.gz" || exit 1; fi   # watch edits its own copy
echo "unpacked in $(( $(date +%s) - t0 )) s" >> "$LOGS/unpack.txt"

# ---- one line: build the slice (no --profile: the tree names its release), then its tests
# FA2: hdim 64 fp16, fwd+bwd+split-KV (its forward tests run the backward; its API splits small forwards),
# causal on, the split switch kept; test_flash_attn_output's cases. FA3: hdim 128 fp16 forward, causal on,
# no features; the whole hopper/test_flash_attn.py (the plugin sets FLASH_ATTENTION_DISABLE_BACKWARD).
FA2SEL=(--hdim 64 --dtype fp16 --arch sm90 --direction fwd,bwd,splitkv --causal on --features split)
FA3SEL=(--hdim 128 --dtype fp16 --arch sm90 --direction fwd --causal on --features none)
line() {  # NAME TREE TESTS JOBS SELECTION...
  local name=$1 tree=$2 tests=$3 jobs=$4; shift 4
  ( s=$(date +%s.%N); timeout "$(( $(left) > 1 ? $(left) : 1 ))" $FB build --source "$tree" "$@" --jobs "$jobs" > "$LOGS/$name-build.txt" 2>&1
    rc=$?; echo "$(since "$s") $rc" > "$LOGS/$name-build.wall"
    [ $rc -eq 0 ] || exit 0
    s=$(date +%s.%N); secs=$(( $(left) - 25 )); [ $secs -gt $TEST_SECS ] && secs=$TEST_SECS
    [ $secs -gt 20 ] || { echo "no time left for the tests" > "$LOGS/$name-tests.txt"; exit 0; }
    (cd /tmp && timeout -s INT -k 10 $secs $FB run --source "$tree" "$@" -- python3 -m pytest "$tests" \
       -p flashbuild.sources.pytest_slice -p no:cacheprovider --import-mode=append -q -rfE) > "$LOGS/$name-tests.txt" 2>&1
    rc=$?; echo "$(since "$s") $rc" > "$LOGS/$name-tests.wall" ) &
}
for name in $LINES; do
  case $name in
    fa2-*) tree=$T/flash_attn-$(fa2_tree $name); line $name $tree $tree/tests/test_flash_attn.py::test_flash_attn_output 5 "${FA2SEL[@]}" ;;
    fa3-*) line $name $T/$name $T/$name/hopper/test_flash_attn.py 4 "${FA3SEL[@]}" ;;
  esac
done

# ---- issue 43 (WATCH=1): FA2 2.8.3 hdim-128 fp16 forward, causal on, features none, under watch: the first
# round tests the slice; then an edit (touch) of flash_fwd_kernel.h and the next round's save->verdict
if [ "$WATCH" = 1 ]; then
  WATCHSEL=(--source $T/watch/flash_attn-2.8.3 --hdim 128 --dtype fp16 --arch sm90 --direction fwd --causal on --features none)
  s=$(date +%s.%N); timeout "$(left)" $FB build "${WATCHSEL[@]}" --jobs 3 > "$LOGS/watch-build.txt" 2>&1
  rc=$?; echo "$(since "$s") $rc" > "$LOGS/watch-build.wall"
  echo "== watch slice built: $(cat "$LOGS/watch-build.wall") at $(( $(date +%s) - t0 )) s"
  (cd /tmp && exec timeout "$(( $(left) - 20 ))" $FB watch "${WATCHSEL[@]}" --jobs 3 --json "$LOGS/watch.jsonl") > "$LOGS/watch.txt" 2>&1 &
  wpid=$!
  until [ "$(wc -l < "$LOGS/watch.jsonl" 2>/dev/null || echo 0)" -ge 1 ] || ! kill -0 $wpid 2>/dev/null; do sleep 1; done
  # the edit waits for the lines' builds (else its compile shares the 16 cores with ~30 others), at most
  # until 100 s are left
  until [ "$(ls "$LOGS"/fa*-build.wall 2>/dev/null | wc -l)" -ge $(echo $LINES | wc -w) ] || [ "$(left)" -lt 100 ]; do sleep 1; done
  sleep 2; touch $T/watch/flash_attn-2.8.3/csrc/flash_attn/src/flash_fwd_kernel.h; echo "edit at $(( $(date +%s) - t0 )) s" >> "$LOGS/watch.txt.at"
  until [ "$(wc -l < "$LOGS/watch.jsonl" 2>/dev/null || echo 0)" -ge 2 ] || ! kill -0 $wpid 2>/dev/null; do sleep 1; done
  kill $wpid 2>/dev/null; wait $wpid 2>/dev/null
  echo "== watch done at $(( $(date +%s) - t0 )) s"
fi
wait   # the lines (each bounded by the budget)

# ---- the table: per line, the release detected, build seconds and rc, the tests' counts
LINES="$LINES" python3 - "$LOGS" > "$LOGS/table.md" <<'EOF'
import os, re, sys
from pathlib import Path
logs = Path(sys.argv[1])
def read(name):
    p = logs / name
    return p.read_text(errors="replace") if p.is_file() else ""
print("| line | detected | build s (rc) | tests: passed / failed / errors / skipped / xfailed / deselected | tests s (rc) |")
print("| --- | --- | --- | --- | --- |")
for name in os.environ["LINES"].split():
    build = read(f"{name}-build.txt")
    detected = re.search(r"; (flash-attn-\d@[\w.\-]+) at ", build)
    bwall = read(f"{name}-build.wall").split() or ["-", "not run"]
    tests = read(f"{name}-tests.txt")
    counts = {k: 0 for k in ("passed", "failed", "error", "skipped", "xfailed", "deselected")}
    summary = [l for l in tests.splitlines() if re.search(r"\b(passed|failed|deselected|error|errors|no tests ran)\b", l)
               and re.search(r" in [\d.]+s", l)]
    for n, k in re.findall(r"(\d+) (passed|failed|errors?|skipped|xfailed|deselected)", summary[-1] if summary else ""):
        counts[k.rstrip("s") if k.startswith("error") else k] += int(n)
    twall = read(f"{name}-tests.wall").split() or ["-", "not run"]
    shown = " / ".join(str(counts[k]) for k in counts) if summary else "no summary line"
    print(f"| {name} | {detected.group(1) if detected else '?'} | {bwall[0]} ({bwall[1]}) | {shown} | {twall[0]} ({twall[1]}) |")
EOF
for f in "$FLASHBUILD_CACHE_DIR"/*/; do [ -f "$f/.ninja_log" ] && cp "$f/.ninja_log" "$LOGS/ninja_log-$(basename "$f")"; done
tar -czf "$RESULTS/logs.tgz" -C "$LOGS" .
cp "$LOGS/table.md" "$RESULTS/table.md"; cp "$LOGS/watch.txt" "$RESULTS/watch.txt" 2>/dev/null
echo "== host"; cat "$LOGS/host.txt"
echo "== builds (wall s, rc)"; for f in "$LOGS"/*-build.wall; do echo "$(basename "$f" .wall): $(cat "$f")"; done
for f in "$LOGS"/*-build.txt; do grep -qE "^(error|Error)|FAILED|rc [1-9]" "$f" && { echo "-- $(basename "$f")"; grep -E "error|Error" "$f" | head -5 | cut -c1-300; }; done
echo "== tests"; for f in "$LOGS"/*-tests.txt; do echo "-- $(basename "$f"): $(grep -E " in [0-9.]+s" "$f" | tail -1)"
  grep -E "^(FAILED|ERROR)" "$f" | head -3 | cut -c1-300; done
[ "$WATCH" = 1 ] && { echo "== watch"; grep -E "^\[|save->verdict|rror" "$LOGS/watch.txt" | cut -c1-400; }
echo "== table"; cat "$LOGS/table.md"
