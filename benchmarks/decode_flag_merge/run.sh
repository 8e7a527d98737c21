#!/usr/bin/env bash
# Issue 45, the flagged merge tail (README.md beside), one nvidia-h200 call: the two builds it needs side by side (the
# KV-cache tests' selection, decode_table.py's), the one-launch GPU tests (every merge tail, flag-merge among them,
# against the three-kernel path bit for bit and the fp32 reference), then decode_table.py with the flagged and the
# lane tails as columns beside the default, graph-replayed and eager, SDPA's flash and cuDNN beside. Carry `.whl`. From
# the repo root after the wheel line, in a checkout of 08974ab (the form's last commit; main no longer has flag-merge):
#   OUT=$OUT [BATCH=1,8] [CACHE=4096,16384,65536] [HDIM=64,128] [REPS=15] [TESTS=1] [PATHS=flag-merge,lane-merge] \
#     bash benchmarks/decode_flag_merge/run.sh
. "$(dirname "$0")/../study_start.sh"
# The elected merge's call (../decode_elected_merge/run.sh: builds, the one-launch tests, the table) with these tails.
PATHS=${PATHS:-flag-merge,lane-merge} exec bash "$(dirname "$0")/../decode_elected_merge/run.sh"
