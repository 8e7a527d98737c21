"""Which kernel objects of two builds differ in their SASS: per object, each function's instructions
(addresses and trailing comments stripped) compared; the count of instructions of each differing one.

    python3 benchmarks/checks/sass_diff.py OBJ_DIR_A OBJ_DIR_B     # the obj/ dirs of two builds

Runs anywhere nvcc compiled the objects (no GPU): a change that leaves an object's SASS identical leaves
that kernel's speed as it was. CUOBJDUMP= for another cuobjdump.
"""
import sys  # noqa: E402
if sys.argv[1:] in (["-h"], ["--help"]):  # usage without a GPU or a tree (tests/test_benchmark_scripts.py)
    print(__doc__)
    sys.exit(0)
import os
import re
import subprocess
import sys
from pathlib import Path

CU = os.environ.get("CUOBJDUMP", "cuobjdump")


def funcs(obj):
    """Each function of a kernel object: its SASS instructions, addresses and trailing comments stripped."""
    text = subprocess.run([CU, "-sass", str(obj)], capture_output=True, text=True).stdout
    out, name = {}, None
    for line in text.splitlines():
        m = re.match(r"\s+Function : (\S+)", line)
        if m:
            name = m.group(1); out[name] = []; continue
        m = re.match(r"\s+/\*[0-9a-f]{4,}\*/\s+(.*?)\s*;", line)
        if m and name:
            out[name].append(m.group(1))
    return out


def main(a: Path, b: Path) -> None:
    for oa in sorted(a.glob("*.o")):
        ob = b / oa.name
        fa, fb = funcs(oa), funcs(ob)
        same = fa == fb
        detail = "" if same else "; ".join(f"{k[:60]}: {len(fa.get(k, []))} vs {len(fb.get(k, []))} instr"
                                          for k in sorted(set(fa) | set(fb)) if fa.get(k) != fb.get(k))
        print(f"{oa.name:55s} {'identical SASS' if same else 'DIFFERS: ' + detail}")


if __name__ == "__main__":
    main(Path(sys.argv[1]), Path(sys.argv[2]))
