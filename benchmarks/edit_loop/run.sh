#!/bin/bash
# The edit loop of issue 17 on the GPU machine (16-core H200): cold main job, no-op rebuild, and
# save -> tested for one forward and one backward kernel header (rebuild, then `test --shapes quick`),
# then the per-TU nvcc phases of the forward TUs (--profile-compile, its own build key).
# From the repository root, carrying only the repo:   bash benchmarks/edit_loop/run.sh
# Budget: under 8 minutes wall (cold ~1 min, two edit rounds ~2 min, the profiled fwd TUs ~1 min).
# Builds go to a fresh cache under /tmp (cold means cold); logs under $OUT; a table is printed last.
set -o pipefail
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD PYTHONDONTWRITEBYTECODE=1
OUT=${OUT:-/tmp/edit_loop_out}
mkdir -p "$OUT"
export FLASHBUILD_CACHE_DIR=/tmp/edit_loop_cache
rm -rf "$FLASHBUILD_CACHE_DIR"
SLICE=(--hdim 64 --dtype fp16 --arch sm90)
FB="python3 -m flashbuild"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; nproc
python3 -c "import torch; print('torch', torch.__version__)"
ROWS=()

timed() {  # NAME COMMAND...: run, log to $OUT/NAME.txt, record the wall seconds
  local name=$1; shift
  local start=$(date +%s.%N)
  "$@" > "$OUT/$name.txt" 2>&1
  local rc=$?
  local wall=$(python3 -c "print(round($(date +%s.%N) - $start, 2))")
  ROWS+=("$(printf '%-28s %8s s  rc %s' "$name" "$wall" "$rc")")
  echo "== $name rc $rc wall $wall s"; tail -4 "$OUT/$name.txt"
}

touch_header() { sleep 0.05; touch "$1"; }

edit_round() {  # NAME HEADER: touch a header, rebuild, test the quick shapes (each timed, then both)
  local name=$1 header=$2 start=$(date +%s.%N)
  touch_header "$header"
  timed "$name-rebuild" $FB build "${SLICE[@]}"
  timed "$name-test" $FB test "${SLICE[@]}" --shapes quick
  ROWS+=("$(printf '%-28s %8s s' "$name-save-to-verdict" "$(python3 -c "print(round($(date +%s.%N) - $start, 2))")")")
}

timed cold-main-job $FB "${SLICE[@]}"
timed noop-rebuild $FB "${SLICE[@]}"
edit_round fwd-header kernels/ampere/fwd_kernel.h
edit_round bwd-header kernels/ampere/bwd_kernel.h
# Which objects the fwd edit rebuilt (ninja's log of the last round is in fwd-header-rebuild.txt);
# the binding must not be among them (tests/test_binding_includes.py).
grep -E '^\[[0-9]+/[0-9]+\]' "$OUT/fwd-header-rebuild.txt" > "$OUT/fwd-header-rebuilt-targets.txt"
timed profile-fwd-tus $FB build "${SLICE[@]}" --direction fwd --compile-only --profile-compile --jobs "$(nproc)"
# (`flashbuild watch` is not timed here: it polls and runs until Ctrl-C; its round is the two steps above.)

echo; echo "edit loop, hdim 64 fp16 sm90 ($(nproc) cores):"
printf '%s\n' "${ROWS[@]}" | tee "$OUT/summary.txt"
echo; sed -n '/nvcc phases per TU/,$p' "$OUT/profile-fwd-tus.txt" | tee "$OUT/phases.txt"
