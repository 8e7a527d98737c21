"""Presets: the TOML selections in configs/ (and the CI matrices beside them, told apart here), found
by name or path and read with every key and type checked."""

from __future__ import annotations

import difflib
import os
import shlex
from pathlib import Path
from typing import Any

from .. import env
from ..errors import SelectionError

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib

CONFIG_KEYS = ("hdim", "dtype", "arch", "direction", "causal", "features")


def is_matrix_config(path: Path) -> bool:
    """configs/ also holds CI matrices (a [matrix] or [[cells]] table: docs/ci.md), which are not presets.
    A file that does not parse counts as a preset, so that loading it reports the TOML error."""
    try:
        data = tomllib.loads(path.read_text())
    except (OSError, ValueError, RecursionError):  # TOMLDecodeError, a number past Python's digit limit, deep nesting
        return False
    return "matrix" in data or "cells" in data


def preset_names() -> list[str]:
    """The selection presets in configs/, by name (the CI matrices beside them left out)."""
    return sorted(p.stem for p in env.configs_dir().glob("*.toml") if not is_matrix_config(p))


def matrix_names() -> list[str]:
    """The CI matrices in configs/, by name."""
    return sorted(p.stem for p in env.configs_dir().glob("*.toml") if is_matrix_config(p))


def find_config(name_or_path: str | Path, *, flag: str = "--config", matrices: bool = False) -> Path:
    """A TOML file path, or a bare preset name that finds configs/<name>.toml. A name that looks
    like a path (it has a directory part or a suffix) is only ever a path. `flag` is how the user
    gave it (`--config`, or a command such as `flashbuild matrix`), `matrices` whether a CI matrix is
    wanted: an error lists those and proposes one, in the user's words."""
    text = str(name_or_path)
    shown = shlex.quote(text)
    names = matrix_names() if matrices else preset_names()
    what = "CI matrices" if matrices else "presets"
    listing = f"{what}: {', '.join(names) or 'none'} in {env.configs_dir()}"

    def use(value: str) -> str:
        return f"use {flag} {value}" if flag.startswith("--") else f"use `{flag} {value}`"

    kind = "a CI matrix name" if matrices else "a preset name"
    if not text.strip():
        raise SelectionError(f"{flag} {shown}: empty; give {kind} or a TOML file ({listing}); "
                             f"{use(names[0] if names else 'FILE.toml')}")
    path = Path(text).expanduser()
    if path.is_dir():
        raise SelectionError(f"{flag} {shown}: {path.absolute()} is a directory, not a TOML file ({listing}); "
                             f"{use(shlex.quote(str(path / 'FILE.toml')))} or {kind}")
    if path.is_file():
        return path
    if path.exists():
        raise SelectionError(f"{flag} {shown}: {path.absolute()} is not a regular file; give a TOML file or "
                             f"{kind} ({listing})")
    if path.is_symlink():
        raise SelectionError(f"{flag} {shown}: {path.absolute()} is a broken link (to {os.readlink(path)}); "
                             f"give an existing TOML file or {kind} ({listing})")
    looks_like_path = path.name != text or path.suffix != ""
    guess = difflib.get_close_matches(path.stem, names, n=1, cutoff=0.6) or names[:1]
    fix = use(shlex.quote(guess[0])) if guess else "give an existing TOML file"
    if looks_like_path:
        raise SelectionError(f"{flag} {shown}: no such file {path.absolute()} ({listing}); {fix}")
    preset = env.configs_dir() / f"{text}.toml"
    if preset.is_file():
        return preset
    raise SelectionError(f"{flag} {shown}: no {'CI matrix' if matrices else 'preset'} {text} and no file ./{text} "
                         f"({listing}); {fix}")


def load_config(name_or_path: str | Path) -> dict[str, Any]:
    """The [selection] table of a preset, with its keys and their types checked."""
    path = find_config(name_or_path)
    where = f"--config {shlex.quote(str(path))}"
    try:
        text = path.read_bytes().decode("utf-8")
    except OSError as exc:
        raise SelectionError(f"{where}: cannot read it ({exc.strerror or exc}); fix its permissions or "
                             f"give another file") from None
    except UnicodeDecodeError:
        raise SelectionError(f"{where}: not a text file (TOML is UTF-8 text); give a TOML preset such as "
                             f"{env.configs_dir() / 'ci-compile.toml'}") from None
    try:
        data = tomllib.loads(text)
    except (ValueError, RecursionError) as exc:  # TOMLDecodeError, too many digits, too deep
        raise SelectionError(f"{where}: not valid TOML ({exc}); fix the file") from None
    extra = sorted(set(data) - {"selection", "description"})
    if extra:
        raise SelectionError(f"{where}: unknown table or key {', '.join(extra)} "
                             f"(valid: [selection], description); remove it")
    if not isinstance(data.get("description", ""), str):
        raise SelectionError(f"{where}: description = {data['description']!r} is not a string; "
                             f'write description = "..." or remove it')
    table = data.get("selection", {})
    if not isinstance(table, dict):
        raise SelectionError(f"{where}: selection = {table!r} is not a table; write the keys under a "
                             f"[selection] header ({', '.join(CONFIG_KEYS)})")
    unknown = sorted(set(table) - set(CONFIG_KEYS))
    if unknown:
        raise SelectionError(f"{where}: unknown key {', '.join(unknown)} in [selection] "
                             f"(valid keys: {', '.join(CONFIG_KEYS)}); remove or rename it")
    return {key: (value, f"{path.name}: {key}") for key, value in table.items()}
