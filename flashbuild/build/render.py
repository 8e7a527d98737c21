"""Render the generated sources of a build from templates/: one instantiation TU per variant,
the narrowed dispatch header and the compiled-in table.

Context: an instantiation template gets `variant` (its features_mask is the kernel's feature
template argument), `family` and `dtype_enum`; dispatch.h.j2 and build_table.h.j2 get the axes
(`archs`, `hdims`, `dtypes`, `causal`, `directions`) and the features axis (`features`,
`features_mask`, `feature_suffix`), build_table.h.j2 also `variants`, `all_directions` and
`build_key`. Every template gets `version`, `template` and `target`. This module holds the one Jinja
environment (StrictUndefined: a typo in a template is an error, not empty C++)."""

from __future__ import annotations

import functools
import os
import re
import tempfile
from pathlib import Path

import jinja2

from .. import __version__, env
from ..selection.variants import DIRECTIONS, Selection, Variant

DISPATCH_HEADER = "flashbuild_dispatch.h"
TABLE_HEADER = "flashbuild_table.h"
DTYPE_ENUMS = {"fp16": "flashbuild::DType::kFp16", "bf16": "flashbuild::DType::kBf16"}
_SAFE_STRING = re.compile(r"^[A-Za-z0-9_.+\-]*$")


def _cpp(value) -> str:
    """A C++ literal for a validated value: only bools and ints pass."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    raise TypeError(f"refusing to render {value!r} ({type(value).__name__}) into C++")


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
    return environment


def environment() -> jinja2.Environment:
    return _environment(env.templates_dir())


def instantiation_template(variant: Variant) -> str:
    return f"{variant.direction}_instantiate.cu.j2"


def planned_files(selection: Selection) -> list[tuple[str, str]]:
    """(file name under generated/, template) for every file a build of `selection` renders."""
    files = [(f"{v.name}.cu", instantiation_template(v)) for v in selection.variants]
    return files + [(DISPATCH_HEADER, "dispatch.h.j2"), (TABLE_HEADER, "build_table.h.j2")]


def _render(template: str, target: str, **context) -> str:
    return environment().get_template(template).render(
        version=__version__, template=template, target=target, **context)


def render_texts(selection: Selection, *, build_key: str) -> dict[str, str]:
    """File name under generated/ -> text, for every generated file of the build."""
    texts = {}
    for variant in selection.variants:
        texts[f"{variant.name}.cu"] = _render(
            instantiation_template(variant), variant.name, variant=variant,
            family=variant.family, dtype_enum=DTYPE_ENUMS[variant.dtype])
    axes = dict(
        archs=sorted({v.arch_number for v in selection.variants}),
        hdims=list(selection.hdims), dtypes=list(selection.dtypes), causal=list(selection.causal),
        directions=list(selection.directions),
        # The features axis: the names compiled in (canonical order), their bit mask (the feature
        # variants' template argument) and the suffix of the feature variants' names.
        features=list(selection.features), features_mask=selection.features_mask,
        feature_suffix=selection.feature_suffix,
    )
    target = f"selection {selection.describe()}"
    texts[DISPATCH_HEADER] = _render("dispatch.h.j2", target, **axes)
    texts[TABLE_HEADER] = _render("build_table.h.j2", target, variants=selection.variants,
                                  all_directions=DIRECTIONS, build_key=build_key, **axes)
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


def render_build(selection: Selection, gen_dir: Path, *, build_key: str) -> list[Path]:
    """Render every generated file into gen_dir (only changed files are rewritten); returns them all."""
    paths = []
    for name, text in render_texts(selection, build_key=build_key).items():
        write_if_different(Path(gen_dir) / name, text)
        paths.append(Path(gen_dir) / name)
    return paths


def up_to_date(selection: Selection, gen_dir: Path, *, build_key: str) -> bool:
    """Whether every generated file on disk already holds what rendering would write."""
    for name, text in render_texts(selection, build_key=build_key).items():
        try:
            if (Path(gen_dir) / name).read_text() != text:
                return False
        except (FileNotFoundError, UnicodeDecodeError):
            return False
    return True
