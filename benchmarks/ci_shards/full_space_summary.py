"""Totals of a full-space build made by full_space.sh, and its splits by the measured per-TU costs.

    python3 benchmarks/ci_shards/full_space_summary.py DIR...

Each DIR is one call's $OUT (or several calls' files gathered in one folder; for each file name the last DIR
given wins, so list the calls in order). A part's wall is the sum of its calls' build walls (wall-PART.txt:
"rc seconds" per call); the space's one-machine time is the sum of the parts'. The splits are what
`flashbuild build --shard I/N --costs FILE` prints for the whole space, FILE being every part's .ninja_log.
"""
import os
import shlex
import subprocess
import sys
import tempfile
from pathlib import Path

# The whole space; SEL="..." for the selection the parts were narrowed to (full_space.sh's EXTRA).
SELECTION = shlex.split(os.environ.get("SEL", "--arch sm80,sm86,sm89,sm90"))


def last_files(dirs: list[Path], pattern: str) -> dict[str, Path]:
    found: dict[str, Path] = {}
    for d in dirs:
        for path in sorted(d.glob(pattern)):
            found[path.name] = path
    return found


def tu_seconds(ninja_log: Path) -> dict[str, float]:
    last: dict[str, float] = {}
    for line in ninja_log.read_text().splitlines():
        fields = line.split("\t")
        if line.startswith("#") or len(fields) < 4:
            continue
        last[fields[3]] = (int(fields[1]) - int(fields[0])) / 1000  # a later run of a target replaces an earlier one
    return {t: s for t, s in last.items() if t.endswith(".o")}


def main(dirs: list[Path]) -> None:
    walls = last_files(dirs, "wall-*.txt")
    logs = last_files(dirs, "ninja_log-*.txt")
    done = {p.name.removeprefix("done-") for d in dirs for p in d.glob("done-*")}
    total, complete, all_tus = 0.0, True, {}
    for name, path in sorted(walls.items()):
        part = name.removeprefix("wall-").removesuffix(".txt")
        calls = [line.split() for line in path.read_text().splitlines() if line.strip()]
        wall = sum(float(c[1]) for c in calls)
        tus = tu_seconds(logs[f"ninja_log-{part}.txt"]) if f"ninja_log-{part}.txt" in logs else {}
        all_tus.update(tus)
        state = "done" if part in done else "NOT complete"
        complete &= part in done
        total += wall
        print(f"part {part.replace('+', ',')}: {state}; build wall {wall:.1f} s over {len(calls)} call(s) "
              f"({' + '.join(c[1] for c in calls)}); {len(tus)} objects, {sum(tus.values()):.0f} s of compile summed, "
              f"longest {max(tus.values(), default=0):.1f} s")
    print(f"{'all parts' if complete else 'the parts so far'}: one-machine build wall {total:.1f} s "
          f"({total / 60:.1f} min); {len(all_tus)} objects, {sum(all_tus.values()):.0f} s of compile summed")
    if not complete:
        return
    with tempfile.NamedTemporaryFile("w", suffix=".ninja_log", delete=False) as costs:
        for path in logs.values():
            costs.write(path.read_text())
    for n in (4, 16):
        out = subprocess.run([sys.executable, "-m", "flashbuild", "build", *SELECTION, "--dry-run", "--shard",
                              f"1/{n}", "--costs", costs.name], capture_output=True, text=True)
        lines = [line[:110] for line in out.stdout.splitlines() + out.stderr.splitlines()
                 if line.startswith(("split of", "  shard"))]
        print("\n".join(lines) if lines else f"n = {n}: no split printed (rc {out.returncode}):\n{out.stderr[-2000:]}")


if __name__ == "__main__":
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    main([Path(a) for a in sys.argv[1:]])
