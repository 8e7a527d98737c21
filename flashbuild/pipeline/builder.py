"""The build stage's entry points: `build` (render, ninja, link) and `load` (build if needed, then
import), over a plan (plan.py), a toolchain (toolchain.py) and a private build dir (cache.py).

Progress and logs go to stderr; the CLI prints results to stdout. The names other stages use are
importable from here: the plan's (parse_request, make_plan, ...), the toolchain's and the cache's.
"""

from __future__ import annotations

import contextlib
import json
import os
import shlex
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

from .. import env, safe_io
from ..version import __version__
from ..errors import BuildError, ExtensionImportError, SelectionError
from ..selection.variants import Selection
from . import cache, compile_profile, graph, launcher, loader, processes, provenance, render
from .cache import CachedBuild, build_lock, cached_builds, remove_build  # noqa: F401 (the stage's API)
from .ninja_output import NinjaOutput, new_log_entries, read_ninja_log
from .plan import (TORCH_CUDA_HINT, BuildOptions, Plan, cache_key, check_api_keywords, cutlass_identity,  # noqa: F401
                   describe_plan, features_line, log, make_plan, parse_request, plural, tree_context, versions,
                   why_no_link)
from .toolchain import LINK_SPEC_FILE, toolchain, torch_link_spec, tree_root  # noqa: F401

STATUS_FORMAT = "@@flashbuild %f/%t %e@@ "  # NINJA_STATUS: parsed back by NinjaOutput


@dataclass
class BuildResult:
    build_dir: Path
    extension: Path | None
    manifest: dict
    timings: dict[str, float]
    key: str
    module_name: str


def prepare(plan: Plan) -> None:
    """The plan's build dir, created private or checked (cache.prepare_build_dir)."""
    cache.prepare_build_dir(plan.build_dir, in_cache=plan.options.build_dir is None)


# ---------------------------------------------------------------- running ninja

def run_ninja(plan: Plan) -> tuple[NinjaOutput, dict[str, float]]:
    """Run ninja -k 0 in the build dir, streaming progress lines; returns the parsed output and the
    compile time of every edge that ran (from the .ninja_log entries this run added). However this
    ends (a failure, Ctrl-C, SIGTERM), no compiler it started is left running (processes.py)."""
    ninja = env.find_ninja()
    if ninja is None:
        raise BuildError("ninja not found (neither the ninja PyPI package nor ninja on PATH): `pip install ninja`")
    processes.stop_leftovers(plan.build_dir, log=log)
    ninja_log = plan.build_dir / ".ninja_log"
    before = read_ninja_log(ninja_log)
    command = [str(ninja), "-C", str(plan.build_dir), "-k", "0", "-j", str(plan.jobs)]
    if plan.options.verbose:
        command.append("-v")
    output = NinjaOutput(plan.units, on_message=log, echo=log if plan.options.verbose else None)
    started = time.monotonic()
    with cache.private_umask(), open(plan.build_dir / "build.log", "w") as build_log, processes.signals_raise(), \
            processes.running(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, errors="replace",
                              env=launcher.ninja_environment(plan.options.launcher, plan.build_dir, tree_root(plan),
                                                             NINJA_STATUS=STATUS_FORMAT)) as process:
        for line in processes.output_lines(process):
            build_log.write(line)
            output.feed(line.rstrip("\n"))
        output.finish(process.wait())
    timings = {output.target_name(path): seconds for path, seconds in new_log_entries(before, ninja_log).items()}
    output.wall_seconds = time.monotonic() - started
    return output, timings


def timings_table(timings: dict[str, float], wall: float) -> str:
    if not timings:
        return f"nothing to compile: up to date ({wall:.1f}s)"
    width = max(len(name) for name in timings)
    rows = [f"  {name:<{width}}  {seconds:7.1f}s" for name, seconds in sorted(timings.items(), key=lambda kv: -kv[1])]
    return "\n".join([f"compiled {plural(len(timings), 'target')} in {wall:.1f}s:"] + rows)


def log_compile_profile(build_dir: Path, phases: bool, templates: bool, compiled: list[str]) -> None:
    """The tables of --profile-compile (nvcc's phases per TU) and --profile-templates (cicc's split and
    the costliest template families, from the traces of the kernel TUs this build compiled: `compiled`,
    each of which should have left obj/NAME.o.json), to the log and to compile_profile.txt."""
    csv_path = build_dir / compile_profile.CSV_NAME
    profiles = compile_profile.parse_by_source(csv_path.read_text()) if phases and csv_path.is_file() else {}
    traces, unreadable = compile_profile.read_traces(
        {name: build_dir / "obj" / f"{name}.o.json" for name in compiled}, delete=True) if templates else ({}, {})
    if not profiles and not traces and not unreadable:
        log("profile: no TU was compiled (up to date), so nothing to show")
        return
    tables = []
    if profiles:
        tables.append("nvcc phases per TU (nvcc --time):\n" + compile_profile.format_table(profiles)
                      + ("\n(traced: cicc and ptxas include the trace's own cost)" if traces else ""))
    if traces or unreadable:
        tables.append("cicc split (nvcc --fdevice-time-trace; tracing slows cicc, read it for proportions):\n"
                      + compile_profile.format_cicc_table(traces, unreadable))
    text = "\n\n".join(tables)
    with cache.private_umask():
        render.write_if_different(build_dir / "compile_profile.txt", text + "\n")
    log(text)


def _manifest(plan: Plan, linked: bool) -> dict:
    selection = plan.selection
    return {
        "flashbuild": __version__, "key": plan.key, "module_name": plan.module_name,
        "selection": {"hdim": list(selection.hdims), "dtype": list(selection.dtypes), "arch": list(selection.archs),
                      "direction": list(selection.directions), "causal": selection.causal_mode,
                      "features": list(selection.features)},
        "flags": {"debug": plan.options.flags.debug, "lineinfo": plan.options.flags.lineinfo,
                  "nvcc_flags": list(plan.options.flags.nvcc_flags)},
        "profile": selection.profile, "source": selection.source,
        "variants": [v.name for v in selection.variants] if plan.profile.builtin else [u.name for u in plan.units],
        "units": [{"name": u.name, "direction": u.direction, "hdim": u.hdim, "dtype": u.dtype, "causal": u.causal,
                   "archs": list(u.archs), "features": list(u.features),
                   **({"variant": u.variant.name, "part": u.part} if u.part else {})} for u in plan.units],
        "versions": plan.versions,
        "extension": graph.extension_name(plan.module_name) if linked else None,
    }


def _origins(plan: Plan, value: str) -> str:
    """Which inputs put `value` (a path or flag graph.py refused) into the build."""
    named = [(plan.build_dir, "--build-dir" if plan.options.build_dir else "FLASHBUILD_CACHE_DIR"),
             (env.repo_root(), "FLASHBUILD_ROOT"), (tree_root(plan), "--source"),
             (plan.nvcc.path.parent.parent if plan.nvcc else None, f"nvcc's location ({plan.nvcc.source if plan.nvcc else ''}: "
                                                                    "CUDA_HOME, CUDA_PATH or PATH)")]
    found = [name for where, name in named if where is not None and str(where) in value]
    return " or ".join(dict.fromkeys(found)) or "FLASHBUILD_ROOT, --source, CUDA_HOME, the CUTLASS or torch install"


def ninja_text(plan: Plan, tools: graph.Toolchain, link: graph.LinkSpec | None) -> str:
    """The build.ninja text; a path or flag no escaping makes safe there is a SelectionError naming
    the input it came from."""
    try:
        return graph.graph_text(plan.units, toolchain=tools, gen_dir=plan.gen_dir, flags=plan.options.flags,
                                link=link, extra_units=(render.MISSING_TU,) if plan.missing else ())
    except graph.UnsafeValueError as exc:
        raise SelectionError(f"{exc} (it comes from {_origins(plan, str(exc))}); use a path without it") from None


def _build_locked(plan: Plan, tools: graph.Toolchain, link: graph.LinkSpec | None) -> BuildResult:
    """Render, write build.ninja, run ninja, write the manifest. Call with the build lock held."""
    text = ninja_text(plan, tools, link)  # first: a value it refuses leaves nothing written
    with cache.private_umask():
        render.render_build(plan.selection, plan.gen_dir, build_key=plan.key, profile=plan.profile,
                            context=tree_context(plan))
        (plan.build_dir / "obj").mkdir(exist_ok=True, mode=cache.PRIVATE_DIR)
        render.write_if_different(plan.build_dir / "build.ninja", text)
    phases = compile_profile.NVCC_FLAG in plan.options.flags.nvcc_flags
    templates = compile_profile.TRACE_FLAG in plan.options.flags.nvcc_flags
    if phases:  # nvcc appends: only this build's TUs go into this build's table
        (plan.build_dir / compile_profile.CSV_NAME).unlink(missing_ok=True)
    if templates:  # an interrupted build's traces are not this build's
        for stale in (plan.build_dir / "obj").glob("*.o.json"):
            stale.unlink()
    output, timings = run_ninja(plan)
    if output.failed:
        raise BuildError(output.summary(plan.build_dir / "build.log", plan.command()))
    log(timings_table(timings, output.wall_seconds))
    if phases or templates:
        kernel_tus = {unit.name for unit in plan.units}
        log_compile_profile(plan.build_dir, phases, templates, [name for name in timings if name in kernel_tus])
    manifest = _manifest(plan, linked=link is not None)
    with cache.private_umask():
        render.write_if_different(plan.manifest_path, json.dumps(manifest, indent=2, sort_keys=True) + "\n")
    return BuildResult(build_dir=plan.build_dir, extension=plan.extension_path if link else None,
                       manifest=manifest, timings=timings, key=plan.key, module_name=plan.module_name)


@contextlib.contextmanager
def damaged_build_dir(plan: Plan):
    """An OSError on a file of the build dir (a file where a dir belongs, a dir where a file does: the
    dir was damaged) raised in the block is a BuildError naming it and the fix."""
    try:
        yield
    except OSError as exc:
        if not exc.filename or not Path(exc.filename).is_relative_to(plan.build_dir):
            raise
        fix = (f"`flashbuild clean {plan.key}`" if plan.options.build_dir is None
               else f"`rm -r {shlex.quote(str(plan.build_dir))}`")
        raise BuildError(f"build dir {plan.build_dir} is damaged: {exc.filename}: {exc.strerror or exc}; remove it "
                         f"with {fix} and rerun `{plan.command()}`") from None


def build(selection: Selection, options: BuildOptions) -> BuildResult:
    """Compile the selection into its build dir (and link the extension unless compile_only).
    Where torch has no CUDA, compiles the kernel objects, then raises BuildError saying why it
    cannot link and what to do."""
    plan = make_plan(selection, options)
    tools = toolchain(plan)
    no_link = why_no_link(options)
    prepare(plan)
    link = None if no_link else torch_link_spec(plan)
    with damaged_build_dir(plan), build_lock(plan.build_dir):
        result = _build_locked(plan, tools, link)
    if no_link and not options.compile_only:
        raise BuildError(
            f"compiled {plural(len(plan.units), 'kernel object')} into {plan.build_dir / 'obj'}, but cannot link the "
            f"extension: {no_link}; install a CUDA build of torch ({TORCH_CUDA_HINT}) and rerun `{plan.command()}`, "
            f"or add --compile-only to stop after the kernel objects")
    return result


# ---------------------------------------------------------------- load: the contract

def _ninja_has_no_work(build_dir: Path) -> bool:
    ninja = env.find_ninja()
    if ninja is None:
        return False
    out = subprocess.run([str(ninja), "-C", str(build_dir), "-n"], capture_output=True, text=True, check=False)
    return out.returncode == 0 and "no work to do" in out.stdout


def import_extension(extension: Path, module_name: str, *, fresh: bool = True):
    """A linked extension, checked (ours, not a link, not writable by others), then imported; one
    rebuilt since this process imported it loads fresh under a name of its own (loader.py)."""
    cache.check_loadable(extension)
    return loader.load_extension(extension, module_name, fresh=fresh)


def import_build(plan: Plan):
    """The plan's linked extension, imported (import_extension); one that links but does not import
    (an undefined symbol) is an ExtensionImportError naming the build and where its link line is.
    load() and the warm watch import through here."""
    # An upstream tree's package imports its extension by name, once: a rebuilt one needs a new process.
    try:
        return import_extension(plan.extension_path, plan.module_name, fresh=plan.profile.builtin)
    except ImportError as exc:
        if isinstance(exc, ExtensionImportError) or "undefined symbol" not in str(exc):
            raise
        raise ExtensionImportError(
            f"{plan.extension_path.name} of {plan.key} linked but does not import: {exc}; the link left out a "
            f"library or object it needs (`{plan.command()} -v` shows the link line): a bug of flashbuild or of "
            f"the profile, please report it with that line and `flashbuild doctor`") from None


def _try_load(plan: Plan, tools: graph.Toolchain, link: graph.LinkSpec):
    """The module when the build dir holds an up-to-date linked extension of this key, else None."""
    try:
        manifest = safe_io.read_json(plan.manifest_path)  # a regular file, JSON Python can nest
    except (OSError, ValueError):
        return None
    if not isinstance(manifest, dict) or manifest.get("key") != plan.key or not manifest.get("extension") \
            or not plan.extension_path.is_file():
        return None
    if manifest.get("linked_from"):
        return import_build(plan) if _linked_is_current(plan, tools, manifest) else None
    try:
        if (plan.build_dir / "build.ninja").read_text() != ninja_text(plan, tools, link):
            return None
    except OSError:
        return None
    if not render.up_to_date(plan.selection, plan.gen_dir, build_key=plan.key, profile=plan.profile,
                             context=tree_context(plan)):
        return None
    if not _ninja_has_no_work(plan.build_dir):
        return None
    return import_build(plan)


def linked_record(plan: Plan, tools: graph.Toolchain) -> dict:
    """What a build dir `flashbuild link` made records beside the manifest, for load(): ninja never
    compiled its objects, so ninja's records cannot say it is current; these can."""
    return {"tree_digest": provenance.tree_digest(plan), "toolkit": provenance.toolkit(plan, tools),
            "versions": plan.versions, "extension_sha256": provenance.sha256(plan.extension_path)}


def _linked_is_current(plan: Plan, tools: graph.Toolchain, manifest: dict) -> bool:
    """A linked build dir is current when this machine would build the same key from the same
    sources and toolkit as the shards did, its generated files are what this flashbuild writes, and
    the extension is the one link wrote. Anything else: build here as usual (it compiles again)."""
    if not render.up_to_date(plan.selection, plan.gen_dir, build_key=plan.key, profile=plan.profile,
                             context=tree_context(plan)):
        return False
    return manifest.get("linked") == linked_record(plan, tools)


def load(selection: Selection, options: BuildOptions):
    """Build if needed, then import the extension. The contract, step by step:

    0. Check the build dir: created private (0700), or an existing one that is a real directory of
       the user's that nobody else can write (else SelectionError naming it and the fix).
    1. Try load (no lock): if the build dir of this key has a manifest and a linked extension,
       its generated files and build.ninja are what this flashbuild would write, and `ninja -n`
       has nothing to do, import it and return. A build dir `flashbuild link` wrote has no ninja
       records of its objects: there the digest of the sources, the toolkit, the versions and the
       extension's hash recorded at link time must match instead. Any mismatch falls through to 2.
    2. Lock: take the build dir's file lock; while another process builds this key, wait.
    3. Try load again: the process we waited for may have built exactly this.
    4. Build: render, write build.ninja, run ninja (kernels; torch's ABI probe, then the binding;
       link to a temporary name then rename), write the manifest. Raises BuildError on compile errors (naming every
       failed variant) and when torch has no CUDA (after compiling the kernels).
    5. Load: check the extension (ours, not a link, not writable by others), import it (torch
       first) and return the module (import_build); ImportError propagates, an undefined symbol as
       ExtensionImportError naming the build and where its link line is.
    """
    if options.compile_only:
        raise SelectionError("load() needs a linked extension, and compile_only=True builds none; "
                             "call flashbuild.build(compile_only=True) instead, or drop compile_only")
    plan = make_plan(selection, options)
    tools = toolchain(plan)
    no_link = why_no_link(options)
    if no_link:
        raise BuildError(f"cannot build a loadable extension: {no_link}; install a CUDA build of torch "
                         f"({TORCH_CUDA_HINT}), or compile kernel objects only with `{plan.command()} --compile-only`")
    prepare(plan)  # 0
    link = torch_link_spec(plan)
    module = _try_load(plan, tools, link)  # 1
    if module is not None:
        return module
    with damaged_build_dir(plan), build_lock(plan.build_dir):  # 2
        module = _try_load(plan, tools, link)  # 3
        if module is not None:
            return module
        _build_locked(plan, tools, link)  # 4
    return import_build(plan)  # 5
