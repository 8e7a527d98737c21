#!/bin/bash
# launcher: one core per compile (core picked by a lock), wall and peak RSS appended to a log
out=""; for a in "$@"; do case "$prev" in -o) out="$a";; esac; prev="$a"; done
exec 9>/tmp/core0.lock
if flock -n 9; then core=0; else exec 9>/tmp/core1.lock; flock 9; core=1; fi
/usr/bin/time -f "$(basename "$out") %e s %M KB" -a -o /tmp/tu_times.log taskset -c $core "$@"
