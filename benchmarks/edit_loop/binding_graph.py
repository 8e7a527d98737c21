"""Write the main job's build dir as a linking build would (generated headers and build.ninja with the
binding and link edges), without compiling anything, and print the binding edge's command as ninja
runs it (`ninja -t commands obj/flash_api.o`). binding_compile.sh times that command.

    python3 benchmarks/edit_loop/binding_graph.py BUILD_DIR

Works with a CPU torch too: the link spec reads torch's headers and flags, it links nothing here.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from flashbuild import env
from flashbuild.pipeline import builder, cache, graph, render, toolchain


def main(build_dir: Path) -> str:
    selection, options = builder.parse_request(hdim=64, dtype="fp16", arch="sm90", build_dir=build_dir)
    plan = builder.make_plan(selection, options)
    tools = builder.toolchain(plan)
    builder.prepare(plan)
    link = toolchain.torch_link_spec(plan)
    with cache.private_umask():
        render.render_build(plan.selection, plan.gen_dir, build_key=plan.key, profile=plan.profile,
                            context=builder.tree_context(plan))
        (plan.build_dir / "obj").mkdir(exist_ok=True, mode=cache.PRIVATE_DIR)
        render.write_if_different(plan.build_dir / "build.ninja", builder.ninja_text(plan, tools, link))
    commands = subprocess.run([str(env.find_ninja()), "-C", str(plan.build_dir), "-t", "commands", graph.BINDING_OBJECT],
                              capture_output=True, text=True, check=True).stdout.splitlines()
    return commands[-1]


if __name__ == "__main__":
    if len(sys.argv) != 2 or sys.argv[1] in ("-h", "--help"):  # a usage, never a build dir named --help
        print(__doc__)
        sys.exit(0 if sys.argv[1:] in (["-h"], ["--help"]) else 2)
    print(main(Path(sys.argv[1]).resolve()))
