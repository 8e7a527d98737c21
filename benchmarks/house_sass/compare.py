"""Compare the SASS of two sass_tree.py dirs, kernel by kernel, addresses aside.

    python3 benchmarks/house_sass/compare.py BEFORE_DIR AFTER_DIR [--namespace-moves] [--param-offsets] > summary.txt

Each <tu>.sass (cuobjdump -sass) is split into its functions. A function's text is compared without the
instruction offsets (/*0a30*/) and the encoding words (/* 0x... */), which move with any code before them;
branch targets stay in, so code that moved inside a function still shows. Functions are matched by
demangled name; with --namespace-moves, `flashbuild::ampere::` and `flashbuild::hopper::` are read as
`flashbuild::`, so that a helper that only moved to kernels/common/ (and so into namespace flashbuild)
matches its old self; when a TU has exactly one function on each side left unmatched (a kernel whose template
arguments changed), the two are compared as one, renamed. With --param-offsets, the offsets of kernel-parameter
reads (c[0x0][0x...]) are left out too: a field taken out of a parameter struct moves every field after it; a
function that still differs is then told apart further: when its lines differ only in hex immediates (parameter
addresses formed in registers, e.g. of the TMA descriptors after the struct) the shifts are counted, and any other
changed lines too. Prints one line per function: same, DIFFERS (with
the count of changed lines), or only on one side; exits 1 if any differs or a TU was not built after, 2 if
BEFORE holds no dump.
"""

from __future__ import annotations

import difflib
import re
import shutil
import subprocess
import sys
from pathlib import Path

OFFSET = re.compile(r"/\*[0-9a-f]{4,}\*/")
ENCODING = re.compile(r"/\* 0x[0-9a-f]{16} \*/")
FUNCTION = re.compile(r"^\s*Function : (\S+)", re.MULTILINE)
PARAM = re.compile(r"c\[0x0\]\[0x[0-9a-f]+\]")
IMMEDIATE = re.compile(r"0x[0-9a-f]+")


def demangle(names: list[str]) -> list[str]:
    tool = shutil.which("c++filt")
    if not tool or not names:
        return names
    return subprocess.run([tool], input="\n".join(names), capture_output=True, text=True, check=True).stdout.splitlines()


def functions(text: str, namespace_moves: bool, param_offsets: bool = False) -> dict[str, list[str]]:
    parts = FUNCTION.split(text)  # [head, name1, body1, name2, body2, ...]
    names = demangle(parts[1::2])
    out = {}
    for name, body in zip(names, parts[2::2]):
        if namespace_moves:
            name = name.replace("flashbuild::ampere::", "flashbuild::").replace("flashbuild::hopper::", "flashbuild::")
        lines = [ENCODING.sub("", OFFSET.sub("", line)).strip() for line in body.splitlines()]
        if param_offsets:
            lines = [PARAM.sub("c[0x0][param]", line) for line in lines]
        out[name] = [line for line in lines if line]
    return out


def immediates(a: list[str], b: list[str]) -> str:
    """Of two equally long functions: the shifts of the hex immediates in lines that differ only in those, and how many
    lines differ otherwise (reordered or changed instructions)."""
    shifts: dict[int, int] = {}
    other = 0
    for x, y in zip(a, b):
        if x == y:
            continue
        if IMMEDIATE.sub("#", x) != IMMEDIATE.sub("#", y):
            other += 1
            continue
        for p, q in zip(IMMEDIATE.findall(x), IMMEDIATE.findall(y)):
            if p != q:
                shifts[int(q, 16) - int(p, 16)] = shifts.get(int(q, 16) - int(p, 16), 0) + 1
    return (f"immediates shifted (shift: count) {dict(sorted(shifts.items()))}; {other} lines differ otherwise"
            if shifts else f"{other} lines differ, not in immediates alone")


def main(before: Path, after: Path, namespace_moves: bool, param_offsets: bool = False) -> int:
    dumps = sorted(before.glob("*.sass"))
    if not dumps:  # a wrong dir would otherwise compare nothing and exit 0, "unchanged"
        print(f"no <tu>.sass in {before}: give the dirs sass_tree.py built (their sass/ is read)", file=sys.stderr)
        return 2
    differs = 0
    for sass in dumps:
        other = after / sass.name
        if not other.is_file():
            print(f"{sass.stem}: not built after")
            differs += 1  # nothing to compare is not "the same"
            continue
        old = functions(sass.read_text(), namespace_moves, param_offsets)
        new = functions(other.read_text(), namespace_moves, param_offsets)
        print(f"{sass.stem}: {len(old)} functions before, {len(new)} after")
        gone, added = sorted(old.keys() - new.keys()), sorted(new.keys() - old.keys())
        pairs = [(name, name, name) for name in sorted(old.keys() & new.keys())]
        if len(gone) == 1 and len(added) == 1:  # one kernel whose template arguments changed: compare it as renamed
            pairs.append((gone[0], added[0], f"{gone[0]} -> (renamed) {added[0]}"))
            gone, added = [], []
        for name in gone + added:
            print(f"  only {'before' if name in old else 'after'}: {name}")
            differs += 1
        for before_name, after_name, label in pairs:
            a, b = old[before_name], new[after_name]
            if a == b:
                print(f"  same ({len(a)} lines): {label}")
            else:
                changed = sum(1 for line in difflib.unified_diff(a, b, lineterm="", n=0)
                              if line[:1] in "+-" and not line.startswith(("+++", "---")))
                print(f"  DIFFERS ({changed} lines changed of {len(a)}): {label}")
                if param_offsets and len(a) == len(b):
                    print("    " + immediates(a, b))
                differs += 1
    return 1 if differs else 0


if __name__ == "__main__":
    if {"-h", "--help"} & set(sys.argv[1:]):  # a usage, never a run (a build dir named --help, say)
        print(__doc__)
        sys.exit(0)
    args = [a for a in sys.argv[1:] if a not in ("--namespace-moves", "--param-offsets")]
    if len(args) != 2:
        sys.exit(__doc__)
    sys.exit(main(Path(args[0]) / "sass", Path(args[1]) / "sass", "--namespace-moves" in sys.argv,
                  "--param-offsets" in sys.argv))
