#!/bin/bash
# launcher: record each compile's peak RSS (KB) and wall seconds, with its output name
out=""; prev=""; for a in "$@"; do [ "$prev" = "-o" ] && out=$a; prev=$a; done
exec /usr/bin/time -a -o /tmp/split/rss.log -f "%M KB %e s $out" "$@"
