"""Shards: one selection's TUs split over n machines, balanced by compile cost, each machine
compiling its part into an artifact directory (objects + manifest.json) that `flashbuild link`
puts back together.

Every shard machine computes the same split on its own (no coordinator): the costs come from a
file all shards are given (`--costs`: a .ninja_log of an earlier build, or JSON {TU name: seconds}),
else from a fixed per-kind estimate. The split is greedy longest-first onto the least-loaded shard,
ties broken by name and index, so it is deterministic; the manifest records it and its digest, so
a shard that split differently is caught at link time, by name.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
import os
import re
import shutil
import stat
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable

from .. import env, safe_io
from ..version import __version__
from ..pipeline import builder, cache, graph, render
from ..pipeline.costs import estimate
from ..pipeline.provenance import sha256, toolkit, tree_digest
from ..pipeline.plan import Plan
from ..errors import BuildError, SelectionError
from ..sources.units import Unit

MANIFEST = "manifest.json"
FORMAT = "flashbuild-shard/1"


@dataclass(frozen=True)
class ShardSpec:
    index: int  # 1-based, as the user writes it: --shard 2/4
    count: int

    @property
    def label(self) -> str:
        return f"{self.index}/{self.count}"


MAX_SHARDS = 256  # GitHub's limit on the jobs of one matrix (matrix.py); a split into more is a typo


def parse_shard(text: str) -> ShardSpec:
    match = re.fullmatch(r" *(\d{1,9}) */ *(\d{1,9}) *", text or "")  # spaces are harmless; a newline is refused
    if not match:
        raise SelectionError(f"--shard {text!r}: expected I/N, the shard's 1-based index and the shard count "
                             f"(at most {MAX_SHARDS}); use --shard 1/4")
    index, count = int(match.group(1)), int(match.group(2))
    if count > MAX_SHARDS:
        raise SelectionError(f"--shard {text}: {count} shards; at most {MAX_SHARDS} (the jobs of one CI matrix); "
                             f"use --shard 1/{MAX_SHARDS} or fewer")
    if count < 1 or not 1 <= index <= count:
        raise SelectionError(f"--shard {text}: the index must be 1 to {max(count, 1)} and the count at least 1; "
                             f"use --shard 1/{max(count, 1)}")
    return ShardSpec(index, count)


# ---------------------------------------------------------------- costs and the split

def read_costs(path: Path) -> dict[str, float]:
    """TU name -> seconds from a .ninja_log (its obj/NAME.o entries, the latest of each) or a JSON
    object. Raises SelectionError naming the file and what it found."""
    try:
        text = safe_io.read_text(path)
    except (OSError, UnicodeDecodeError) as exc:
        raise SelectionError(f"--costs {path}: cannot read it ({getattr(exc, 'strerror', None) or exc}); give a "
                             f".ninja_log of an earlier build or a JSON object of TU name -> seconds") from None
    if text.lstrip().startswith("{"):
        try:
            data = safe_io.loads(text)
        except ValueError as exc:
            raise SelectionError(f"--costs {path}: not valid JSON ({exc}); fix it") from None
        if not isinstance(data, dict):
            raise SelectionError(f"--costs {path}: a JSON {type(data).__name__}, expected an object of TU name -> "
                                 f"seconds; fix it")
        bad = [k for k, s in data.items()
               if isinstance(s, bool) or not isinstance(s, (int, float)) or not 0 <= s < 2**53]
        if bad:
            key, found = bad[0], repr(data[bad[0]])
            shown = key if key.isprintable() and len(key) <= 200 else repr(key[:200])  # one line, always
            raise SelectionError(f"--costs {path}: {shown}: expected seconds (a number >= 0), found "
                                 f"{found if len(found) <= 60 else found[:57] + '...'}; fix it")
        return {str(k): float(s) for k, s in data.items()}
    costs = {}
    for line in text.splitlines():
        fields = line.split("\t")
        if line.startswith("#") or len(fields) < 4 or not (fields[0].isdigit() and fields[1].isdigit()):
            continue
        name = graph_name(fields[3])
        if name and len(fields[0]) < 16 and len(fields[1]) < 16:  # milliseconds; longer is not a ninja log
            costs[name] = max(int(fields[1]) - int(fields[0]), 0) / 1000.0
    if not costs:
        raise SelectionError(f"--costs {path}: no compile times in it (expected a .ninja_log with obj/NAME.o entries "
                             f"or a JSON object); give the .ninja_log of an earlier build of this selection")
    return costs


def graph_name(output: str) -> str | None:
    """'obj/fwd_hdim64_fp16_sm90.o' -> 'fwd_hdim64_fp16_sm90' (None for other outputs)."""
    match = re.fullmatch(r"obj/(.+)\.o", output)
    return match.group(1) if match else None


@dataclass(frozen=True)
class Split:
    shards: tuple[tuple[str, ...], ...]   # TU names per shard, shard 1 first
    seconds: tuple[float, ...]            # each shard's cost
    source: str                           # where the costs came from

    @property
    def digest(self) -> str:
        return hashlib.sha256(json.dumps(self.shards).encode()).hexdigest()[:16]


def split(units: Iterable[Unit], count: int, costs: dict[str, float] | None = None, source: str = "estimate") -> Split:
    """Longest first onto the least-loaded shard. A TU the costs do not name gets the estimate."""
    costs = costs or {}
    cost = {u.name: costs.get(u.name, estimate(u)) for u in units}
    order = sorted(cost, key=lambda name: (-cost[name], name))
    shards: list[list[str]] = [[] for _ in range(count)]
    loads = [0.0] * count
    for name in order:
        target = min(range(count), key=lambda i: (loads[i], i))
        shards[target].append(name)
        loads[target] += cost[name]
    return Split(tuple(tuple(sorted(s)) for s in shards), tuple(round(s, 1) for s in loads), source)


def find_costs(plan: Plan, given: str | None) -> tuple[dict[str, float], str]:
    """The costs to split by: --costs, else the .ninja_log of an earlier build in this build dir
    when it times every TU of the plan, else the estimate. A partial log (say, of another shard
    built here) would split differently from the shards that did not see it, so it is not used."""
    if given:
        path = Path(given).expanduser()
        costs = read_costs(path)
        if not any(u.name in costs for u in plan.units):
            named = sorted(costs)
            raise SelectionError(
                f"--costs {given}: times none of the {len(plan.units)} TUs of this selection (it times "
                f"{len(named)}: {', '.join(named[:3]) or 'none'}{', ...' if len(named) > 3 else ''}), so it is of another "
                f"selection or of TUs since renamed; give the .ninja_log of a build of this selection, or drop "
                f"--costs to split by the estimate")
        return costs, f"--costs {path}"
    found = plan.build_dir / ".ninja_log"
    if found.is_file():
        try:
            costs = read_costs(found)
        except SelectionError:
            costs = {}
        if all(u.name in costs for u in plan.units):
            return costs, f"ninja log {found}"
    return {}, "estimate"


def describe_split(result: Split, shard: ShardSpec | None = None) -> str:
    lines = [f"split of {sum(len(s) for s in result.shards)} TUs over {len(result.shards)} shards "
             f"(costs: {result.source}; longest shard {max(result.seconds):.0f} s, total {sum(result.seconds):.0f} s):"]
    for i, (names, seconds) in enumerate(zip(result.shards, result.seconds), 1):
        mark = " <- this machine" if shard and shard.index == i else ""
        lines.append(f"  shard {i}/{len(result.shards)}  {seconds:6.0f} s  {len(names)} TUs: "
                     f"{', '.join(names) or 'none'}{mark}")
    return "\n".join(lines)


# ---------------------------------------------------------------- building one shard

@dataclass(frozen=True)
class ShardPlan(Plan):
    """A plan whose units are one shard's: build.ninja and the progress hold only those."""

    shard_units: tuple[Unit, ...] = ()

    @property
    def units(self) -> tuple[Unit, ...]:
        return self.shard_units


def shard_plan(plan: Plan, names: Iterable[str]) -> ShardPlan:
    chosen = set(names)
    fields = {f.name: getattr(plan, f.name) for f in dataclasses.fields(plan)}
    return ShardPlan(**fields, shard_units=tuple(u for u in plan.units if u.name in chosen))


def default_artifact_dir(plan: Plan, shard: ShardSpec, cell: str | None) -> Path:
    return Path("flashbuild-artifacts") / f"{cell or plan.key}-shard-{shard.index}-of-{shard.count}"


def build_shard(plan: Plan, shard: ShardSpec, *, costs: str | None, artifact_dir: Path | None,
                cell: str | None = None, config: str | None = None) -> tuple[Path, dict[str, Any]]:
    """Compile this machine's shard of the plan and write its artifact dir; returns (dir, manifest)."""
    plan = dataclasses.replace(plan, options=dataclasses.replace(plan.options, compile_only=True))
    target = artifact_dir or default_artifact_dir(plan, shard, cell)
    problem = artifact_problem(target)  # before minutes of compiling, not after
    if problem:
        raise SelectionError(f"--artifact-dir {target}: {problem}; choose an empty or new directory")
    tools = builder.toolchain(plan)
    found, source = find_costs(plan, costs)
    result = split(plan.units, shard.count, found, source)
    builder.log(describe_split(result, shard))
    mine = shard_plan(plan, result.shards[shard.index - 1])
    builder.prepare(mine)
    with builder.damaged_build_dir(mine), builder.build_lock(mine.build_dir):
        with cache.private_umask():
            render.render_build(plan.selection, plan.gen_dir, build_key=plan.key, profile=plan.profile,
                                context=builder.tree_context(plan))
            (plan.build_dir / "obj").mkdir(exist_ok=True, mode=cache.PRIVATE_DIR)
            render.write_if_different(plan.build_dir / "build.ninja", builder.ninja_text(mine, tools, None))
        output, timings = builder.run_ninja(mine)
        if output.failed:
            raise BuildError(output.summary(plan.build_dir / "build.log", shard_command(plan, shard, cell, config)))
        builder.log(builder.timings_table(timings, output.wall_seconds))
        manifest = shard_manifest(plan, tools, shard, result, mine.units, cell=cell, config=config)
        write_artifact(plan, target, manifest)
    return target, manifest


def shard_command(plan: Plan, shard: ShardSpec, cell: str | None, config: str | None) -> str:
    import shlex

    if cell and config:
        return shlex.join(["flashbuild", "build", "--config", config, "--cell", cell, "--shard", shard.label])
    return f"{plan.command()} --shard {shard.label}"


def extra_objects(plan: Plan) -> list[str]:
    """Generated TUs beside the units (an external tree's stubs): every shard compiles them."""
    return [render.MISSING_TU] if plan.missing else []


def shard_manifest(plan: Plan, tools: graph.Toolchain, shard: ShardSpec, result: Split, units: Iterable[Unit], *,
                   cell: str | None, config: str | None) -> dict[str, Any]:
    selection, flags = plan.selection, plan.options.flags
    names = [u.name for u in units]
    objects = {name: sha256(plan.build_dir / graph.object_path(name)) for name in names + extra_objects(plan)}
    return {
        "format": FORMAT, "flashbuild": __version__, "key": plan.key, "module_name": plan.module_name,
        "cell": cell, "config": config, "command": shard_command(plan, shard, cell, config),
        "selection": {"hdim": list(selection.hdims), "dtype": list(selection.dtypes), "arch": list(selection.archs),
                      "direction": list(selection.directions), "causal": selection.causal_mode,
                      "features": list(selection.features), "profile": selection.profile},
        "cli_args": selection.cli_args(),
        "flags": {"debug": flags.debug, "lineinfo": flags.lineinfo, "nvcc_flags": list(flags.nvcc_flags)},
        "versions": plan.versions, "toolkit": toolkit(plan, tools), "tree_digest": tree_digest(plan),
        "python": sys.version.split()[0],
        "variants": [u.name for u in plan.units],
        "shard": {"index": shard.index, "count": shard.count},
        "split": {"costs": result.source, "digest": result.digest, "shards": [list(s) for s in result.shards],
                  "seconds": list(result.seconds)},
        "units": names, "extra_objects": extra_objects(plan), "objects": objects,
    }


ARTIFACT_FILES = re.compile(r"[A-Za-z0-9_.+-]+\.o(\.d)?")


def artifact_problem(target: Path) -> str | None:
    """Why `target` cannot take a shard artifact, or None: it must be new, empty, or an artifact this
    flashbuild wrote (a shard manifest and obj/ of objects, nothing else), so that replacing it
    deletes nothing of anyone's; and it must not be in the cache, where it would overwrite a build."""
    try:
        info = target.lstat()
    except FileNotFoundError:
        info = None
    resolved = target.resolve()
    cache_root = env.cache_dir().resolve()
    if resolved == cache_root or resolved.is_relative_to(cache_root) or cache_root.is_relative_to(resolved):
        return f"it is or holds the build cache {cache_root}; choose a directory outside it"
    if info is None:
        return None
    if stat.S_ISLNK(info.st_mode) and not target.is_dir():
        return "a broken symbolic link"
    if not target.is_dir():
        return "exists and is not a directory"
    entries = {e.name: e for e in os.scandir(target)}
    if not entries:
        return None
    foreign = sorted(set(entries) - {MANIFEST, "obj"})
    if foreign or MANIFEST not in entries:
        return (f"not empty and not a shard artifact ({'it holds ' + foreign[0] if foreign else 'no ' + MANIFEST}); "
                "replacing it would delete what it holds")
    try:
        data = safe_io.read_json(target / MANIFEST, 4 * 2**20) if not entries[MANIFEST].is_symlink() else None
    except (OSError, ValueError):
        data = None
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        return f"its {MANIFEST} is not a shard manifest (format {FORMAT}); replacing it would delete what it holds"
    obj = entries.get("obj")
    if obj is not None:
        if obj.is_symlink() or not obj.is_dir(follow_symlinks=False):
            return "its obj/ is not a directory of its own (a symbolic link or a file)"
        odd = [e.name for e in os.scandir(obj.path) if not (e.is_file(follow_symlinks=False) and
                                                          ARTIFACT_FILES.fullmatch(e.name))]
        if odd:
            return f"its obj/ holds {odd[0]}, which no shard writes; replacing it would delete it"
    return None


def write_artifact(plan: Plan, target: Path, manifest: dict[str, Any]) -> None:
    """objects (and their depfiles) + manifest.json. The dir is meant for upload, so it gets the
    user's umask, not the cache's 0700; link checks every object's digest before using it."""
    try:
        problem = artifact_problem(target)
    except OSError as exc:
        problem = f"cannot be read ({exc.strerror or exc})"
    if problem:
        raise SelectionError(f"--artifact-dir {target}: {problem}; choose an empty or new directory")
    obj = target / "obj"
    if obj.is_dir():
        for stale in os.scandir(obj):  # only *.o and *.o.d files: artifact_problem checked
            os.unlink(stale.path)
    obj.mkdir(parents=True, exist_ok=True)
    for name in manifest["objects"]:
        source = plan.build_dir / graph.object_path(name)
        shutil.copyfile(source, obj / source.name)
        depfile = source.with_name(source.name + ".d")
        if depfile.is_file():
            shutil.copyfile(depfile, obj / depfile.name)
    (target / MANIFEST).write_text(json.dumps(manifest, indent=2, sort_keys=True) + "\n")
