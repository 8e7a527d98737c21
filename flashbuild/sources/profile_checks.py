"""A profile is data: the checks that keep every value of one that reaches a shell, build.ninja or a
path inside its roots, run once on each profile read (profile.read_profile calls `check`).

profile.py checks types and shapes (a list of strings, a relative path without `..`). This module
checks what those strings may hold, by where each one goes:

- flags (`flags.nvcc`, `flags.defines`, `flags.cxx`) and gencodes reach nvcc's command line, and nvcc
  runs its own steps through a shell once more, inside double quotes where `$`, a backtick, `"` and
  `\\` still act (pipeline/graph.py says more). flashbuild escapes its users' --nvcc-flag values and
  refuses those no escaping makes safe; a profile's flags get the same refusal here, before anything
  is rendered. A gencode must be `-gencode arch=compute_N,code=sm_N` and nothing else.
- names (`instantiation.*.name`, `support.name`, `generated.file`) become file names in the build
  dir: the name pattern may hold only [A-Za-z0-9_.+-] besides its {fields} (no format spec, no
  conversion, no `/`), so every TU it names is one file inside generated/ and obj/.
- paths in the tree (`tree.*`, `extension.sources`, `generated.replaces`, `support.file`) stay inside
  the tree (relative, no `..`: profile.py) and hold no character nvcc's shell acts on.
- templates are files under templates/ (a missing one is named here, not by Jinja mid-render).
- `tests.env` names variables the pytest plugin sets to TRUE: never one that changes how a process
  loads code (PATH, LD_*, PYTHON*, ...).
- the profile's own name (its file's stem) goes into cache keys: a plain name; and a file named
  flashbuild.toml outside configs/profiles would be taken for the built-in profile, so it is refused.
"""

from __future__ import annotations

import functools
import re
import string
from pathlib import Path

from .. import env
from ..errors import SelectionError

# What nvcc's inner shell acts on inside double quotes (pipeline/graph.py NVCC_SHELL_CHARS), plus what ends a line.
SHELL_CHARS = {"$": "`$`", "`": "a backtick", '"': 'a double quote', "\\": "a backslash", "\n": "a newline",
               "\r": "a carriage return", "\0": "a NUL byte"}
# nvcc passes these options' values to the host compiler, ptxas, ... unquoted (pipeline/graph.py RAW_VALUE_OPTIONS).
RAW_VALUE_OPTIONS = ("-Xcompiler", "--compiler-options", "-Xlinker", "--linker-options", "-Xptxas", "--ptxas-options",
                     "-Xnvlink", "--nvlink-options", "-Xarchive", "-Xcudafe", "-Xfatbin", "--fatbin-options", "-Xnvvm")
RAW_SAFE = re.compile(r"[A-Za-z0-9_+,.=/:@%^-]*")
NAME_TEXT = re.compile(r"[A-Za-z0-9_.+-]*")
PATH_TEXT = re.compile(r"[A-Za-z0-9_.+@=,/-]+")
PROFILE_NAME = re.compile(r"[A-Za-z0-9_.+-]{1,64}")
GENCODE = re.compile(r"-gencode arch=compute_\d{2,3}[af]?,code=(sm|compute)_\d{2,3}[af]?")
NAME_MAX = 160  # a TU name: with .cu / .o.d / .o.fatbin it stays far below a file name's 255 bytes


def one_line(value) -> bool:
    """A profile's text value: a str, not blank, one line, no NUL."""
    return isinstance(value, str) and bool(value.strip()) and "\n" not in value and "\0" not in value
# Variables the plugin must never set: they change which code a process (or its children) loads.
UNSAFE_ENV = re.compile(r"(PATH|HOME|SHELL|IFS|ENV|BASH_ENV|LD_.*|DYLD_.*|PYTHON.*|CUDA_.*|NVCC_.*|FLASHBUILD_.*|"
                        r"CC|CXX|TMPDIR)")


def guarded(read):
    """read_profile's net: a value of a type its checks did not expect (a list where a name belongs:
    `v in CUTLASS_TYPES` raised TypeError) is an error naming the file, never a traceback."""
    @functools.wraps(read)
    def wrapper(path: Path, *args, **kwargs):
        try:
            return read(path, *args, **kwargs)
        except (TypeError, ValueError, AttributeError, KeyError, IndexError, RecursionError) as exc:
            raise SelectionError(f"profile {path}: a value of the wrong type or shape ({type(exc).__name__}: "
                                 f"{str(exc)[:120]}); fix the profile (see configs/profiles/flashbuild.toml for the "
                                 f"format)") from None
    return wrapper


def _error(path: Path, key: str, value, why: str) -> SelectionError:
    return SelectionError(f"profile {path}: key {key}: {value!r} {why}; fix the profile (see "
                          f"configs/profiles/flashbuild.toml for the format)")


def flag_problem(flag: str, previous: str | None = None) -> str | None:
    """Why a profile's flag cannot reach nvcc's shell as text, or None."""
    for char, name in SHELL_CHARS.items():
        if char in flag:
            return f"holds {name}, which the shell nvcc runs its steps through would act on"
    option, equals, value = flag.partition("=")
    raw = value if option in RAW_VALUE_OPTIONS and equals else flag if previous in RAW_VALUE_OPTIONS else None
    if raw is not None and not RAW_SAFE.fullmatch(raw):
        return "is an option value nvcc passes on unquoted, and holds characters other than [A-Za-z0-9_+,.=/:@%^-]"
    return None


def name_pattern_problem(pattern: str) -> str | None:
    """Why an instantiation name pattern could name a file outside the build dir's generated/ and obj/."""
    try:
        parts = list(string.Formatter().parse(pattern))
    except ValueError as exc:
        return f"is not a valid pattern ({exc})"
    for literal, field, spec, conversion in parts:
        if not NAME_TEXT.fullmatch(literal):
            return "holds characters other than [A-Za-z0-9_.+-] outside its {fields}: a TU name is one file name"
        if field is not None and (spec or conversion):
            return "gives a field a format spec or conversion; write plain {fields}"
    literal_length = sum(len(literal) for literal, *_ in parts)
    if literal_length > NAME_MAX - 60:
        return f"is {literal_length} characters long without its fields: keep TU names under {NAME_MAX}"
    if pattern.startswith((".", "-")):
        return "starts with '.' or '-'"
    return None


def _template_problem(name: str) -> str | None:
    root = env.templates_dir().resolve()
    target = (root / name).resolve()
    if not target.is_relative_to(root):
        return f"leaves {root}"
    if not target.is_file():
        return f"is not a template under {root}"
    return None


def check(profile) -> None:
    """Raise SelectionError naming the file, the key and the value of the first profile value that
    could reach a shell, build.ninja or a path outside its roots."""
    path = profile.path
    stem = Path(path).stem  # the name without a release line's @RELEASE (releases.py checks those names)
    if not PROFILE_NAME.fullmatch(stem) or stem.startswith((".", "-")):
        raise SelectionError(f"profile {path}: its name {stem!r} (the file's stem) goes into build keys and "
                             f"dir names: use 1-64 characters of [A-Za-z0-9_.+-], e.g. my-tree.toml")
    builtin = (env.configs_dir() / "profiles" / "flashbuild.toml").resolve()
    if stem == "flashbuild" and Path(path).resolve() != builtin:
        raise SelectionError(f"profile {path}: named flashbuild, the built-in profile's name ({builtin}); "
                             f"rename the file (e.g. my-kernels.toml) and pass --profile with the new path")
    for key, flags in (("flags.nvcc", profile.nvcc_flags), ("flags.defines", profile.defines),
                       ("flags.cxx", profile.cxx_flags)):
        for i, flag in enumerate(flags):
            problem = flag_problem(flag, flags[i - 1] if i else None)
            if problem:
                raise _error(path, key, flag, problem)
    for arch, gencode in profile.gencodes.items():
        if not GENCODE.fullmatch(gencode):
            raise _error(path, f"axes.gencode.{arch}", gencode,
                         'is not one "-gencode arch=compute_N,code=sm_N" (e.g. "-gencode arch=compute_90a,code=sm_90a")')
    for direction, inst in profile.instantiations.items():
        problem = name_pattern_problem(inst.name)
        if problem:
            raise _error(path, f"instantiation.{direction}.name", inst.name, problem)
    for i, support in enumerate(profile.support):
        if len(support.name) > NAME_MAX or not NAME_TEXT.fullmatch(support.name):
            raise _error(path, f"support[{i}].name", support.name, f"is not a TU name of up to {NAME_MAX} characters")
    paths = [("tree.required", p) for p in profile.required] + [("tree.include_dirs", p) for p in profile.include_dirs]
    paths += [("tree.python_path", p) for p in profile.python_path] + [("extension.sources", p)
                                                                        for p in profile.api_sources]
    paths += [("tree.cutlass", profile.cutlass)] + ([("tree.version.file", profile.version_file)]
                                                    if profile.version_file else [])
    paths += [(f"generated[{i}].file", g.file) for i, g in enumerate(profile.generated)]
    paths += [(f"generated[{i}].replaces", g.replaces) for i, g in enumerate(profile.generated) if g.replaces]
    paths += [(f"support[{i}].file", s.file) for i, s in enumerate(profile.support)]
    for key, value in paths:
        parts = Path(value).parts
        if not PATH_TEXT.fullmatch(value) or "." in parts or ".." in parts or value.startswith("/") or \
                any(p.startswith("-") for p in parts):
            raise _error(path, key, value, "is not a plain path inside the tree (characters [A-Za-z0-9_.+@=,/-], "
                                           "no '.' or '..' part, no part starting with '-')")
    templates = [(f"instantiation.{d}.template", i.template) for d, i in profile.instantiations.items()]
    templates += [(f"generated[{i}].template", g.template) for i, g in enumerate(profile.generated)]
    templates += [(f"support[{i}].template", s.template) for i, s in enumerate(profile.support)]
    templates += [("missing_template", profile.missing_template)] if profile.missing_template else []
    for key, name in templates:
        problem = _template_problem(name) if PATH_TEXT.fullmatch(name) else "is not a plain path under templates/"
        if problem:
            raise _error(path, key, name, problem)
    if profile.tests is not None:
        for key, variable in profile.tests.env.items():
            if UNSAFE_ENV.fullmatch(variable):
                raise _error(path, f"tests.env.{key}", variable, "is a variable that changes how programs load code "
                                                                 "or what flashbuild builds; name the tree's own switch")
