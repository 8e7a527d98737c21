#!/bin/bash
# The same machine, right after ab/call.sh: .device/head = `git archive c832ce6`.
cd .device/head && export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1 && mkdir -p $OUT/edit && BUDGET=230 OUT=$OUT/edit bash benchmarks/edit_loop/run.sh > $OUT/edit-loop.txt 2>&1; echo "edit loop rc $?"; cat $OUT/edit/summary.txt
