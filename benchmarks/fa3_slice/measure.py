#!/usr/bin/env python3
"""A compiler launcher (`flashbuild --launcher benchmarks/fa3_slice/measure.py`): runs the compile and
appends one JSON line to $FB_MEASURE_LOG with the object it made, wall seconds, CPU seconds (user +
system of the compiler and all it ran) and the peak resident memory of its largest process."""
import sys  # noqa: E402
if sys.argv[1:] in (["-h"], ["--help"]):  # usage without a GPU or a tree (tests/test_benchmark_scripts.py)
    print(__doc__)
    sys.exit(0)

import json
import os
import resource
import subprocess
import sys
import time

args = sys.argv[1:]
output = args[args.index("-o") + 1] if "-o" in args else "?"
started = time.monotonic()
code = subprocess.call(args)
wall = time.monotonic() - started
usage = resource.getrusage(resource.RUSAGE_CHILDREN)
log = os.environ.get("FB_MEASURE_LOG")
if log:
    with open(log, "a") as f:
        f.write(json.dumps({"output": os.path.basename(output), "wall_s": round(wall, 2),
                            "cpu_s": round(usage.ru_utime + usage.ru_stime, 2),
                            "max_rss_gib": round(usage.ru_maxrss / 2**20, 3), "rc": code}) + "\n")
sys.exit(code)
