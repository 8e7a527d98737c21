"""`flashbuild link ARTIFACT...`: put the shards of one selection back together.

First every check, so a mismatch is found before anything is written: each artifact is a shard
manifest; all agree on what changes an object (selection, flags, versions, toolkit, source tree,
the split); shards 1..n are each there once; every TU of the selection is in exactly one shard; every
object is the one its manifest hashed; and this machine would build the same key from the same
tree. Then, as a one-machine build does (builder.build), it stops with the reason when torch here
has no CUDA. Else it links the objects with the binding, by the same rules and flags as
pipeline/graph.py, into the build dir of the key (or --build-dir), and writes its manifest.
"""

from __future__ import annotations

import io
import json
import re
import shlex
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ninja import ninja_syntax

from .. import env, safe_io
from ..pipeline import builder, cache, graph, processes, provenance, render
from ..pipeline.plan import Plan
from ..errors import BuildError, FlashbuildError
from ..sources import profile as profiles
from ..pipeline import launcher as launchers
from . import shard as sharding

# What every shard must agree on: a difference in any of them means objects built differently.
# The key and module name come last: they follow from the others, which say what differs.
SAME = ("format", "flashbuild", "selection", "flags", "versions", "toolkit", "tree_digest", "variants",
        "extra_objects", "key", "module_name")
LINK_FILE = "link.ninja"


@dataclass(frozen=True)
class Artifact:
    path: Path
    manifest: dict[str, Any]

    @property
    def label(self) -> str:
        shard = self.manifest.get("shard", {})
        return f"shard {shard.get('index')}/{shard.get('count')} ({self.path})"


def read(path: Path) -> Artifact:
    manifest_path = path / sharding.MANIFEST
    fix = "give the directories that `flashbuild build ... --shard I/N` wrote"
    if not path.is_dir():
        raise BuildError(f"{path}: not a directory; {fix}")
    try:
        if manifest_path.is_symlink():
            raise safe_io.UnreadableFile(0, "a symbolic link", str(manifest_path))
        data = safe_io.read_json(manifest_path)
    except FileNotFoundError:
        raise BuildError(f"{path}: no {sharding.MANIFEST}, so not a shard artifact; {fix}") from None
    except safe_io.UnreadableFile as exc:
        raise BuildError(f"{manifest_path}: unreadable ({exc.strerror}); rebuild that shard") from None
    except (OSError, ValueError) as exc:
        raise BuildError(f"{manifest_path}: unreadable ({exc.__class__.__name__}: {exc}); rebuild that shard") from None
    if not isinstance(data, dict) or data.get("format") != sharding.FORMAT:
        found = data.get("format") if isinstance(data, dict) else type(data).__name__
        raise BuildError(f"{manifest_path}: format {found!r}, expected {sharding.FORMAT!r}; {fix} (with this "
                         f"flashbuild)")
    command = data.get("command")
    if not isinstance(command, str) or "--shard" not in command or any(c in command for c in "\n\r\0\x1b"):
        command = "flashbuild build ... --shard I/N"
    data["command"] = command
    rebuild = f"rebuild that shard with `{command}`"
    for key in (*SAME, "shard", "split", "units", "objects"):
        if key not in data:
            raise BuildError(f"{manifest_path}: no {key!r}; {rebuild}")
    problem = _shape_problem(data)
    if problem:
        raise BuildError(f"{manifest_path}: {problem}; {rebuild}")
    return Artifact(path, data)


def _names(value: Any) -> bool:
    return isinstance(value, list) and all(isinstance(n, str) for n in value)


def _shape_problem(data: dict) -> str | None:
    """What a hand-edited or damaged manifest got wrong in the fields link reads, or None."""
    shard = data["shard"]
    count = shard.get("count") if isinstance(shard, dict) else None
    index = shard.get("index") if isinstance(shard, dict) else None
    if not all(isinstance(n, int) and not isinstance(n, bool) for n in (index, count)) or not 1 <= index <= count:
        return f"'shard': expected an object {{\"index\": I, \"count\": N}} with 1 <= I <= N, found {_short(shard)}"
    for key in ("variants", "units", "extra_objects"):
        if not _names(data[key]):
            return f"{key!r}: expected a list of TU names, found {_short(data[key])}"
    objects = data["objects"]
    if not isinstance(objects, dict) or not all(isinstance(d, str) for d in objects.values()):
        return f"'objects': expected an object of TU name -> sha256, found {_short(objects)}"
    for key in ("selection", "flags", "versions", "toolkit", "split"):
        if not isinstance(data[key], dict):
            return f"{key!r}: expected an object, found {_short(data[key])}"
    # TU names become paths (obj/NAME.o, read here and copied into the build dir): plain names only
    for name in [*data["variants"], *data["units"], *data["extra_objects"], *objects]:
        if not TU_NAME.fullmatch(name):
            return f"TU name {_short(name)} is not a plain file name ([A-Za-z0-9_.+-], not starting with '.')"
    selection, flags = data["selection"], data["flags"]
    for key, ok, expected in (
            ("hdim", lambda x: isinstance(x, list) and x and all(isinstance(i, int) and not isinstance(i, bool)
                                                                 and 0 < i < 4096 for i in x), "a list of head dims"),
            ("dtype", _nonempty_names, "a list of dtypes"), ("arch", _nonempty_names, "a list of archs"),
            ("direction", _nonempty_names, "a list of directions"), ("causal", lambda x: isinstance(x, str), "a string"),
            ("features", _names, "a list of features"), ("profile", lambda x: isinstance(x, str) and x, "a profile")):
        if key not in selection or not ok(selection[key]):
            return f"selection.{key}: expected {expected}, found {_short(selection.get(key))}"
    for key in ("debug", "lineinfo"):
        if not isinstance(flags.get(key), bool):
            return f"flags.{key}: expected true or false, found {_short(flags.get(key))}"
    if not _names(flags.get("nvcc_flags")):
        return f"flags.nvcc_flags: expected a list of flags, found {_short(flags.get('nvcc_flags'))}"
    if selection["profile"] != profiles.BUILTIN:
        args = data.get("cli_args")
        if not _names(args) or "--source" not in args[:-1]:
            return f"'cli_args' does not give the tree (--source PATH) that selection.profile {selection['profile']!r} needs"
    return None


TU_NAME = re.compile(r"[A-Za-z0-9_+-][A-Za-z0-9_.+-]{0,199}")


def _nonempty_names(value: Any) -> bool:
    return _names(value) and bool(value)


def _short(value: Any) -> str:
    text = json.dumps(value, sort_keys=True)
    return text if len(text) <= 120 else text[:117] + "..."


def _differs(a: Any, b: Any, field: str) -> str:
    """The first sub-field where two manifest values differ: 'versions.torch' rather than 'versions'."""
    if isinstance(a, dict) and isinstance(b, dict):
        for key in sorted(set(a) | set(b)):
            if a.get(key) != b.get(key):
                return _differs(a.get(key), b.get(key), f"{field}.{key}")
    return field


def check_fit(artifacts: list[Artifact]) -> list[Artifact]:
    """The artifacts in shard order, or a BuildError naming the shard and the field that do not fit."""
    first = artifacts[0]
    for other in artifacts[1:]:
        for key in SAME:
            if other.manifest[key] != first.manifest[key]:
                where = _differs(other.manifest[key], first.manifest[key], key)
                fix = "rebuild every shard from one commit with the same flags and toolkit"
                if key in ("selection", "variants", "extra_objects"):
                    cells = [a.manifest.get("cell") or " ".join(a.manifest.get("cli_args") or []) for a in (other, first)]
                    fix = (f"they are shards of different selections ({cells[0]} vs {cells[1]}): link the shards of "
                           f"one cell or selection together")
                raise BuildError(
                    f"{other.label} does not fit {first.label}: {where} differs "
                    f"({_short(_pick(other.manifest, where))} vs {_short(_pick(first.manifest, where))}); {fix}")
        for key in ("count",):
            if other.manifest["shard"].get(key) != first.manifest["shard"].get(key):
                raise BuildError(f"{other.label} does not fit {first.label}: shard.count differs; link the shards of "
                                 f"one split (all built with the same --shard I/N count)")
        if other.manifest["split"].get("digest") != first.manifest["split"].get("digest"):
            raise BuildError(
                f"{other.label} does not fit {first.label}: split differs (its costs: "
                f"{other.manifest['split'].get('costs')}; {first.label}'s: {first.manifest['split'].get('costs')}), "
                f"so TUs would be missing or twice; give every shard the same --costs file")
    count = first.manifest["shard"]["count"]
    by_index: dict[int, Artifact] = {}
    for artifact in artifacts:
        index = artifact.manifest["shard"]["index"]
        if index in by_index:
            raise BuildError(f"shard {index}/{count} given twice: {by_index[index].path} and {artifact.path}; "
                             f"give each shard once")
        by_index[index] = artifact
    missing = [i for i in range(1, count + 1) if i not in by_index]
    if missing:
        raise BuildError(f"missing shard {', '.join(f'{i}/{count}' for i in missing)} of {first.manifest['key']} "
                         f"(given: {', '.join(f'{i}/{count}' for i in sorted(by_index))}); build it with "
                         f"`{first.manifest['command'].rsplit('--shard', 1)[0]}--shard {missing[0]}/{count}` "
                         f"and link all {count}")
    ordered = [by_index[i] for i in range(1, count + 1)]
    _check_units(ordered)
    return ordered


def _pick(manifest: dict, dotted: str) -> Any:
    value: Any = manifest
    for part in dotted.split("."):
        value = value.get(part) if isinstance(value, dict) else None
    return value


def _check_units(ordered: list[Artifact]) -> None:
    """Each TU of the selection in exactly one shard, each object present with its digest."""
    owner: dict[str, Artifact] = {}
    for artifact in ordered:
        for name in artifact.manifest["units"]:
            if name in owner:
                raise BuildError(f"{name} is in two shards: {owner[name].label} and {artifact.label}; "
                                 f"rebuild them with one split")
            owner[name] = artifact
    variants = ordered[0].manifest["variants"]
    absent = [n for n in variants if n not in owner]
    if absent:
        raise BuildError(f"no shard holds {', '.join(absent)} (of {len(variants)} TUs); rebuild the shards with one "
                         f"split")
    extra = [n for n in owner if n not in variants]
    if extra:
        raise BuildError(f"{owner[extra[0]].label} holds {extra[0]}, which the selection does not; rebuild that shard")
    for artifact in ordered:  # an object without a hash would be linked unchecked (or not at all: objects = {})
        manifest = artifact.manifest
        unhashed = sorted((set(manifest["units"]) | set(manifest["extra_objects"])) - set(manifest["objects"]))
        if unhashed or set(manifest["objects"]) - set(manifest["units"]) - set(manifest["extra_objects"]):
            raise BuildError(f"{artifact.path / sharding.MANIFEST}: 'objects' hashes {_short(sorted(manifest['objects']))}, "
                             f"but the shard compiled {_short(sorted(set(manifest['units']) | set(manifest['extra_objects'])))}: "
                             f"every object must be hashed once; rebuild with `{manifest['command']}`")
    for artifact in ordered:
        for name, digest in artifact.manifest["objects"].items():
            path = artifact.path / graph.object_path(name)
            if path.is_symlink() or (path.parent.is_symlink()) or not path.is_file():
                raise BuildError(f"{artifact.label}: {graph.object_path(name)} is missing (or not a regular file of the "
                                 f"artifact); upload the whole "
                                 f"artifact dir, or rebuild with `{artifact.manifest['command']}`")
            if provenance.sha256(path) != digest:
                raise BuildError(f"{artifact.label}: {graph.object_path(name)} is not the object its manifest "
                                 f"hashed (changed after the build); rebuild with `{artifact.manifest['command']}`")


def check_here(plan: Plan, tools: graph.Toolchain, first: Artifact) -> None:
    """This machine builds the same key (same versions) from the same tree as the shards did."""
    manifest = first.manifest
    for key, here in (("versions", plan.versions), ("toolkit", provenance.toolkit(plan, tools)),
                      ("tree_digest", provenance.tree_digest(plan))):
        if here != manifest[key]:
            where = _differs(here, manifest[key], key)
            raise BuildError(f"this machine does not fit the shards: {where} is {_short(_pick({key: here}, where))} "
                             f"here, {_short(_pick(manifest, where))} in {first.label}; link where the shards' "
                             f"toolkit, torch, Python and source tree are")
    names = [u.name for u in plan.units] + sharding.extra_objects(plan)
    held = manifest["variants"] + manifest["extra_objects"]
    if sorted(held) != sorted(names):
        absent = [n for n in names if n not in held] or ["none"]
        raise BuildError(f"the shards hold {len(manifest['variants'])} TUs, the selection they name has "
                         f"{len(plan.units)} (not in any shard: {', '.join(absent)}; not in the selection: "
                         f"{', '.join(n for n in held if n not in names) or 'none'}); the manifests were edited or "
                         f"built by another flashbuild: rebuild every shard with "
                         f"`{manifest['command'].rsplit('--shard', 1)[0]}--shard I/{manifest['shard']['count']}`")
    if plan.key != manifest["key"]:
        raise BuildError(f"the shards' manifests say key {manifest['key']}, but their own selection and flags make "
                         f"{plan.key} (versions, toolkit and tree match this machine): the manifests were edited or "
                         f"written by another flashbuild; rebuild every shard with "
                         f"`{manifest['command'].rsplit('--shard', 1)[0]}--shard I/{manifest['shard']['count']}`")


def link_command(paths: list[Path], build_dir: Path | None) -> str:
    args = ["flashbuild", "link", *map(str, paths)]
    return shlex.join(args + (["--build-dir", str(build_dir)] if build_dir else []))


def link_text(plan: Plan, tools: graph.Toolchain, spec: graph.LinkSpec, objects: list[str]) -> str:
    """A ninja file of the binding and link edges only, over prebuilt objects: the same rules and
    flags as graph.graph_text writes (its link part), kept beside build.ninja, never in place of it."""
    out = io.StringIO()
    w = ninja_syntax.Writer(out, width=120)
    w.comment("Generated by flashbuild link: the binding and the link over shard objects. Do not edit.")
    w.variable("ninja_required_version", "1.10")
    graph.write_link_rules(w, spec, tools, plan.gen_dir)
    inputs = [graph.path(o) for o in objects] + graph.write_api_edges(out, spec)
    out.write(f"build {graph.path(graph.extension_name(spec.module_name))}: link {' '.join(inputs)}\n")
    return out.getvalue()


def link(paths: list[Path], *, build_dir: Path | None = None, jobs: int | None = None, verbose: bool = False,
         launcher: str | None = None) -> tuple[Plan, Path]:
    """Check the artifacts, then link them into one extension; returns (plan, extension path)."""
    if not paths:
        raise BuildError("give the artifact dirs of every shard: flashbuild link DIR1 DIR2 ...")
    ordered = check_fit([read(Path(p)) for p in paths])
    first = ordered[0]
    manifest = first.manifest
    try:
        selection, options = builder.parse_request(
            **_selection_request(manifest), debug=manifest["flags"]["debug"], lineinfo=manifest["flags"]["lineinfo"],
            nvcc_flags=tuple(manifest["flags"]["nvcc_flags"]), build_dir=None, jobs=jobs, verbose=verbose,
            launcher=launcher)
    except FlashbuildError as exc:  # a value the manifest holds, not one the user typed
        raise BuildError(f"{first.path / sharding.MANIFEST}: its selection or flags are refused ({exc}); rebuild the "
                         f"shards with `{manifest['command']}`") from None
    if build_dir is not None:
        selection, options = builder.parse_request(
            **_selection_request(manifest), debug=manifest["flags"]["debug"], lineinfo=manifest["flags"]["lineinfo"],
            nvcc_flags=tuple(manifest["flags"]["nvcc_flags"]), build_dir=build_dir, jobs=jobs, verbose=verbose,
            launcher=launcher)
    plan = builder.make_plan(selection, options)
    tools = builder.toolchain(plan)
    check_here(plan, tools, first)
    builder.log(f"{len(ordered)} shards of {plan.key} fit: {len(manifest['variants'])} TUs, each once")
    no_link = builder.why_no_link(options)
    if no_link:
        raise BuildError(f"checked {len(ordered)} shards of {plan.key}: they fit, but cannot link the extension: "
                         f"{no_link}; install a CUDA build of torch ({builder.TORCH_CUDA_HINT}) and rerun "
                         f"`{link_command([a.path for a in ordered], build_dir)}`")
    builder.prepare(plan)
    spec = builder.torch_link_spec(plan)
    with builder.damaged_build_dir(plan), builder.build_lock(plan.build_dir):
        objects = _place_objects(plan, ordered)
        with cache.private_umask():
            render.render_build(plan.selection, plan.gen_dir, build_key=plan.key, profile=plan.profile,
                                context=builder.tree_context(plan))
            render.write_if_different(plan.build_dir / LINK_FILE, link_text(plan, tools, spec, objects))
        _run(plan)
        linked = builder._manifest(plan, linked=True)
        linked["linked_from"] = [{"shard": a.manifest["shard"], "path": str(a.path.absolute()),
                                  "units": a.manifest["units"]} for a in ordered]
        linked["linked"] = builder.linked_record(plan, tools)  # load() uses the extension while these hold
        with cache.private_umask():
            render.write_if_different(plan.manifest_path, json.dumps(linked, indent=2, sort_keys=True) + "\n")
    return plan, plan.extension_path


def _selection_request(manifest: dict) -> dict[str, Any]:
    selection = manifest["selection"]
    request = {k: selection[k] for k in ("hdim", "dtype", "arch", "direction", "causal")}
    request["features"] = selection["features"] or "none"
    if selection.get("profile") != profiles.BUILTIN:
        args = manifest["cli_args"]
        request.update(source=args[args.index("--source") + 1], profile=selection["profile"])
    return request


def _place_objects(plan: Plan, ordered: list[Artifact]) -> list[str]:
    """Copy every shard's objects into the build dir's obj/ (the shared extra objects from shard 1)."""
    obj = plan.build_dir / "obj"
    with cache.private_umask():
        obj.mkdir(exist_ok=True, mode=cache.PRIVATE_DIR)
        placed = []
        for artifact in ordered:
            names = artifact.manifest["units"] + (artifact.manifest["extra_objects"] if artifact is ordered[0] else [])
            for name in names:
                shutil.copyfile(artifact.path / graph.object_path(name), plan.build_dir / graph.object_path(name))
                placed.append(graph.object_path(name))
    order = [graph.object_path(u) for u in plan.units] + [graph.object_path(n) for n in ordered[0].manifest["extra_objects"]]
    return [o for o in order if o in placed]


def _run(plan: Plan) -> None:
    ninja = env.find_ninja()
    if ninja is None:
        raise BuildError("ninja not found (neither the ninja PyPI package nor ninja on PATH): `pip install ninja`")
    command = [str(ninja), "-C", str(plan.build_dir), "-f", LINK_FILE, "-j", str(plan.jobs)]
    command += ["-v"] if plan.options.verbose else []
    with cache.private_umask(), processes.signals_raise(), \
            processes.running(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, errors="replace",
                              env=launchers.ninja_environment(plan.options.launcher, plan.build_dir,
                                                              builder.tree_root(plan))) as process:
        output = "".join(processes.output_lines(process))  # a signal reaches the main thread while ninja is quiet
        code = process.wait()
    (plan.build_dir / "link.log").write_text(output)
    if code != 0:
        lines = [line for line in output.splitlines() if "error" in line.lower()] or output.splitlines()[-3:]
        raise BuildError(f"link failed: {lines[0] if lines else f'ninja exited with {code}'}; full log: "
                         f"{plan.build_dir / 'link.log'}")
