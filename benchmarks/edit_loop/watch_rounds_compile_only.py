"""The warm watch's rounds (flashbuild/debug/watch.py's WarmLoop over the real builder) on a machine
without CUDA torch or a GPU: compile-only, so no link, no load and no checks (they are faked): touch
one header's mtime -> the objects ninja recompiled -> the variants the watch would test, with the
build seconds. The first round is the cached build's no-op. FLASHBUILD_ROOT must be a copy of the
tree (kernels, templates, configs), so that the shared checkout's mtimes are left alone:

    cp -r kernels templates configs /tmp/el2/root/
    FLASHBUILD_ROOT=/tmp/el2/root FLASHBUILD_CACHE_DIR=/tmp/el2/cache \
        python3 -m flashbuild --hdim 64 --dtype fp16 --arch sm90 --compile-only      # cold
    FLASHBUILD_ROOT=/tmp/el2/root FLASHBUILD_CACHE_DIR=/tmp/el2/cache PYTHONPATH=$PWD \
        python3 benchmarks/edit_loop/watch_rounds_compile_only.py rounds.jsonl hopper/fwd_mainloop.h ampere/fwd_kernel.h
"""
import sys  # noqa: E402
if sys.argv[1:] in (["-h"], ["--help"]):  # usage without a GPU or a tree (tests/test_benchmark_scripts.py)
    print(__doc__)
    sys.exit(0)
import json, os, sys, time
from pathlib import Path
from flashbuild.pipeline import builder
from flashbuild.debug import checking, watch

root = Path(os.environ["FLASHBUILD_ROOT"])
selection, options = builder.parse_request(hdim=64, dtype="fp16", arch="sm90", compile_only=True)

class Module:
    def __init__(self, names): self.names = names
    def variants(self): return self.names

loop = watch.WarmLoop(build=lambda: builder.build(selection, options),
                      load=lambda result: Module(result.manifest["variants"]),
                      test=lambda module, variants: [checking.Row(v.name, "-") for v in variants],
                      objects=lambda result: watch.build_objects(result.build_dir))
out = open(sys.argv[1], "w")
first = loop.round([], time.time())
print("first:", first.line(), flush=True)
out.write(json.dumps(first.to_json()) + "\n")
for header in sys.argv[2:]:
    time.sleep(0.2)
    saved = time.time()
    os.utime(root / "kernels" / header)
    done = loop.round([header], saved)
    print(f"{header}: {done.line()}", flush=True)
    out.write(json.dumps(done.to_json()) + "\n")
    out.flush()
