"""Source profiles: what a kernel tree is made of, read from configs/profiles/<name>.toml.

A profile says where a tree keeps its sources and headers, how one instantiation TU is named and
which of our templates renders it, which generated headers overlay or complete the tree (the
narrowed switch header), the API sources compiled into the extension, the flags, the features the
tree can compile out, the extension's module name and the Python package that imports it. Our own
kernels are the built-in profile `flashbuild`: one code path from selection to loaded extension.

Everything in a profile is checked when it is read: a wrong key or type is an error naming the
file, the key, what was expected and what was found. tree_check.py then checks a tree against its
profile (every required file present) before any compiler runs. Nothing here writes anywhere.
"""

from __future__ import annotations

import functools
import os
import re
import string
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .. import env
from ..errors import SelectionError
from ..selection import space as variant_space
from . import releases as releases_module
from . import device_kernels, switches as switch_tables
from . import tests_table
from .tests_table import TestNames
from . import profile_checks

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib

BUILTIN = "flashbuild"
CAUSAL_MODES = ("tu", "runtime")        # one TU per causal value, or both inside each TU
FEATURE_MODES = ("variants", "defines")  # a feature TU beside each plain one, or -D switches for the whole build
NAME_FIELDS = {"direction", "hdim", "dtype", "causal", "arch", "features"}
# The CUTLASS element type of each dtype, for templates that instantiate upstream code.
CUTLASS_TYPES = {"fp16": "cutlass::half_t", "bf16": "cutlass::bfloat16_t"}


@dataclass(frozen=True)
class Instantiation:
    """How one direction's TU is named (a str.format pattern over NAME_FIELDS) and rendered."""

    direction: str
    name: str
    template: str


@dataclass(frozen=True)
class Generated:
    """A header rendered into the build's generated/ dir, which comes first on the include path.
    `replaces` names the tree's header it stands in for (an overlay), if any."""

    file: str
    template: str
    replaces: str | None = None
    # A Python file the tree imports (e.g. flash-attn 3's generated flash_attn_config.py): rendered
    # next to the extension, in the build dir that goes first on the import path, not in generated/
    # (render.destination). `file` is then relative to the build dir.
    beside_extension: bool = False


@dataclass(frozen=True)
class Support:
    """A source of the tree compiled as its own TU in every build (e.g. flash-attn 3's scheduler
    kernel), or only when the build holds all of `needs` (features)."""

    file: str                        # relative to the tree
    name: str                        # the TU's stem in the build (never the tree file's own name)
    template: str
    needs: tuple[str, ...] = ()


@dataclass(frozen=True)
class Profile:
    name: str
    path: Path
    description: str
    # the tree
    required: tuple[str, ...]
    include_dirs: tuple[str, ...]
    cutlass: str                     # "wheel" (nvidia-cutlass) or a dir relative to the tree
    kernels_need_torch: bool         # kernel TUs include torch headers (upstream trees do)
    python_path: tuple[str, ...]     # dirs (relative to the tree) that hold its Python package
    python_package: str | None       # what `flashbuild run` / test / bench import
    # the extension
    extension: str                   # the module name; "" gives each build its own
    api_sources: tuple[str, ...]
    # the variant space
    hdims: tuple[int, ...]
    dtypes: tuple[str, ...]
    directions: tuple[str, ...]
    archs: tuple[str, ...]
    gencodes: dict[str, str] = field(hash=False, compare=False)
    causal: str = "tu"
    causal_runtime: tuple[str, ...] = ()  # axes.causal_runtime: directions deciding causal inside each TU anyway
    arch_in_name: bool = True        # one TU per arch, or one TU with every arch's -gencode
    # features
    features: tuple[str, ...] = ()
    feature_mode: str = "variants"
    disable_defines: dict[str, str] = field(default_factory=dict, hash=False, compare=False)
    # which selected features multiply the TUs of each direction (one TU per on/off combination;
    # empty: none do), and the combinations that are never a TU of their own (the tree folds them
    # into another)
    feature_tus: dict[str, tuple[str, ...]] = field(default_factory=dict, hash=False, compare=False)
    feature_excludes: tuple[tuple[str, ...], ...] = ()
    support: tuple[Support, ...] = ()
    # forward kernels whose V head dim differs from Q/K's (flash-attn 3's hdim64_256, hdim192_128):
    # head dim -> V head dims, built for the selected head dims when the build holds `hdim_v_feature`
    hdim_v: dict[int, tuple[int, ...]] = field(default_factory=dict, hash=False, compare=False)
    hdim_v_feature: str | None = None
    # the backward of such a call runs on a larger head dim's kernel: head dim -> those head dims
    hdim_v_bwd: dict[int, tuple[int, ...]] = field(default_factory=dict, hash=False, compare=False)
    # what a build renders
    instantiations: dict[str, Instantiation] = field(default_factory=dict, hash=False, compare=False)
    generated: tuple[Generated, ...] = ()
    missing_template: str | None = None   # one TU of stubs for combinations the narrowed dispatch reaches
    # flags
    nvcc_flags: tuple[str, ...] = ()
    cxx_flags: tuple[str, ...] = ()
    defines: tuple[str, ...] = ()
    adapter: str = BUILTIN            # how test/bench call a build (flashbuild.debug.adapters)
    tests: TestNames | None = None    # how the tree's own tests name dtype, head dim and features
    cutlass_env: str | None = None   # an environment variable that points elsewhere (e.g. FLASHBUILD_FA3_CUTLASS)
    cutlass_version: str | None = None  # the CUTLASS the tree pins, "4.3" or "4.3.4": checked before compiling
    cutlass_pin: str = ""            # how the tree pins it, for the error (e.g. its submodule commit)
    # the tree's own release: tree.version = { file, pattern (one group: the version), accepts ("2.8": 2.8.x) }
    version_file: str | None = None
    version_pattern: str | None = None
    version_accepts: str | None = None
    # the release line applied (sources/releases.py): "2.6" of configs/profiles/releases/<profile>/2.6.toml
    release: releases_module.Release | None = None
    # switch macros narrowed inside each TU ([switches]: sources/switches.py); their features are in `features`
    switches: switch_tables.Switches | None = field(default=None, hash=False, compare=False)

    @property
    def builtin(self) -> bool:
        return self.name == BUILTIN

    def causal_in_tu(self, direction: str) -> bool:
        """Whether `direction` has one TU per causal value (axes.causal "tu", the direction not in
        axes.causal_runtime), or decides causal inside each TU."""
        return self.causal == "tu" and direction not in self.causal_runtime

    @property
    def family(self) -> str:
        """The profile without its release: 'flash-attn-2' of 'flash-attn-2@2.6'."""
        return releases_module.split_name(self.name)[0]

    def kernel_size(self, hdim: int) -> int | None:
        """The kernel head dim a call with head dim `hdim` runs on: the next size up."""
        return next((size for size in self.hdims if size >= hdim), None)


# ---------------------------------------------------------------- reading a profile

class _Reader:
    """Typed access to one TOML table, with errors that name the file and the key."""

    def __init__(self, path: Path, table: dict, prefix: str = ""):
        self.path, self.table, self.prefix, self.used = path, table, prefix, set()

    def error(self, key: str, expected: str, found: Any) -> SelectionError:
        return SelectionError(f"profile {self.path}: key {self.prefix}{key}: expected {expected}, found {found!r}; "
                              f"fix the profile (see configs/profiles/flashbuild.toml for the format)")

    def get(self, key: str, kind, expected: str, default: Any = ..., check=None):
        self.used.add(key)
        if key not in self.table:
            if default is ...:
                raise SelectionError(f"profile {self.path}: missing key {self.prefix}{key} ({expected}); add it")
            return default
        value = self.table[key]
        if kind is list:
            ok = isinstance(value, list) and (check is None or all(check(v) for v in value))
        else:
            ok = isinstance(value, kind) and not (kind is int and isinstance(value, bool)) and (check is None or check(value))
        if not ok:
            raise self.error(key, expected, value)
        return value

    def sub(self, key: str, required: bool = True) -> "_Reader":
        value = self.get(key, dict, "a table", default=None if not required else ...)
        return _Reader(self.path, value or {}, f"{self.prefix}{key}.")

    def done(self) -> None:
        extra = sorted(set(self.table) - self.used)
        if extra:
            raise SelectionError(f"profile {self.path}: unknown key {', '.join(self.prefix + k for k in extra)}; "
                                 f"remove or rename it")


_is_str = profile_checks.one_line


def _is_relative(value) -> bool:
    return _is_str(value) and not os.path.isabs(value) and ".." not in Path(value).parts


# A repeated group that is one repeated atom ((a+)+, (\d*)*, ([0-9]{2,})+): the classic exponential
# backtracking on a crafted version file, so a profile's version pattern may not hold one.
_QUANTIFIER = r"(?:[+*]|\{\d*,\d*\})\??"
_NESTED_QUANTIFIER = re.compile(r"\((?:\?:)?(?:\\.|\[[^\]]*\]|[^\\\[()|])" + _QUANTIFIER + r"\)" + _QUANTIFIER)
VERSION_PATTERN_MAX = 200
VERSION_FILE_MAX = 1 << 20  # a version file is small: past this it is not one (and never a FIFO or device)


def _is_pattern(value) -> bool:
    try:
        return (_is_str(value) and len(value) <= VERSION_PATTERN_MAX and not _NESTED_QUANTIFIER.search(value)
                and re.compile(value).groups == 1)
    except re.error:
        return False


def _pattern_fields(pattern: str) -> set[str]:
    try:
        return {name for _, name, _, _ in string.Formatter().parse(pattern) if name}
    except ValueError:  # unbalanced braces: no field of ours
        return {"(not a pattern)"}


def _read_toml(path: Path) -> dict:
    try:
        return tomllib.loads(path.read_text())
    except (OSError, UnicodeDecodeError) as exc:
        raise SelectionError(f"profile {path}: cannot be read ({exc}); fix the file") from None
    except (ValueError, RecursionError) as exc:  # TOMLDecodeError, too many digits, too deep
        raise SelectionError(f"profile {path}: not valid TOML ({exc}); fix the file") from None


@profile_checks.guarded
def read_profile(path: Path, release: releases_module.Release | None = None) -> Profile:
    """Parse and check one profile file, with a release line's keys applied (its name is then
    <profile>@<release>, and an error names both files)."""
    data = _read_toml(path)
    shown = path
    if release is not None:
        data = releases_module.apply(data, release)
        shown = Path(f"{path} with {release.path}")
    return _parse(path, shown, data, release)


def _parse(path: Path, shown: Path, data: dict, release: releases_module.Release | None) -> Profile:
    top = _Reader(shown, data)
    description = top.get("description", str, "a string")
    adapter = top.get("adapter", str, "a string", default=BUILTIN)
    # space = "flashbuild": the axes, features and TU names are our variant space's (selection/space.py),
    # written there once; the profile then must not spell them (a second copy would drift).
    from_space = top.get("space", str, '"flashbuild" (the axes, feature names and TU names of '
                         'flashbuild/selection/space.py)', None, lambda v: v == BUILTIN) is not None

    def given(reader: "_Reader", key: str, value: Any, read):
        """`value` (the variant space's) for a profile with space = "flashbuild", else read() from the file."""
        if not from_space:
            return read()
        if key in reader.table:
            raise reader.error(key, 'no such key: with space = "flashbuild" it comes from '
                               'flashbuild/selection/space.py (remove it)', reader.table[key])
        return value

    tree = top.sub("tree")
    required = tuple(tree.get("required", list, "a list of paths relative to the tree", [], _is_relative))
    include_dirs = tuple(tree.get("include_dirs", list, "a list of dirs relative to the tree", [], _is_relative))
    cutlass = tree.get("cutlass", str, '"wheel" or a dir relative to the tree', "wheel",
                       lambda v: v == "wheel" or _is_relative(v))
    cutlass_env = tree.get("cutlass_env", str, "an environment variable name", None,
                           lambda v: re.fullmatch(r"[A-Z_][A-Z0-9_]*", v) is not None)
    cutlass_version = tree.get("cutlass_version", str, 'a version like "4.3" or "4.3.4"', None,
                               lambda v: re.fullmatch(r"\d+\.\d+(\.\d+)?", v) is not None)
    cutlass_pin = tree.get("cutlass_pin", str, "a string", "")
    kernels_need_torch = tree.get("kernels_need_torch", bool, "true or false", False)
    python_path = tuple(tree.get("python_path", list, "a list of dirs relative to the tree", [], _is_relative))
    python_package = tree.get("python_package", str, "a module name", None, lambda v: v.isidentifier())
    version_file = version_pattern = version_accepts = None
    if "version" in tree.table:
        version = tree.sub("version")
        version_file = version.get("file", str, "a path relative to the tree", ..., _is_relative)
        version_pattern = version.get("pattern", str, "a regular expression with one group (the version), at most "
                                      f"{VERSION_PATTERN_MAX} characters, no quantified group holding a quantifier",
                                      ..., _is_pattern)
        version_accepts = version.get("accepts", str, 'a release like "2.8" (any 2.8.x) or "2.8.3"', ...,
                                      lambda v: re.fullmatch(r"\d+(\.\d+)*", v) is not None)
        version.done()
    tree.done()

    ext = top.sub("extension")
    extension = ext.get("name", str, "a module name, or \"\" for one per build", "",
                        lambda v: v == "" or v.isidentifier())
    api_sources = tuple(ext.get("sources", list, "a list of paths relative to the tree", [], _is_relative))
    ext.done()

    axes = top.sub("axes")
    hdims = tuple(given(axes, "hdim", variant_space.HEAD_DIMS, lambda: axes.get(
        "hdim", list, "a list of positive ints", ..., lambda v: isinstance(v, int) and v > 0)))
    dtypes = tuple(given(axes, "dtype", variant_space.DTYPES, lambda: axes.get(
        "dtype", list, 'a list of "fp16" / "bf16"', ..., lambda v: v in CUTLASS_TYPES)))
    directions = tuple(given(axes, "direction", variant_space.DIRECTIONS, lambda: axes.get(
        "direction", list, 'a list of "fwd", "bwd", "splitkv"', ..., lambda v: v in variant_space.DIRECTIONS)))
    gencodes = axes.get("gencode", dict, "a table of arch = \"-gencode ...\"", ...)
    bad = [a for a, g in gencodes.items() if not re.fullmatch(r"sm\d+", a) or not (isinstance(g, str) and
                                                                                   g.startswith("-gencode "))]
    if bad:
        raise axes.error("gencode", 'entries like sm90 = "-gencode arch=compute_90a,code=sm_90a"', bad)
    causal = axes.get("causal", str, f"one of {', '.join(CAUSAL_MODES)}", "tu", lambda v: v in CAUSAL_MODES)
    # flash-attn 2.6.0 - 2.6.1: causal TUs for the forward, causal decided inside the backward's TUs
    causal_runtime = tuple(axes.get("causal_runtime", list, 'a list of directions of axes.direction (with causal = "tu")',
                                    [], lambda v: v in directions and causal == "tu"))
    arch_in_name = axes.get("arch_in_name", bool, "true or false", True)
    raw_hdim_v = axes.get("hdim_v", dict, 'a table of "head dim" = [V head dims]', {})
    if not all(k.isdigit() and int(k) in hdims and isinstance(v, list) and v and
               all(isinstance(d, int) and not isinstance(d, bool) and d > 0 for d in v) for k, v in raw_hdim_v.items()):
        raise axes.error("hdim_v", 'entries like 64 = [256, 512] for head dims of axes.hdim', raw_hdim_v)
    hdim_v = {int(k): tuple(v) for k, v in raw_hdim_v.items()}
    hdim_v_feature = axes.get("hdim_v_feature", str, "a feature of features.names", None)
    raw_bwd = axes.get("hdim_v_bwd", dict, 'a table of "head dim" = [head dims of the backward kernels]', {})
    if not all(k.isdigit() and int(k) in hdim_v and isinstance(v, list) and all(d in hdims for d in v)
               for k, v in raw_bwd.items()):
        raise axes.error("hdim_v_bwd", "entries like 64 = [256] for head dims of axes.hdim_v, over axes.hdim", raw_bwd)
    hdim_v_bwd = {int(k): tuple(v) for k, v in raw_bwd.items()}
    axes.done()

    feats = top.sub("features", required=False)
    features = tuple(given(feats, "names", variant_space.FEATURES, lambda: feats.get(
        "names", list, "a list of feature names", [], lambda v: _is_str(v) and v.isidentifier())))
    feature_mode = feats.get("mode", str, f"one of {', '.join(FEATURE_MODES)}", "variants",
                             lambda v: v in FEATURE_MODES)
    disable = feats.get("disable", dict, "a table of feature = \"DEFINE\"", {})
    if set(disable) - set(features) or not all(isinstance(v, str) and re.fullmatch(r"[A-Za-z_]\w*", v)
                                               for v in disable.values()):
        raise feats.error("disable", "feature = \"MACRO_NAME\" for features listed in names", disable)
    if feature_mode == "defines" and set(features) - set(disable):
        raise feats.error("disable", f"a define for every feature ({', '.join(features)})", disable)
    # Mode "defines" with `tus` (flash-attn 3): besides the defines of the features left out, each
    # selected feature that makes TUs of a direction doubles them (one TU with it, one without).
    tus = feats.get("tus", dict, "a table of direction = [features that make TUs of it]", {})
    if any(d not in directions or not isinstance(v, list) or set(v) - set(features) for d, v in tus.items()) \
            or (tus and feature_mode != "defines"):
        raise feats.error("tus", 'direction = [feature, ...] over axes.direction and features.names (mode "defines")',
                          tus)
    feature_tus = {d: tuple(f for f in features if f in tus[d]) for d in directions if d in tus}
    excludes = feats.get("exclude", list, "a list of lists of features never combined in one TU", [],
                         lambda v: isinstance(v, list) and len(v) > 1 and set(v) <= set(features))
    feature_excludes = tuple(tuple(v) for v in excludes)
    feats.done()
    if hdim_v_feature is not None and (hdim_v_feature not in features or not hdim_v):
        raise axes.error("hdim_v_feature", "a feature of features.names, with axes.hdim_v", hdim_v_feature)

    inst = top.sub("instantiation")
    instantiations = {}
    for direction in directions:
        one = inst.sub(direction)
        name = given(one, "name", variant_space.NAME_RULE,
                     lambda: one.get("name", str, "a file-name pattern", ..., _is_str))
        unknown = _pattern_fields(name) - NAME_FIELDS
        if unknown:
            raise one.error("name", f"a pattern over {{{'}, {'.join(sorted(NAME_FIELDS))}}}", name)
        instantiations[direction] = Instantiation(direction, name, one.get("template", str, "a template", ..., _is_relative))
        one.done()
    inst.done()

    generated = []
    for i, item in enumerate(top.get("generated", list, "a list of tables", [], lambda v: isinstance(v, dict))):
        one = _Reader(shown, item, f"generated[{i}].")
        beside = one.get("beside_extension", bool, "true or false", False)
        name = one.get("file", str, "a file name (or package/module.py beside the extension)", ...,
                       lambda v: _is_relative(v) and (beside or "/" not in v))
        generated.append(Generated(name,
                                   one.get("template", str, "a template", ..., _is_relative),
                                   one.get("replaces", str, "a path relative to the tree", None, _is_relative),
                                   beside))
        one.done()
    support = []
    for i, item in enumerate(top.get("support", list, "a list of tables", [], lambda v: isinstance(v, dict))):
        one = _Reader(shown, item, f"support[{i}].")
        support.append(Support(one.get("file", str, "a path relative to the tree", ..., _is_relative),
                               one.get("name", str, "a TU name", ..., lambda v: v.isidentifier()),
                               one.get("template", str, "a template", ..., _is_relative),
                               tuple(one.get("needs", list, "a list of features", [], lambda v: v in features))))
        one.done()
    missing_template = top.get("missing_template", str, "a template", None, _is_relative)

    flags = top.sub("flags", required=False)
    flag_list = dict(expected="a list of flags", default=[], check=_is_str)
    nvcc_flags = tuple(flags.get("nvcc", list, **flag_list))
    cxx_flags = tuple(flags.get("cxx", list, **flag_list))
    defines = tuple(flags.get("defines", list, **flag_list))
    flags.done()
    tests = tests_table.parse(top.sub("tests"), features, directions, hdims) if "tests" in data else None
    # `shown`: an error in a release's switch keys names the release file beside the profile
    switches = switch_tables.parse(shown, top.get("switches", dict, "a table", None), features, directions, hdims)
    if switches is not None and switches.overlay not in {g.file for g in generated}:
        raise SelectionError(f"profile {shown}: switches.overlay {switches.overlay} is not rendered: add a [[generated]] "
                             f"entry with file = \"{switches.overlay}\" (template = \"profiles/switches.h.j2\")")
    for header in sorted({device_kernels.header(k.direction) for k in (switches.devices if switches else ())}):
        if header not in {g.file for g in generated}:
            raise SelectionError(f"profile {shown}: switches.device names kernels its {header} would specialize, and "
                                 f"no [[generated]] entry renders it: add file = \"{header}\" (template = "
                                 f"\"profiles/flash-attn-2/devices.h.j2\") or remove the entries")
    if switches is not None:
        # Switch features join the selection's; nothing in the tree reads their define (it only names the
        # choice in build.ninja and the plan): the overlay narrows the kernels, the API keeps its checks.
        features += switches.features
        disable.update({f: f"FLASHBUILD_NO_SWITCH_{f.upper()}" for f in switches.features})
    top.done()
    profile = Profile(
        name=release.id if release else path.stem, path=path, release=release, description=description, required=required, include_dirs=include_dirs,
        cutlass=cutlass, cutlass_env=cutlass_env, cutlass_version=cutlass_version, cutlass_pin=cutlass_pin,
        version_file=version_file, version_pattern=version_pattern, version_accepts=version_accepts,
        kernels_need_torch=kernels_need_torch, python_path=python_path,
        python_package=python_package, extension=extension, api_sources=api_sources, hdims=hdims, dtypes=dtypes,
        directions=directions, archs=tuple(gencodes), gencodes=dict(gencodes), causal=causal,
        causal_runtime=causal_runtime,
        arch_in_name=arch_in_name, features=features, feature_mode=feature_mode, disable_defines=dict(disable),
        feature_tus=feature_tus, feature_excludes=feature_excludes, support=tuple(support), hdim_v=hdim_v,
        hdim_v_feature=hdim_v_feature, hdim_v_bwd=hdim_v_bwd,
        instantiations=instantiations, generated=tuple(generated), missing_template=missing_template,
        nvcc_flags=nvcc_flags, cxx_flags=cxx_flags, defines=defines, adapter=adapter, tests=tests, switches=switches)
    profile_checks.check(profile)  # what its values may hold, by where each goes
    return profile


def label(name_or_path: str) -> str:
    """How a build names its profile in keys and text: a name as it is (flash-attn-2@2.6), a path by its stem."""
    text = str(name_or_path)
    return Path(text).stem if text.endswith(".toml") or os.sep in text else text


def profiles_dir() -> Path:
    return env.configs_dir() / "profiles"


def available() -> list[str]:
    return sorted(p.stem for p in profiles_dir().glob("*.toml"))


@functools.lru_cache(maxsize=None)
def _load(path: Path, mtime_ns: int, release: releases_module.Release | None, release_mtime_ns: int) -> Profile:
    return read_profile(path, release)


def releases(name: str) -> tuple[releases_module.Release, ...]:
    """The release lines of profile `name` (configs/profiles/releases/<name>/), oldest first."""
    return releases_module.releases(profiles_dir(), releases_module.split_name(name)[0])


def load(name_or_path: str | Path = BUILTIN, flag: str = "--profile") -> Profile:
    """A profile by name (configs/profiles/<name>.toml), by name and release (flash-attn-2@2.6: the
    profile with configs/profiles/releases/flash-attn-2/2.6.toml applied) or by path; `flag` is the
    option that named it."""
    text = str(name_or_path)
    base, wanted = releases_module.split_name(text)
    path = Path(base)
    if not (base.endswith(".toml") or os.sep in base):
        path = profiles_dir() / f"{base}.toml"
    if not path.is_file():
        names = available()
        raise SelectionError(f"{flag} {text}: no such profile ({path} {'is not a regular file' if path.exists() else 'does not exist'}; profiles: "
                             f"{', '.join(names) or 'none'}); use {flag} {names[0] if names else BUILTIN} "
                             f"or a path to a profile .toml")
    release = None
    if wanted is not None:
        found = releases_module.releases(path.resolve().parent, path.stem)
        release = next((r for r in found if r.name == wanted), None)
        if release is None:
            near = releases_module.nearest(found, wanted)
            raise SelectionError(
                f"{flag} {text}: profile {path.stem} has no release {wanted} (releases: "
                f"{', '.join(r.name for r in found) or 'none'})"
                + (f"; the nearest is {near.id} ({near.served}): use {flag} {near.id}, or see flashbuild profiles"
                   if near else f"; use {flag} {path.stem}"))
    return _load(path.resolve(), path.stat().st_mtime_ns, release, release.path.stat().st_mtime_ns if release else 0)
