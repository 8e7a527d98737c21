"""The ninja graph of a build: one nvcc edge per instantiation TU (a unit of the profile, with a
depfile, so editing a header recompiles exactly the TUs that include it), and, when linking, the API
sources (the torch binding) and the link edge. Paths inside the build dir are relative (ninja runs
with -C).

Every value is escaped twice: for the shell that runs the command (shlex) and for ninja (`$` ->
`$$`; paths in build lines escaped here). A newline, carriage return or NUL cannot be escaped for
either, nor `|` in a build line's path (ninja has no escape for it), so a value holding one is
refused here (the callers refuse it earlier, naming the flag). And nvcc runs its own steps (gcc -E,
cudafe++, cicc, ...) through a shell once more: most arguments inside double quotes, where `$`, a
backtick, `"` and `\\` still act, and an -Xcompiler (-Xptxas, ...) value bare (`nvcc --dryrun` shows
it, nvcc 13.0). No quoting of ours survives that uniformly, so the user's values that reach nvcc (its
flags, the build dir, include dirs) holding one are refused too (nvcc_arg_problem)."""

from __future__ import annotations

import io
import shlex
from dataclasses import dataclass, field
from pathlib import Path

from ninja import ninja_syntax

from . import costs
from ..selection.variants import CompileFlags
from ..sources.units import Unit, is_kernel_part

BINDING_OBJECT = "obj/flash_api.o"  # the built-in binding's object (kernels/binding/flash_api.cpp)


@dataclass(frozen=True)
class Toolchain:
    """The compilers and what every kernel TU is compiled with (found by toolchain.py from the
    profile and the machine, passed in so this module stays pure)."""

    nvcc: Path
    include_dirs: tuple[Path, ...]       # after the build's generated/ dir: the tree's, CUTLASS, torch's
    gencodes: dict[str, str] = field(hash=False, compare=False)  # arch -> "-gencode ..."
    flags: tuple[str, ...] = ()          # the profile's nvcc flags and defines
    launcher: str | None = None          # e.g. ccache: prefixes every compile command
    overlap: tuple[str, ...] = ()        # the driver that runs nvcc's host and device front ends at once
                                         # (python, nvcc_overlap.py): prefixes the `nvcc` rule's nvcc


TORCH_ABI_FILE = "torch_abi.h"  # the ABI probe's output (a header of torch's ABI macros), in the build dir


@dataclass(frozen=True)
class AbiProbe:
    """Where the binding's torch ABI macros come from when the plan did not import torch: an edge
    (`python script torch_abi.h ROOT VERSION`, torch_abi.py) imports torch while the kernel TUs compile
    and writes them as a header, which the API sources' compile force-includes (`-include torch_abi.h`;
    compiler caches hash it as they hash any header). It reruns when torch's root or version (in its
    command) or its version.py (an input) changes, and rewrites the header only when the macros changed
    (restat)."""

    python: Path
    script: Path
    torch_root: Path
    torch_version: str


@dataclass(frozen=True)
class LinkSpec:
    """What the API (binding) and link edges need from torch (only computed when linking)."""

    module_name: str
    cxx: Path
    cxx_std: str
    include_dirs: tuple[Path, ...]
    defines: tuple[str, ...]
    torch_lib: Path
    api_sources: tuple[Path, ...]
    tree_include_dirs: tuple[Path, ...] = ()   # the tree's own dirs, after generated/
    cxx_flags: tuple[str, ...] = ()            # the profile's
    abi_probe: AbiProbe | None = None          # None: torch's ABI defines are in `defines`


class UnsafeValueError(ValueError):
    """A value that no escaping makes safe in build.ninja (a newline, CR or NUL)."""


def _checked(value: str) -> str:
    for char in ("\n", "\r", "\0"):
        if char in value:
            raise UnsafeValueError(f"refusing to write {value!r} into build.ninja: it holds {char!r}")
    return value


NVCC_SHELL_CHARS = {"$": "`$`", "`": "a backtick", '"': 'a double quote (`"`)', "\\": "a backslash"}
# nvcc options whose value it hands to the host compiler, ptxas, ... unquoted: only these characters are safe.
RAW_VALUE_OPTIONS = ("-Xcompiler", "--compiler-options", "-Xlinker", "--linker-options", "-Xptxas", "--ptxas-options",
                     "-Xnvlink", "--nvlink-options", "-Xarchive", "--archive-options", "-Xcudafe", "-Xfatbin",
                     "--fatbin-options", "-Xnvvm")
RAW_VALUE_SAFE = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_+,.=/:@%^-")


def nvcc_arg_problem(value: str, raw: bool = False) -> str | None:
    """Why nvcc's own shell would read `value` (an argument; `raw`: the value of an -Xcompiler-like
    option, passed bare) as more than text, or None."""
    for char, name in NVCC_SHELL_CHARS.items():
        if char in value:
            return f"it holds {name}, which the shell nvcc runs its steps through would act on"
    if raw:
        odd = sorted({c for c in value if c not in RAW_VALUE_SAFE})
        if odd:
            return (f"nvcc passes an option's value to the host compiler (or ptxas, ...) unquoted, and this one holds "
                    f"{' '.join(repr(c) for c in odd)}; give one comma-separated list of plain flags, "
                    f"e.g. -Xcompiler=-O2,-fno-strict-aliasing")
    return None


def nvcc_args_problem(args) -> tuple[int, str] | None:
    """(its index, why) for the first of nvcc's arguments `args` its shell would act on, or None.
    An option of RAW_VALUE_OPTIONS takes its value after `=` or as the next argument."""
    args = [str(a) for a in args]
    for i, arg in enumerate(args):
        option, equals, value = arg.partition("=")
        raw_value = option in RAW_VALUE_OPTIONS and bool(equals)
        problem = nvcc_arg_problem(value if raw_value else arg, raw=raw_value) or \
            (nvcc_arg_problem(arg, raw=True) if i and args[i - 1] in RAW_VALUE_OPTIONS else None)
        if problem:
            return i, problem
    return None


def _checked_nvcc(args) -> list:
    args = list(args)
    found = nvcc_args_problem(args)
    if found:
        raise UnsafeValueError(f"refusing to pass {str(args[found[0]])!r} to nvcc: {found[1]}")
    return args


def shell(args) -> str:
    """A command line as a ninja variable value: each argument shell-quoted, then `$` doubled."""
    return ninja_syntax.escape(shlex.join(_checked(str(a)) for a in args))


def path(value, nvcc: bool = False) -> str:
    """A path in a build line: `$`, space and colon escaped for ninja; `|` refused (ninja has no
    escape for it in a path), and with `nvcc` (an nvcc input) what nvcc's shell acts on. (ninja_syntax's
    escape_path leaves a lone `$` alone, so build lines are written here, not with Writer.build.)"""
    value = _checked(str(value))
    if "|" in value:
        raise UnsafeValueError(f"refusing to write {value!r} into build.ninja: ninja cannot escape `|` in a path")
    if nvcc:
        _checked_nvcc([value])
    return value.replace("$", "$$").replace(" ", "$ ").replace(":", "$:")


def _build(out: io.StringIO, outputs: list[str], rule: str, inputs: list[str],
           variables: dict[str, str] | None = None, implicit: list[str] | None = None) -> None:
    """One build statement; outputs and inputs are already escaped with path()."""
    extra = ["|", *implicit] if implicit else []
    out.write(f"build {' '.join(outputs)}: {' '.join([rule, *inputs, *extra])}\n")
    for key, value in (variables or {}).items():
        out.write(f"  {key} = {value}\n")


def object_path(unit: Unit | str) -> str:
    return f"obj/{unit if isinstance(unit, str) else unit.name}.o"


def fatbin_path(unit: Unit | str) -> str:
    """Where a kernel TU's fatbin lands (nvcc -fatbin) before its object embeds it; the object's
    source names it (.incbin), relative to the build dir, ninja's cwd."""
    return object_path(unit) + ".fatbin"


def api_object(source: Path) -> str:
    return f"obj/{Path(source).stem}.o"


def extension_name(module_name: str) -> str:
    return f"{module_name}.so"


def nvcc_flags(toolchain: Toolchain, gen_dir: Path, flags: CompileFlags) -> list[str]:
    """The flags every kernel TU gets (each unit's -gencode is added per edge); generated/ is first
    on the include path, so a generated header overlays the tree's."""
    out = ["-Xcompiler", "-fPIC", *toolchain.flags, f"-I{gen_dir}", *(f"-I{d}" for d in toolchain.include_dirs)]
    if flags.debug:
        out += ["-G", "-lineinfo"]  # device debug: keep asserts, so no -DNDEBUG
    else:
        out += ["-DNDEBUG"] + (["-lineinfo"] if flags.lineinfo else [])
    return out + list(flags.nvcc_flags)


def binding_flags(link: LinkSpec, toolchain: Toolchain, gen_dir: Path) -> list[str]:
    includes = [f"-I{d}" for d in (gen_dir, *link.tree_include_dirs, *link.include_dirs)]
    # Hidden visibility (the built-in profile's cxx flags): an extension exports only its PyInit, so two
    # builds loaded in one process never bind to each other's symbols (inline variables and templates
    # are otherwise unique process-wide: a second build read the first one's variant table).
    abi = ["-include", TORCH_ABI_FILE] if link.abi_probe else []  # the probe's macros, before any other header
    return [*link.cxx_flags, f"-std={link.cxx_std}", "-fPIC", *includes, *link.defines, *abi]


def link_flags(link: LinkSpec) -> list[str]:
    # torch_cuda as torch's own CUDAExtension links it: a tree on torch's stable ABI (FA3) calls its
    # aoti_torch_* CUDA shims, which no library the import of torch makes global provides.
    return [f"-L{link.torch_lib}", "-lc10", "-lc10_cuda", "-ltorch", "-ltorch_cpu", "-ltorch_cuda", "-ltorch_python",
            "-Xlinker", f"-rpath,{link.torch_lib}"]


def write_link_rules(w: ninja_syntax.Writer, link: LinkSpec, toolchain: Toolchain, gen_dir: Path) -> None:
    """The variables and rules of the API sources' and the link's edges (and the ABI probe's)."""
    launcher = [toolchain.launcher] if toolchain.launcher else []
    w.variable("cxx", shell([*launcher, link.cxx]))
    w.variable("cxx_flags", shell(binding_flags(link, toolchain, gen_dir)))
    w.variable("link_flags", shell(_checked_nvcc(link_flags(link))))  # the link edge is nvcc's
    w.variable("linker", shell([toolchain.nvcc]))
    w.rule("cxx", "$cxx $cxx_flags -MD -MF $out.d -c $in -o $out",
           description="binding", depfile="$out.d", deps="gcc")
    # Link to a temporary name and rename: a killed build never leaves a loadable half file.
    w.rule("link", "$linker -shared -cudart shared $in $link_flags -o $out.tmp && mv -f $out.tmp $out",
           description="link")
    if link.abi_probe:
        probe = link.abi_probe
        w.variable("python", shell([probe.python]))
        w.variable("torch_abi_script", shell([probe.script]))
        w.variable("torch", shell([probe.torch_root, probe.torch_version]))
        w.rule("torch_abi", "$python $torch_abi_script $out $torch", description="torch ABI", restat=True)


def write_api_edges(out: io.StringIO, link: LinkSpec) -> list[str]:
    """The ABI probe's edge (first: it gates the API sources) and one compile edge per API source;
    returns the API objects."""
    implicit = []
    if link.abi_probe:
        version_file = link.abi_probe.torch_root / "version.py"
        _build(out, [path(TORCH_ABI_FILE)], "torch_abi", [], implicit=[path(version_file)])
        implicit = [path(TORCH_ABI_FILE)]
    objects = []
    for source in link.api_sources:
        objects.append(path(api_object(source)))
        _build(out, [objects[-1]], "cxx", [path(source)], implicit=implicit)
    return objects


def graph_text(units: tuple[Unit, ...], *, toolchain: Toolchain, gen_dir: Path, flags: CompileFlags,
               link: LinkSpec | None, extra_units: tuple[str, ...] = ()) -> str:
    """The build.ninja text: kernel objects always (plus `extra_units`: generated TUs such as the
    stubs, compiled for every arch of the build); API sources and the link edge only when `link` is given."""
    out = io.StringIO()
    w = ninja_syntax.Writer(out, width=120)
    launcher = [toolchain.launcher] if toolchain.launcher else []
    w.comment("Generated by flashbuild: one nvcc edge per instantiation TU. Do not edit.")
    w.variable("ninja_required_version", "1.10")
    w.variable("nvcc", shell([*launcher, _checked_nvcc([toolchain.nvcc])[0]]))  # nvcc finds its headers from its path
    # The profile's and torch's flags are flashbuild's (toolchain.py checks a profile's); the rest is the user's.
    own = len(toolchain.flags) + 2
    every = nvcc_flags(toolchain, gen_dir, flags)
    w.variable("nvcc_flags", shell(every[:own] + _checked_nvcc(every[own:])))
    w.newline()
    compile_nvcc = "$nvcc"
    if toolchain.overlap and not launcher:  # a compiler cache must see nvcc itself
        w.variable("nvcc_overlap", shell([*toolchain.overlap, _checked_nvcc([toolchain.nvcc])[0]]))
        compile_nvcc = "$nvcc_overlap"
    w.rule("nvcc", f"{compile_nvcc} $nvcc_flags $gencode -MD -MF $out.d -c $in -o $out",
           description="$variant", depfile="$out.d", deps="gcc")
    if any(is_kernel_part(u.part) for u in units):
        # A kernel TU (units.is_kernel_part): device code alone (nvcc -fatbin: no cudafe++, no host compiler),
        # written first to the object's path (so --profile-templates' trace is named after the object, as
        # every TU's is), moved to fatbin_path, then embedded: the same source compiled as host C++ with
        # FLASHBUILD_EMBED_FATBIN is one .incbin of it into .nv_fatbin (where cuobjdump finds it). The
        # embedding never goes through the launcher: a compiler cache does not see an .incbin's file.
        w.variable("nvcc_embed", shell([_checked_nvcc([toolchain.nvcc])[0]]))
        w.rule("fatbin", "$nvcc $nvcc_flags $gencode -MD -MF $out.d -fatbin $in -o $out && mv -f $out $out.fatbin && "
                         "$nvcc_embed -Xcompiler -fPIC -x c++ -DFLASHBUILD_EMBED_FATBIN -c $in -o $out",
               description="$variant", depfile="$out.d", deps="gcc")
    if link is not None:
        write_link_rules(w, link, toolchain, gen_dir)
    w.newline()
    api_objects = []
    if link is not None:
        # With no .ninja_log to rank edges by (a cold build), ninja starts ready edges in file order.
        # The API sources' edges first (after the ABI probe they wait for): their cost is the tree's
        # (an upstream tree's API source can take longer than any kernel TU), so they never wait for a
        # free job; then the kernel TUs, longest first, so that none of them starts last and holds up
        # the link alone.
        api_objects = write_api_edges(out, link)
    every_arch = sorted({arch for u in units for arch in u.archs})
    edges = [(u.name, u.archs, "fatbin" if is_kernel_part(u.part) else "nvcc") for u in costs.longest_first(units)]
    edges += [(name, tuple(every_arch), "nvcc") for name in extra_units]
    for name, archs, rule in edges:
        gencode = shell(" ".join(toolchain.gencodes[a] for a in archs).split())
        _build(out, [path(object_path(name))], rule, [path(gen_dir / f"{name}.cu", nvcc=True)],
               {"gencode": gencode, "variant": name})
    if link is not None:
        objects = [path(object_path(u)) for u in units] + [path(object_path(name)) for name in extra_units]
        objects += api_objects
        _build(out, [path(extension_name(link.module_name))], "link", objects)
    return out.getvalue()
