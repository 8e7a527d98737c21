"""Compile some TUs of one selection from a flashbuild tree and dump their SASS, for comparing two trees.

Run with the tree's own package first on PYTHONPATH (the tree whose kernels/ and templates/ are compiled):

    PYTHONPATH=TREE python3 benchmarks/house_sass/sass_tree.py BUILD_DIR [TARGETS_FILE]

It renders the selection below, writes build.ninja (compile-only: no binding, no link), then runs
`nice -n 10 ninja -j 1` on the TARGETS_FILE's objects only (default: targets.txt beside this file), and
writes `cuobjdump -sass` of each (a device-only kernel TU's fatbin, a launch TU's object) to
BUILD_DIR/sass/<tu>.sass. One compile at a time: the 2-core machine is shared. compare.py diffs two
such dirs. A TARGETS_FILE may name its own selection in a line `# selection: hdim=64,128 causal=both ...`
(keys of SELECTION; the others keep SELECTION's values), e.g. targets-splitkv-deal.txt.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

from flashbuild.pipeline import builder, render

SELECTION = dict(hdim="64,128", dtype="fp16", arch="sm80,sm90", direction="fwd,bwd,splitkv", causal="on",
                 features="none")
HERE = Path(__file__).resolve().parent


def cuobjdump() -> str:
    """cuobjdump from PATH, next to nvcc, or from the nvidia-cuda-cuobjdump wheel."""
    found = shutil.which("cuobjdump")
    if found:
        return found
    try:
        import nvidia.cu13 as cu13  # the wheel's layout: nvidia/cu13/bin/cuobjdump
        wheel = Path(list(cu13.__path__)[0]) / "bin" / "cuobjdump"
        if wheel.is_file():
            return str(wheel)
    except ImportError:
        pass
    sys.exit("cuobjdump not found: put it on PATH or `pip install nvidia-cuda-cuobjdump`")


def file_selection(lines: list[str]) -> dict[str, str]:
    """SELECTION with the targets file's `# selection: key=value ...` line over it (unknown keys refused)."""
    chosen = dict(SELECTION)
    for line in lines:
        if line.startswith("# selection:"):
            for item in line.split(":", 1)[1].split():
                key, _, value = item.partition("=")
                if key not in SELECTION or not value:
                    sys.exit(f"{item!r} in the targets file's selection line: use key=value, keys {sorted(SELECTION)}")
                chosen[key] = value
    return chosen


def main(build_dir: Path, targets_file: Path) -> None:
    lines = targets_file.read_text().splitlines()
    targets = [line.strip() for line in lines if line.strip() and not line.startswith("#")]
    selection, options = builder.parse_request(**file_selection(lines), build_dir=build_dir, jobs=1)
    plan = builder.make_plan(selection, options)
    tools = builder.toolchain(plan)
    builder.prepare(plan)
    render.render_build(plan.selection, plan.gen_dir, build_key=plan.key, profile=plan.profile,
                        context=builder.tree_context(plan))
    (plan.build_dir / "obj").mkdir(exist_ok=True)
    render.write_if_different(plan.build_dir / "build.ninja", builder.ninja_text(plan, tools, None))
    subprocess.run(["nice", "-n", "10", "ninja", "-C", str(plan.build_dir), "-j", "1", "-k", "0", *targets], check=False)
    dump = cuobjdump()
    out = plan.build_dir / "sass"
    out.mkdir(exist_ok=True)
    for target in targets:
        obj = plan.build_dir / target
        source = obj.with_name(obj.name + ".fatbin") if obj.with_name(obj.name + ".fatbin").is_file() else obj
        if not source.is_file():
            print(f"{target}: not built", file=sys.stderr)
            continue
        sass = subprocess.run([dump, "-sass", str(source)], capture_output=True, text=True, check=True).stdout
        (out / (obj.stem + ".sass")).write_text(sass)
        print(f"{target}: {sass.count('Function :')} functions", file=sys.stderr)


if __name__ == "__main__":
    if {"-h", "--help"} & set(sys.argv[1:]):  # a usage, never a run (a build dir named --help, say)
        print(__doc__)
        sys.exit(0)
    if len(sys.argv) not in (2, 3):
        sys.exit(__doc__)
    main(Path(sys.argv[1]).resolve(), Path(sys.argv[2]) if len(sys.argv) == 3 else HERE / "targets.txt")
