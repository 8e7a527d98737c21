"""The build: plan a selection into a cached build dir, render, run ninja, link, and load.

The cache key is readable (archs, dtypes, head dims, directions, causal values, features, flags) plus a short
hash of everything that must change it: the variants, the compile flags, and the flashbuild, nvcc,
torch and Python ABI versions. Kernel sources are not in it: ninja's depfiles see header edits.
Progress and logs go to stderr; the CLI prints results to stdout.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import json
import os
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import filelock

from .. import __version__, env
from . import graph, loader, render
from ..errors import BuildError, SelectionError
from .ninja_output import NinjaOutput, new_log_entries, read_ninja_log
from ..selection.variants import CompileFlags, Selection, select

STATUS_FORMAT = "@@flashbuild %f/%t %e@@ "  # NINJA_STATUS: parsed back by NinjaOutput
TORCH_CUDA_HINT = "pip install torch --index-url https://download.pytorch.org/whl/cu130"


def log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def plural(count: int, noun: str) -> str:
    return f"{count} {noun}{'' if count == 1 else 's'}"


# ---------------------------------------------------------------- request and plan

@dataclass(frozen=True)
class BuildOptions:
    flags: CompileFlags = CompileFlags()
    jobs: int | None = None
    build_dir: Path | None = None
    launcher: str | None = None
    verbose: bool = False
    compile_only: bool = False


def parse_request(*, hdim: Any = None, dtype: Any = None, arch: Any = None, direction: Any = None,
                  causal: Any = None, features: Any = None, no_local: bool = False, no_softcap: bool = False,
                  config: str | None = None, debug: bool = False, lineinfo: bool = False,
                  nvcc_flags: tuple[str, ...] | list[str] = (), jobs: int | None = None,
                  build_dir: str | Path | None = None, launcher: str | None = None, verbose: bool = False,
                  compile_only: bool = False) -> tuple[Selection, BuildOptions]:
    """The Selection and BuildOptions of build()/load() keywords (or CLI flags), validated.
    `features` (load()'s) replaces the preset's or default features; no_local / no_softcap (the
    CLI's --no-local, --no-softcap) remove one from them."""
    without = tuple(name for name, off in (("local", no_local), ("softcap", no_softcap)) if off)
    selection = select(hdim=hdim, dtype=dtype, arch=arch, direction=direction, causal=causal, features=features,
                       without=without, config=config)
    if jobs is not None and jobs < 1:
        raise SelectionError(f"--jobs {jobs}: must be at least 1; use --jobs {env.default_jobs()} or leave it out")
    found = shutil.which(launcher) if launcher else None
    if launcher and found is None:
        raise SelectionError(f"--launcher {launcher}: not found on PATH; install it "
                             f"(e.g. apt-get install {launcher}) or leave --launcher out")
    if launcher and os.sep in launcher:  # a path: ninja runs the compile commands in the build dir
        launcher = str(Path(found).resolve())
    options = BuildOptions(
        flags=CompileFlags(debug=debug, lineinfo=lineinfo, nvcc_flags=tuple(nvcc_flags)),
        jobs=jobs, build_dir=Path(build_dir).resolve() if build_dir else None,
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
                build_dir=options.build_dir or env.cache_dir() / key,
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


# ---------------------------------------------------------------- toolchain and torch (link stage)

def toolchain(plan: Plan) -> graph.Toolchain:
    """The tools a compile needs, or a BuildError that says how to get the missing one."""
    if plan.nvcc is None:
        raise BuildError("nvcc not found (not in $CUDA_HOME/bin, on PATH, in /usr/local/cuda/bin or from the "
                         "nvidia-cuda-nvcc wheel): install the CUDA toolkit or `pip install nvidia-cuda-nvcc`, "
                         "or set CUDA_HOME; `flashbuild doctor` shows what was found")
    cutlass = env.cutlass_include_dir()
    if cutlass is None:
        raise BuildError("CUTLASS headers not found (no cutlass_library package with source/include): "
                         "`pip install nvidia-cutlass`; `flashbuild doctor` shows what was found")
    kernels = env.kernels_dir()
    headers = ["common/params.h"] + sorted({v.family.launch_headers[v.direction] for v in plan.selection.variants})
    for header in headers:
        if not (kernels / header).is_file():
            raise BuildError(f"kernel header {kernels / header} is missing (needed by {plan.selection.describe()}); "
                             f"check FLASHBUILD_ROOT ({env.repo_root()}) or restore kernels/ with `git checkout kernels`")
    return graph.Toolchain(nvcc=plan.nvcc.path, kernels_dir=kernels, cutlass_include=cutlass,
                           launcher=plan.options.launcher)


def _torch_include_paths(cpp_extension) -> list[str]:
    """torch's include dirs, across the two signatures of include_paths()."""
    for kwargs in ({"device_type": "cuda"}, {"cuda": True}, {}):
        try:
            return list(cpp_extension.include_paths(**kwargs))
        except (TypeError, OSError):  # older signature / torch cannot find CUDA_HOME (we add CUDA ourselves)
            continue
    return []


LINK_SPEC_FILE = "link_spec.json"


def torch_link_spec(plan: Plan) -> graph.LinkSpec:
    """What the binding and link edges need from torch. Importing torch takes seconds (3.3 s on the
    H200 host), so the spec is kept in the build dir and reused while what can be read without
    importing torch is unchanged: its location and version, the host compiler and the binding."""
    cxx = env.find_host_cxx()
    if cxx is None:
        raise BuildError("no host C++ compiler for the binding (no $CXX, c++, g++ or clang++ on PATH): "
                         "install one (apt-get install g++) and rerun")
    binding = env.kernels_dir() / "binding" / "flash_api.cpp"
    if not binding.is_file():
        raise BuildError(f"the torch binding {binding} is missing; restore it (`git checkout kernels/binding`) "
                         f"or build kernel objects only with `{plan.command()} --compile-only`")
    torch = env.torch_info()
    stamp = {"torch": [str(torch.root), torch.version] if torch else None, "cxx": str(cxx),
             "binding": str(binding), "module": plan.module_name}
    cache = plan.build_dir / LINK_SPEC_FILE
    try:
        saved = json.loads(cache.read_text())
        if saved["stamp"] == stamp:
            spec = saved["spec"]
            return graph.LinkSpec(
                module_name=spec["module_name"], cxx=Path(spec["cxx"]), cxx_std=spec["cxx_std"],
                include_dirs=tuple(Path(p) for p in spec["include_dirs"]), defines=tuple(spec["defines"]),
                torch_lib=Path(spec["torch_lib"]), binding_source=Path(spec["binding_source"]))
    except (OSError, ValueError, KeyError, TypeError):
        pass
    spec = _import_torch_link_spec(plan, cxx, binding)
    cache.parent.mkdir(parents=True, exist_ok=True)
    fields = {k: (str(v) if isinstance(v, Path) else [str(x) for x in v] if isinstance(v, tuple) else v)
              for k, v in dataclasses.asdict(spec).items()}
    render.write_if_different(cache, json.dumps({"stamp": stamp, "spec": fields}, indent=1) + "\n")
    return spec


def _import_torch_link_spec(plan: Plan, cxx: Path, binding: Path) -> graph.LinkSpec:
    import torch
    from torch.utils import cpp_extension
    import sysconfig

    includes = _torch_include_paths(cpp_extension) + [sysconfig.get_paths()["include"]]
    cuda_include = env.cuda_include_dir(plan.nvcc.path)
    if cuda_include:
        includes.append(str(cuda_include))
    includes += [str(d) for d in env.nvidia_wheel_include_dirs()]
    defines = [f"-DTORCH_EXTENSION_NAME={plan.module_name}", "-DTORCH_API_INCLUDE_EXTENSION_H",
               f"-D_GLIBCXX_USE_CXX11_ABI={int(torch._C._GLIBCXX_USE_CXX11_ABI)}"]
    for name in ("COMPILER_TYPE", "STDLIB", "BUILD_ABI"):  # the pybind11 ABI torch was built with
        value = getattr(torch._C, f"_PYBIND11_{name}", None)
        if value:
            defines.append(f'-DPYBIND11_{name}="{value}"')
    major_minor = tuple(int(p) for p in torch.__version__.split("+")[0].split(".")[:2])
    return graph.LinkSpec(
        module_name=plan.module_name, cxx=cxx,
        cxx_std="c++20" if major_minor >= (2, 13) else "c++17",  # torch >= 2.13 headers need C++20
        include_dirs=tuple(Path(p) for p in dict.fromkeys(includes)), defines=tuple(defines),
        torch_lib=Path(torch.__file__).parent / "lib", binding_source=binding)


# ---------------------------------------------------------------- running ninja

@dataclass
class BuildResult:
    build_dir: Path
    extension: Path | None
    manifest: dict
    timings: dict[str, float]
    key: str
    module_name: str


@contextlib.contextmanager
def build_lock(build_dir: Path):
    """The build dir's file lock: one process builds a key, the others wait here, then load."""
    build_dir.mkdir(parents=True, exist_ok=True)
    lock = filelock.FileLock(str(build_dir / ".lock"))
    try:
        lock.acquire(timeout=0)
    except filelock.Timeout:
        log(f"waiting for another flashbuild process building {build_dir.name} (lock: {lock.lock_file})")
        lock.acquire()
    try:
        yield
    finally:
        lock.release()


def run_ninja(plan: Plan) -> tuple[NinjaOutput, dict[str, float]]:
    """Run ninja -k 0 in the build dir, streaming progress lines; returns the parsed output and the
    compile time of every edge that ran (from the .ninja_log entries this run added)."""
    ninja = env.find_ninja()
    if ninja is None:
        raise BuildError("ninja not found (neither the ninja PyPI package nor ninja on PATH): `pip install ninja`")
    ninja_log = plan.build_dir / ".ninja_log"
    before = read_ninja_log(ninja_log)
    command = [str(ninja), "-C", str(plan.build_dir), "-k", "0", "-j", str(plan.jobs)]
    if plan.options.verbose:
        command.append("-v")
    output = NinjaOutput(plan.selection.variants, on_message=log, echo=log if plan.options.verbose else None)
    started = time.monotonic()
    with open(plan.build_dir / "build.log", "w") as build_log, subprocess.Popen(
            command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, errors="replace",
            env={**os.environ, "NINJA_STATUS": STATUS_FORMAT}) as process:
        for line in process.stdout:
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


def _manifest(plan: Plan, linked: bool) -> dict:
    selection = plan.selection
    return {
        "flashbuild": __version__, "key": plan.key, "module_name": plan.module_name,
        "selection": {"hdim": list(selection.hdims), "dtype": list(selection.dtypes), "arch": list(selection.archs),
                      "direction": list(selection.directions), "causal": selection.causal_mode,
                      "features": list(selection.features)},
        "flags": {"debug": plan.options.flags.debug, "lineinfo": plan.options.flags.lineinfo,
                  "nvcc_flags": list(plan.options.flags.nvcc_flags)},
        "variants": [v.name for v in selection.variants],
        "versions": plan.versions,
        "extension": graph.extension_name(plan.module_name) if linked else None,
    }


def _build_locked(plan: Plan, tools: graph.Toolchain, link: graph.LinkSpec | None) -> BuildResult:
    """Render, write build.ninja, run ninja, write the manifest. Call with the build lock held."""
    render.render_build(plan.selection, plan.gen_dir, build_key=plan.key)
    (plan.build_dir / "obj").mkdir(exist_ok=True)
    render.write_if_different(plan.build_dir / "build.ninja", graph.graph_text(
        plan.selection.variants, toolchain=tools, gen_dir=plan.gen_dir, flags=plan.options.flags, link=link))
    output, timings = run_ninja(plan)
    if output.failed:
        raise BuildError(output.summary(plan.build_dir / "build.log", plan.command()))
    log(timings_table(timings, output.wall_seconds))
    manifest = _manifest(plan, linked=link is not None)
    render.write_if_different(plan.manifest_path, json.dumps(manifest, indent=2, sort_keys=True) + "\n")
    return BuildResult(build_dir=plan.build_dir, extension=plan.extension_path if link else None,
                       manifest=manifest, timings=timings, key=plan.key, module_name=plan.module_name)


def build(selection: Selection, options: BuildOptions) -> BuildResult:
    """Compile the selection into its build dir (and link the extension unless compile_only).
    Where torch has no CUDA, compiles the kernel objects, then raises BuildError saying why it
    cannot link and what to do."""
    plan = make_plan(selection, options)
    tools = toolchain(plan)
    no_link = why_no_link(options)
    link = None if no_link else torch_link_spec(plan)
    with build_lock(plan.build_dir):
        result = _build_locked(plan, tools, link)
    if no_link and not options.compile_only:
        raise BuildError(
            f"compiled {plural(len(selection.variants), 'kernel object')} into {plan.build_dir / 'obj'}, but cannot link the "
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


def _try_load(plan: Plan, tools: graph.Toolchain, link: graph.LinkSpec):
    """The module when the build dir holds an up-to-date linked extension of this key, else None."""
    try:
        manifest = json.loads(plan.manifest_path.read_text())
    except (OSError, ValueError):
        return None
    if manifest.get("key") != plan.key or not manifest.get("extension") or not plan.extension_path.is_file():
        return None
    ninja_text = graph.graph_text(plan.selection.variants, toolchain=tools, gen_dir=plan.gen_dir,
                                  flags=plan.options.flags, link=link)
    try:
        if (plan.build_dir / "build.ninja").read_text() != ninja_text:
            return None
    except OSError:
        return None
    if not render.up_to_date(plan.selection, plan.gen_dir, build_key=plan.key):
        return None
    if not _ninja_has_no_work(plan.build_dir):
        return None
    return loader.load_extension(plan.extension_path, plan.module_name)


def load(selection: Selection, options: BuildOptions):
    """Build if needed, then import the extension. The contract, step by step:

    1. Try load (no lock): if the build dir of this key has a manifest and a linked extension,
       its generated files and build.ninja are what this flashbuild would write, and `ninja -n`
       has nothing to do, import it and return. Any mismatch just falls through to 2.
    2. Lock: take the build dir's file lock; while another process builds this key, wait.
    3. Try load again: the process we waited for may have built exactly this.
    4. Build: render, write build.ninja, run ninja (kernels, binding, link to a temporary name
       then rename), write the manifest. Raises BuildError on compile errors (naming every
       failed variant) and when torch has no CUDA (after compiling the kernels).
    5. Load: import the extension (torch first) and return the module; ImportError propagates.
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
    link = torch_link_spec(plan)
    module = _try_load(plan, tools, link)  # 1
    if module is not None:
        return module
    with build_lock(plan.build_dir):  # 2
        module = _try_load(plan, tools, link)  # 3
        if module is not None:
            return module
        _build_locked(plan, tools, link)  # 4
    return loader.load_extension(plan.extension_path, plan.module_name)  # 5


# ---------------------------------------------------------------- the cache: list and clean

@dataclass(frozen=True)
class CachedBuild:
    key: str
    path: Path
    variants: int
    size_bytes: int
    has_extension: bool


def cached_builds(root: Path | None = None) -> list[CachedBuild]:
    root = root or env.cache_dir()
    builds = []
    for path in sorted(p for p in root.glob("*") if p.is_dir()) if root.is_dir() else []:
        if not (path / "build.ninja").is_file() and not (path / "manifest.json").is_file():
            continue  # not a flashbuild build dir
        try:
            manifest = json.loads((path / "manifest.json").read_text())
        except (OSError, ValueError):
            manifest = {}
        size = sum(f.stat().st_size for f in path.rglob("*") if f.is_file() and not f.is_symlink())
        extension = manifest.get("extension")
        builds.append(CachedBuild(path.name, path, len(manifest.get("variants", [])), size,
                                  bool(extension) and (path / extension).is_file()))
    return builds


def remove_build(build: CachedBuild) -> None:
    """Delete a cached build dir under its lock (waits for a build of it to finish)."""
    with build_lock(build.path):
        shutil.rmtree(build.path)
