"""Render the generated sources of a build from templates/: one instantiation TU per unit (the
profile's naming and template), the profile's generated headers (our narrowed dispatch header and
compiled-in table; an upstream tree's narrowed switch overlay) and, for trees whose dispatch still
references left-out combinations, one TU of stubs.

Context: an instantiation template gets `unit` (flashbuild/sources/units.py) and, for the built-in
profile, `variant` (its features_mask is the kernel's feature template argument), `family`,
`dtype_enum` and `small_kernels` (None, or where the launch TU's shared small kernels compile:
Unit.small_kernels_host). A generated header gets the axes (`archs`, `hdims`, `dtypes`, `causal`,
`directions`), the features axis (`features`, `features_mask`, `feature_suffix`), `variants`,
`units`, `all_directions`, `build_key`, `overlay` (its profile entry) and whatever the caller's
`context` adds (an upstream slice's error messages). Every template gets `version`, `template` and
`target`. This module holds the one Jinja environment (StrictUndefined: a typo in a template is an
error, not empty C++)."""

from __future__ import annotations

import functools
import os
import re
import tempfile
from pathlib import Path

import jinja2

from .. import env
from ..version import __version__
from ..selection import space
from ..selection.variants import DIRECTIONS, Selection
from ..sources import profile as profiles, units as units_module
from ..sources.profile import Profile
from ..sources.units import Unit
from . import graph

MISSING_TU = "flashbuild_missing"  # the stubs TU's stem
DTYPE_ENUMS = space.DTYPE_ENUMS
SPACE_HEADER = "common/variant_space.h"  # under kernels/: the variant space as C++ (space_header_text)
SPACE_TEMPLATE = "variant_space.h.j2"
_SAFE_STRING = re.compile(r"^[A-Za-z0-9_.+\-]*$")


def _cpp(value) -> str:
    """A C++ literal for a validated value: only bools and ints pass."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    raise TypeError(f"refusing to render {value!r} ({type(value).__name__}) into C++")


def _cpp_text(value) -> str:
    """A C++ string literal for a message: printable ASCII, with quotes and backslashes escaped."""
    if not isinstance(value, str) or not all(" " <= c <= "~" for c in value):
        raise TypeError(f"refusing to render {value!r} as a C++ message")
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'


def _cpp_str(value) -> str:
    """A C++ string literal for a name made of [A-Za-z0-9_.+-] (variant names, keys, versions)."""
    if not isinstance(value, str) or not _SAFE_STRING.match(value):
        raise TypeError(f"refusing to render {value!r} as a C++ string")
    return f'"{value}"'


@functools.lru_cache(maxsize=None)
def _environment(templates: Path) -> jinja2.Environment:
    environment = jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(templates)),
        undefined=jinja2.StrictUndefined,
        keep_trailing_newline=True,
        trim_blocks=True,
        lstrip_blocks=True,
        autoescape=False,
    )
    environment.filters["cpp"] = _cpp
    environment.filters["cpp_str"] = _cpp_str
    environment.filters["cpp_text"] = _cpp_text
    return environment


def environment() -> jinja2.Environment:
    return _environment(env.templates_dir())


def _profile(profile: Profile | None) -> Profile:
    return profile or profiles.load(profiles.BUILTIN)


def planned_files(selection: Selection, profile: Profile | None = None) -> list[tuple[str, str]]:
    """(file name, template) for every file a build of `selection` renders (see destination)."""
    profile = _profile(profile)
    files = [(f"{u.name}.cu", u.template) for u in units_module.units(selection, profile)]
    if units_module.missing(selection, profile):
        files.append((f"{MISSING_TU}.cu", profile.missing_template))
    return files + [(g.file, g.template) for g in profile.generated]


def destination(gen_dir: Path, name: str, profile: Profile | None = None) -> Path:
    """Where a rendered file goes: generated/ (gen_dir), first on the include path; a Python file the
    tree imports (profile key generated.beside_extension) goes beside the extension, in the build dir
    (gen_dir's parent), which is what goes on the import path."""
    beside = {g.file for g in _profile(profile).generated if g.beside_extension}
    return Path(gen_dir).parent / name if name in beside else Path(gen_dir) / name


def _render(template: str, target: str, **context) -> str:
    return environment().get_template(template).render(
        version=__version__, template=template, target=target, **context)


def _unit_context(unit: Unit, built: tuple[Unit, ...] = ()) -> dict:
    if unit.variant is None:
        return dict(unit=unit)
    context = dict(unit=unit, variant=unit.variant, family=unit.variant.family, dtype_enum=DTYPE_ENUMS[unit.dtype])
    # A launch TU whose small kernels its group shares (units.Unit.small_kernels_host): compiled here, or where.
    host = unit.small_kernels_host
    context.update(small_kernels=dict(header=unit.variant.small_kernels_header, host=host,
                                      here=unit.compiles_small_kernels,
                                      members=[u.name for u in built if u.small_kernels_host == host])
                   if host else None)
    if unit.variant.kernel_tu:
        # Each kernel TU's object and the variant's TU meet at one symbol: the fatbin the first embeds.
        variant = units_module.variant_name(unit.name)
        kernels = [dict(part=k.part, entry=k.entry, unit=f"{variant}_{k.part}", symbol=f"flashbuild_fatbin_{variant}_{k.part}",
                        path=graph.fatbin_path(f"{variant}_{k.part}")) for k in unit.variant.kernel_tus]
        context.update(kernels=kernels)
        if units_module.is_kernel_part(unit.part):
            context.update(kernel=next(k for k in kernels if k["part"] == unit.part))
    return context


def render_texts(selection: Selection, *, build_key: str, profile: Profile | None = None,
                 context: dict | None = None) -> dict[str, str]:
    """File name -> text, for every generated file of the build (where each goes: destination)."""
    profile = _profile(profile)
    built = units_module.units(selection, profile)
    texts = {f"{u.name}.cu": _render(u.template, u.name, **_unit_context(u, built)) for u in built}
    target = f"selection {selection.describe()}"
    missing = units_module.missing(selection, profile)
    if missing:
        texts[f"{MISSING_TU}.cu"] = _render(profile.missing_template, target, missing=missing,
                                            **(context or {}))
    variants = selection.variants if profile.feature_mode == "variants" else ()
    axes = dict(
        archs=sorted({int(a[2:]) for a in selection.archs}),
        hdims=list(selection.hdims), dtypes=list(selection.dtypes), causal=list(selection.causal),
        directions=list(selection.directions),
        # The features axis: the names compiled in (canonical order), their bit mask (the feature
        # variants' template argument) and the suffix of the feature variants' names.
        features=list(selection.features),
        features_mask=selection.features_mask if profile.feature_mode == "variants" else 0,
        feature_suffix=selection.feature_suffix if profile.feature_mode == "variants" else "",
    )
    for header in profile.generated:
        texts[header.file] = _render(header.template, target, variants=variants, units=built,
                                     all_directions=DIRECTIONS, build_key=build_key, overlay=header,
                                     **axes, **(context or {}))
    return texts


def write_if_different(path: Path, text: str) -> bool:
    """Write `text` to `path` only when the content differs (so ninja sees no change otherwise).
    The write goes to a temporary file that is renamed over `path`: readers never see half a file.
    Returns whether the file was written."""
    path = Path(path)
    try:
        if path.read_text() == text:
            return False
    except (FileNotFoundError, UnicodeDecodeError):
        pass
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w") as f:
            f.write(text)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return True


def space_header_text() -> str:
    """kernels/common/variant_space.h as selection/space.py describes it: the kernel head dims, the
    DType enum and names, the Feature bits and names, and the name rule as a C++ function (checked in: kernel headers include it
    outside any build; tests/test_variant_space.py compares the two)."""
    rule = space.name_rule_parts()
    unknown = {field for _, field in rule if field} - set(space.NAME_FIELDS)
    if unknown:
        raise ValueError(f"space.NAME_RULE has fields {sorted(unknown)} that {SPACE_TEMPLATE} cannot render "
                         f"(fields: {', '.join(space.NAME_FIELDS)})")
    features = [dict(name=name, bit=bit, enumerator="k" + name[:1].upper() + name[1:])
                for name, bit in space.FEATURE_BITS.items()]
    dtypes = [dict(name=name, enumerator=space.DTYPE_ENUMS[name].rsplit("::", 1)[1]) for name in space.DTYPES]
    return environment().get_template(SPACE_TEMPLATE).render(
        template=SPACE_TEMPLATE, hdims=list(space.HEAD_DIMS), features=features, dtypes=dtypes,
        all_features=space.ALL_FEATURES_MASK, arch_prefix=space.ARCH_PREFIX, rule=rule,
        causal_part=space.CAUSAL_PART, feature_prefix=space.FEATURE_PREFIX)


def render_build(selection: Selection, gen_dir: Path, *, build_key: str, profile: Profile | None = None,
                 context: dict | None = None) -> list[Path]:
    """Render every generated file into gen_dir, or beside the extension in its parent (destination);
    only changed files are rewritten. Returns them all."""
    paths = []
    build_dir = Path(gen_dir).parent.resolve()
    for name, text in render_texts(selection, build_key=build_key, profile=profile, context=context).items():
        path = destination(gen_dir, name, profile)
        if not path.resolve().is_relative_to(build_dir):  # profile_checks keeps names plain; this is the last line
            raise ValueError(f"refusing to render {name!r}: {path} is outside the build dir {build_dir}")
        write_if_different(path, text)
        paths.append(path)
    return paths


def up_to_date(selection: Selection, gen_dir: Path, *, build_key: str, profile: Profile | None = None,
               context: dict | None = None) -> bool:
    """Whether every generated file on disk already holds what rendering would write."""
    for name, text in render_texts(selection, build_key=build_key, profile=profile, context=context).items():
        try:
            if destination(gen_dir, name, profile).read_text() != text:
                return False
        except (FileNotFoundError, UnicodeDecodeError):
            return False
    return True


if __name__ == "__main__":  # python3 -m flashbuild.pipeline.render --write-space-header
    import sys
    if sys.argv[1:] != ["--write-space-header"]:
        sys.exit("usage: python3 -m flashbuild.pipeline.render --write-space-header "
                 "(rewrites kernels/common/variant_space.h from flashbuild/selection/space.py)")
    target, text = env.kernels_dir() / SPACE_HEADER, space_header_text()
    changed = not target.is_file() or target.read_text() != text
    if changed:
        target.write_text(text)  # a source file: the checkout's mode, not write_if_different's private 0600
    print(f"{target}: {'written' if changed else 'unchanged'}")
