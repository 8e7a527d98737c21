"""Totals of a full-space build made by full_space.sh, and its splits by the measured per-TU costs.

    python3 benchmarks/ci_shards/full_space_summary.py DIR...

Each DIR is one call's $OUT (or several calls' files gathered in one folder; for each file name the last DIR
given wins, so list the calls in order). A part's wall is the sum of its calls' build walls (wall-PART.txt:
"rc seconds" per call); the space's one-machine time is the sum of the parts'. The splits are what
`flashbuild build --shard I/N --costs FILE` makes for the whole space from every part's measured per-TU seconds
(its .ninja_log, or tu-seconds-PART.json: SAVE=DIR writes those, the form a study commits), and each shard's wall on a JOBS-core machine (default 16) modelled by list-scheduling its TUs' measured
seconds, the model first checked against each part's measured wall.
"""
import sys  # noqa: E402
if sys.argv[1:] in (["-h"], ["--help"]):  # usage without a GPU or a tree (tests/test_benchmark_scripts.py)
    print(__doc__)
    sys.exit(0)
import heapq
import json
import os
import shlex
import sys
from pathlib import Path

# The whole space; SEL="..." for the selection the parts were narrowed to (full_space.sh's EXTRA).
SELECTION = shlex.split(os.environ.get("SEL", "--arch sm80,sm86,sm89,sm90"))


def last_files(dirs: list[Path], pattern: str) -> dict[str, Path]:
    found: dict[str, Path] = {}
    for d in dirs:
        for path in sorted(d.glob(pattern)):
            found[path.name] = path
    return found


def main(dirs: list[Path]) -> None:
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
    from flashbuild.pipeline.plan import parse_request, selection_units
    from flashbuild.ci.shard import describe_split, read_costs, split

    walls = last_files(dirs, "wall-*.txt")
    # Each part's measured seconds per TU: the device call's .ninja_log, or the JSON this script saves (SAVE=DIR)
    # and the study commits; flashbuild's own --costs reader takes both.
    costs = {**last_files(dirs, "ninja_log-*.txt"), **last_files(dirs, "tu-seconds-*.json")}
    done = {p.name.removeprefix("done-") for d in dirs for p in d.glob("done-*")}
    total, complete, part_tus = 0.0, True, {}
    for name, path in sorted(walls.items()):
        part = name.removeprefix("wall-").removesuffix(".txt")
        calls = [line.split() for line in path.read_text().splitlines() if line.strip()]
        wall = sum(float(c[1]) for c in calls)
        source = costs.get(f"tu-seconds-{part}.json") or costs.get(f"ninja_log-{part}.txt")
        tus = part_tus[part] = read_costs(source) if source else {}
        if source and os.environ.get("SAVE"):
            Path(os.environ["SAVE"], f"tu-seconds-{part}.json").write_text(json.dumps(tus, indent=0, sort_keys=True) + "\n")
        state = "done" if part in done else "NOT complete"
        complete &= part in done
        total += wall
        print(f"part {part.replace('+', ',').replace('_', ',')}: {state}; build wall {wall:.1f} s over {len(calls)} call(s) "
              f"({' + '.join(c[1] for c in calls)}); {len(tus)} objects, {sum(tus.values()):.0f} s of compile summed, "
              f"longest {max(tus.values(), default=0):.1f} s")
    measured = {name: seconds for tus in part_tus.values() for name, seconds in tus.items()}
    print(f"{'all parts' if complete else 'the parts so far'}: one-machine build wall {total:.1f} s "
          f"({total / 60:.1f} min); {len(measured)} objects, {sum(measured.values()):.0f} s of compile summed")
    if not complete:
        return
    jobs = int(os.environ.get("JOBS", "16"))
    for part, tus in sorted(part_tus.items()):
        print(f"model check, part {part}: its TUs' measured seconds list-scheduled on {jobs} jobs, longest first: "
              f"{schedule(list(tus.values()), jobs):.1f} s (measured wall above)")
    units = selection_units(parse_request(**request_keywords(SELECTION))[0])
    for n in (4, 16):
        # The split `flashbuild build --shard I/N --costs FILE` makes, FILE holding these measured seconds.
        result = split(units, n, measured, "the parts' measured compile seconds")
        walls = [schedule([measured[name] for name in shard], jobs) for shard in result.shards]
        print(f"n = {n}: each shard's TUs list-scheduled on {jobs} jobs: longest shard {max(walls):.1f} s "
              f"(shortest {min(walls):.1f} s; longest single TU {max(measured.values()):.1f} s)")
        print("\n".join(line[:110] for line in describe_split(result).splitlines()))


def request_keywords(args: list[str]) -> dict[str, object]:
    """["--hdim", "64", "--no-local"] -> {"hdim": "64", "no_local": True}: parse_request's keywords."""
    keywords: dict[str, object] = {}
    for i, arg in enumerate(args):
        if arg.startswith("--"):
            value = args[i + 1] if i + 1 < len(args) and not args[i + 1].startswith("--") else True
            keywords[arg[2:].replace("-", "_")] = value
    return keywords


def schedule(seconds: list[float], jobs: int) -> float:
    """The wall of ninja running these compiles on `jobs` slots, longest first (build.ninja's order), each taking
    its measured time: a model, since a TU measured beside 15 others runs faster at a build's tail."""
    slots = [0.0] * jobs
    for s in sorted(seconds, reverse=True):
        heapq.heappush(slots, heapq.heappop(slots) + s)
    return max(slots)


if __name__ == "__main__":
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    main([Path(a) for a in sys.argv[1:]])
