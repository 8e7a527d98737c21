#!/bin/bash
# The edit loop of issue 17 on the GPU machine (16-core H200), in one call of at most 9 minutes:
#   1. the cold main job (`python3 -m flashbuild --hdim 64 --dtype fp16 --arch sm90`), then its no-op rerun;
#   2. `flashbuild test --shapes quick` in a fresh process (what each round cost before the warm watch);
#   3. save -> verdict through `flashbuild watch` (one warm process, started in the background): the
#      mtime of one header touched per round (content unchanged), the verdict read from the watch's
#      --json log (one line per round: rebuilt targets, build / load / test seconds, verdict time),
#      save -> verdict = that verdict's time minus the touch's; forward: kernels/hopper/fwd_mainloop.h
#      (the forward's and the split-KV's kernel TUs) and kernels/hopper/fwd_epilogue.h, backward:
#      kernels/hopper/bwd_mainloop.h and kernels/hopper/bwd_epilogue.h (FWD_HEADERS, BWD_HEADERS
#      override them; no sm90 TU of the main job includes an Ampere-path kernel header any more but the
#      split-KV's at head dims 192/256, not in it);
#   4. if time is left: the forward and backward TUs' nvcc phases (--profile-compile, its own build key).
# From the repository root:   bash benchmarks/edit_loop/run.sh
# (after: python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl
#  && export PYTHONPATH=/tmp/site:$PWD). Builds go to a fresh cache under /tmp (cold means cold);
# logs under $OUT; the summary table is printed last.
set -o pipefail
START=$(date +%s)
BUDGET=${BUDGET:-530}   # seconds: the device call's limit is 600 (9 minutes + the machine's start)
case ":${PYTHONPATH:-}:" in *":$PWD:"*) ;; *) export PYTHONPATH=${PYTHONPATH:+$PYTHONPATH:}$PWD ;; esac
export PYTHONUNBUFFERED=1 PYTHONDONTWRITEBYTECODE=1
OUT=${OUT:-/tmp/edit_loop_out}
mkdir -p "$OUT"
export FLASHBUILD_CACHE_DIR=/tmp/edit_loop_cache
rm -rf "$FLASHBUILD_CACHE_DIR"
SLICE=(--hdim 64 --dtype fp16 --arch sm90)
FB=${FB:-python3 -m flashbuild}
FWD_HEADERS=(${FWD_HEADERS:-kernels/hopper/fwd_mainloop.h kernels/hopper/fwd_epilogue.h})
BWD_HEADERS=(${BWD_HEADERS:-kernels/hopper/bwd_mainloop.h kernels/hopper/bwd_epilogue.h})
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; nproc
python3 -c "import torch; print('torch', torch.__version__, 'cuda', torch.version.cuda, torch.cuda.is_available())"
ROWS=()
WATCH_PID=

now() { date +%s.%N; }
left() { echo $((BUDGET - ($(date +%s) - START))); }
stop_watch() { [ -n "$WATCH_PID" ] && kill "$WATCH_PID" 2>/dev/null && wait "$WATCH_PID" 2>/dev/null; WATCH_PID=; }
trap stop_watch EXIT

timed() {  # NAME COMMAND...: run, log to $OUT/NAME.txt, record the wall seconds
  local name=$1; shift
  local start=$(now)
  "$@" > "$OUT/$name.txt" 2>&1
  local rc=$?
  local wall=$(python3 -c "print(round($(now) - $start, 2))")
  ROWS+=("$(printf '%-34s %8s s  rc %s' "$name" "$wall" "$rc")")
  echo "== $name rc $rc wall $wall s"; tail -4 "$OUT/$name.txt"
}

rounds() { [ -f "$OUT/watch.jsonl" ] && wc -l < "$OUT/watch.jsonl" || echo 0; }

wait_round() {  # N: wait until the watch has recorded N rounds (or it died, or the budget ends)
  while [ "$(rounds)" -lt "$1" ]; do
    if ! kill -0 "$WATCH_PID" 2>/dev/null; then echo "watch exited; its log:"; tail -20 "$OUT/watch.txt"; return 1; fi
    if [ "$(left)" -le 0 ]; then echo "out of time waiting for round $1"; return 1; fi
    sleep 0.1
  done
}

watch_round() {  # NAME HEADER: touch the header's mtime, wait for the watch's verdict, read its record
  local name=$1 header=$2 n=$(( $(rounds) + 1 ))
  sleep 0.2
  local saved=$(now)
  touch "$header"
  if ! wait_round "$n"; then ROWS+=("$(printf '%-34s  no verdict' "$name")"); return 1; fi
  ROWS+=("$(python3 - "$OUT/watch.jsonl" "$n" "$saved" "$name" <<'EOF'
import json, sys
path, n, saved, name = sys.argv[1], int(sys.argv[2]), float(sys.argv[3]), sys.argv[4]
r = json.loads(open(path).read().splitlines()[n - 1])
kernels = [t for t in r["rebuilt"] if t not in ("binding", "link")]
print(f"{name:<34} {r['finished'] - saved:8.2f} s  save->verdict (watch's own: {r['total_s']:.2f}); "
      f"build {r['build_s']:.2f} load {r['load_s']:.2f} test {r['test_s']:.2f}; {len(kernels)} TUs rebuilt, "
      f"{r['checks']} checks of {len(r['tested'])} variants: {r['result']}")
EOF
)")
  tail -1 "$OUT/watch.jsonl" | python3 -c "import json,sys; print('==', json.load(sys.stdin)['verdict'])"
}

timed cold-main-job $FB "${SLICE[@]}"
timed noop-rerun $FB "${SLICE[@]}"
timed test-quick-fresh-process $FB test "${SLICE[@]}" --shapes quick

# The warm watch: its first round loads the build and tests every variant; then one round per touch.
$FB watch "${SLICE[@]}" --json "$OUT/watch.jsonl" > "$OUT/watch.txt" 2>&1 &
WATCH_PID=$!
first=$(now)
if wait_round 1; then
  ROWS+=("$(printf '%-34s %8s s  (start, load, test every variant)' watch-first-round \
    "$(python3 -c "print(round($(now) - $first, 2))")")")
  for header in "${FWD_HEADERS[@]}"; do watch_round "fwd-$(basename "$header" .h)" "$header" || break; done
  for header in "${BWD_HEADERS[@]}"; do watch_round "bwd-$(basename "$header" .h)" "$header" || break; done
fi
stop_watch
grep -v '^\[[0-9]*/[0-9]*\]' "$OUT/watch.txt" | tail -30

if [ "$(left)" -gt 120 ]; then
  timed profile-tus $FB build "${SLICE[@]}" --direction fwd,bwd --compile-only --profile-compile --jobs "$(nproc)"
else
  ROWS+=("profile-tus: skipped ($(left) s left)")
fi

[ -f "$OUT/profile-tus.txt" ] && { echo; sed -n '/nvcc phases per TU/,$p' "$OUT/profile-tus.txt" | tee "$OUT/phases.txt"; }
echo; echo "watch rounds: $OUT/watch.jsonl; logs: $OUT"
echo; echo "edit loop, hdim 64 fp16 sm90 ($(nproc) cores; $(($(date +%s) - START)) s in all):"
printf '%s\n' "${ROWS[@]}" | tee "$OUT/summary.txt"
