"""CI matrix configs: a grid of axis values, minus `exclude` rules, plus `include` rules, grouped
into cells (e.g. one per arch x dtype), and hand-named `[[cells]]`. Each cell is one Selection, so
`flashbuild build --config FILE --cell NAME` builds exactly what `flashbuild matrix FILE` printed.

The fan-out itself is the CI system's job matrix (`--format github` prints a GitHub Actions
`strategy.matrix`); nothing here schedules anything. Every mistake in a config is a SelectionError
naming the file, the key, what was expected and what was found.

A config looks like configs/ci.toml:

    [matrix]
    hdim = [64, 128]; dtype = ["fp16", "bf16"]; arch = ["sm80", "sm90"]
    direction = ["fwd", "bwd"]; causal = ["off", "on"]; features = ["local,softcap"]
    group_by = ["arch", "dtype"]      # one cell per arch x dtype
    shards = 2                        # each cell's TUs split over 2 machines
    [[matrix.exclude]]                # drop grid points: every key given must match
    arch = "sm80"; direction = "bwd"
    [[matrix.include]]                # add points; keys left out take the grid's values
    arch = "sm86"; hdim = 64; direction = "fwd"
    [[cells]]                         # a cell by hand (not part of the grid)
    name = "smoke-sm80"; hdim = 64; dtype = "fp16"; arch = "sm80"; direction = "fwd"; causal = "off"; features = "none"
"""

from __future__ import annotations

import itertools
import json
import re
import shlex
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..errors import SelectionError
from ..selection import space, variants as v

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib

AXES = ("hdim", "dtype", "arch", "direction", "causal", "features")
MATRIX_KEYS = (*AXES, "group_by", "shards", "exclude", "include", "source", "profile")
CELL_KEYS = ("name", *AXES, "shards")
GITHUB_MAX_JOBS = 256  # GitHub Actions refuses a matrix of more jobs than this
_CELL_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.+-]*")


@dataclass(frozen=True)
class Cell:
    """One job of the matrix: its name, its selection (as CLI arguments and as load() keywords),
    its TU count and how many shards it is split into."""

    name: str
    selection: v.Selection
    shards: int
    units: int

    def args(self) -> list[str]:
        return self.selection.cli_args()

    def record(self, config: str) -> dict[str, Any]:
        return {"name": self.name, "args": shlex.join(self.args()), "tus": self.units, "shards": self.shards,
                "variants": self.selection.describe(),
                "build": shlex.join(["flashbuild", "build", "--config", config, "--cell", self.name])}


@dataclass(frozen=True)
class Matrix:
    path: Path
    shown: str          # the config as the user named it (what the printed commands repeat)
    cells: tuple[Cell, ...]

    def cell(self, name: str) -> Cell:
        for cell in self.cells:
            if cell.name == name:
                return cell
        import difflib

        names = [c.name for c in self.cells]
        same_case = [n for n in names if n.lower() == str(name).strip().lower()]  # SMOKE-SM80 is smoke-sm80
        near = same_case or difflib.get_close_matches(str(name).lower(), names, n=1) or names[:1]
        raise SelectionError(f"--cell {shlex.quote(name)}: {self.shown} has no such cell (cells: {', '.join(names)}); "
                             f"use --cell {near[0]} (see `flashbuild matrix {shlex.quote(self.shown)}`)")

    def as_json(self) -> list[dict[str, Any]]:
        return [c.record(self.shown) for c in self.cells]

    def as_github(self) -> dict[str, Any]:
        """A GitHub Actions strategy.matrix: one job per (cell, shard)."""
        jobs = [{"cell": c.name, "shard": f"{i}/{c.shards}", "args": shlex.join(c.args()), "tus": c.units}
                for c in self.cells for i in range(1, c.shards + 1)]
        if len(jobs) > GITHUB_MAX_JOBS:
            raise SelectionError(f"{self.shown}: {len(jobs)} jobs (cells x shards), more than the {GITHUB_MAX_JOBS} a "
                                 f"GitHub Actions matrix allows; set fewer shards or group_by fewer axes in [matrix]")
        return {"include": jobs}


# ---------------------------------------------------------------- reading the file

def is_matrix_config(name_or_path: str) -> bool:
    """Whether --config names a matrix (a [matrix] table or [[cells]]) rather than a preset. A
    config that cannot be found or read is not one: the preset loader reports it, in its words."""
    try:
        path = v.find_config(name_or_path)
    except SelectionError:
        return False
    return v.is_matrix_config(path)


def _read(path: Path) -> dict[str, Any]:
    try:
        return tomllib.loads(path.read_bytes().decode("utf-8"))
    except OSError as exc:
        raise SelectionError(f"{path}: cannot read it ({exc.strerror or exc}); fix its permissions") from None
    except UnicodeDecodeError:
        raise SelectionError(f"{path}: not a text file (TOML is UTF-8 text); give a matrix such as configs/ci.toml") \
            from None
    except (ValueError, RecursionError) as exc:  # TOMLDecodeError, too many digits, too deep
        raise SelectionError(f"{path}: not valid TOML ({exc}); fix the file") from None


class _Where:
    """Names a key of the file in errors: 'ci.toml: matrix.exclude[2].hdim'."""

    def __init__(self, path: Path):
        self.path = path

    def __call__(self, key: str) -> str:
        return f"{self.path.name}: {key}"

    def error(self, key: str, expected: str, found: Any) -> SelectionError:
        return SelectionError(f"{self.path}: {key}: expected {expected}, found {_found(found)}; fix it in {self.path}")


def _found(value: Any) -> str:
    kind = {dict: "a table", list: "a list", str: "a string", bool: "a bool", int: "an integer",
            float: "a float"}.get(type(value), type(value).__name__)
    return f"{kind} ({json.dumps(value, default=str)})"


def _check_keys(table: Any, valid: tuple[str, ...], key: str, where: _Where) -> dict[str, Any]:
    if not isinstance(table, dict):
        raise where.error(key, f"a table with keys {', '.join(valid)}", table)
    unknown = sorted(set(table) - set(valid))
    if unknown:
        raise SelectionError(f"{where.path}: {key}: unknown key {', '.join(unknown)} (valid keys: {', '.join(valid)}); "
                             f"remove or rename it in {where.path}")
    return table


def _list(value: Any) -> list:
    return list(value) if isinstance(value, list) else [value]


def _axis_values(axis: str, value: Any, key: str, where: _Where, names: tuple[str, ...]) -> tuple:
    """One axis of a grid or rule, checked with the selection's own parsers: hdims as ints, names as
    canonical names, causal as False/True, features as tuples (each value is one feature set)."""
    source = where(key)
    if axis == "hdim":
        return v.parse_hdims(value, source)
    if axis == "dtype":
        return v.parse_dtypes(value, source)
    if axis == "arch":
        if any(str(item).strip().lower() == v.NATIVE for item in _list(value)):
            raise where.error(key, f"arch names ({', '.join(v.ARCHS)}): a CI matrix names its archs, 'native' "
                                   f"means whatever GPU the runner has", value)
        return v.parse_archs(value, source)
    if axis == "direction":
        return v.parse_directions(value, source)
    if axis == "causal":
        out: list[bool] = []
        for item in _list(value):
            out += [c for c in v.parse_causal(item, source) if c not in out]
        return tuple(sorted(out))
    # docs/ci.md: each item of a list is one feature set (["local", "softcap"] is two cells' worth:
    # local alone and softcap alone; "local,softcap" is one set of both); [] is the one empty set.
    sets = [value] if isinstance(value, list) and not value else _list(value)
    return tuple(dict.fromkeys(v.parse_features(item, source, names) for item in sets))


# ---------------------------------------------------------------- grid -> cells

Point = tuple  # one value per axis, in AXES order


def _grid(table: dict, where: _Where, names: tuple[str, ...], defaults: dict[str, tuple]) -> dict[str, tuple]:
    return {axis: _axis_values(axis, table[axis], f"matrix.{axis}", where, names) if axis in table else defaults[axis]
            for axis in AXES}


def _rule(rule: Any, key: str, where: _Where, names: tuple[str, ...]) -> dict[str, tuple]:
    _check_keys(rule, AXES, key, where)
    if not rule:
        raise where.error(key, f"at least one axis ({', '.join(AXES)})", rule)
    return {axis: _axis_values(axis, value, f"{key}.{axis}", where, names) for axis, value in rule.items()}


def _matches(point: Point, rule: dict[str, tuple]) -> bool:
    return all(point[AXES.index(axis)] in values for axis, values in rule.items())


def _label(axis: str, value: Any) -> str:
    """How a cell name spells an axis value: sm90, fp16, h64, fwd, causal/noncausal, fLS/fnone (the
    cache key's words: selection/space.py)."""
    return space.label(axis, value)


def _rank(axis: str, value: Any) -> Any:
    """Canonical order of an axis value (sm80 before sm90, fp16 before bf16, fwd before bwd)."""
    order = {"dtype": v.DTYPES, "arch": v.ARCHS, "direction": v.DIRECTIONS}.get(axis)
    if order is not None:
        return order.index(value) if value in order else len(order)
    return (len(value), value) if axis == "features" else value


def _rectangles(points: list[Point], name: str, split_order: list[str]) -> list[tuple[str, dict[str, tuple]]]:
    """Split a group into pieces that are each a cross product (one Selection), naming each piece by
    the axis values it was split on. Features are always one value per piece: a Selection has one
    feature set."""
    values = {axis: tuple(sorted({p[AXES.index(axis)] for p in points}, key=lambda x, a=axis: _rank(a, x)))
              for axis in AXES}
    product = set(itertools.product(*(values[a] for a in AXES)))
    if len(values["features"]) == 1 and product == set(points):
        return [(name, values)]
    axis = "features" if len(values["features"]) > 1 else next(a for a in split_order if len(values[a]) > 1)
    out = []
    for value in values[axis]:
        part = [p for p in points if p[AXES.index(axis)] == value]
        out += _rectangles(part, f"{name}-{_label(axis, value)}", [a for a in split_order if a != axis])
    return out


def _grid_cells(table: dict, where: _Where, names: tuple[str, ...], defaults: dict[str, tuple]) \
        -> list[tuple[str, dict[str, tuple]]]:
    grid = _grid(table, where, names, defaults)
    points = list(itertools.product(*(grid[a] for a in AXES)))
    for i, raw in enumerate(_list_of_tables(table.get("exclude", []), "matrix.exclude", where)):
        rule = _rule(raw, f"matrix.exclude[{i}]", where, names)
        kept = [p for p in points if not _matches(p, rule)]
        if len(kept) == len(points):
            raise SelectionError(f"{where.path}: matrix.exclude[{i}] ({json.dumps(raw)}) matches nothing in the grid; "
                                 f"remove it or fix its values in {where.path}")
        points = kept
    for i, raw in enumerate(_list_of_tables(table.get("include", []), "matrix.include", where)):
        rule = _rule(raw, f"matrix.include[{i}]", where, names)
        extra = itertools.product(*(rule.get(a, grid[a]) for a in AXES))
        points += [p for p in extra if p not in points]
    if not points:
        raise SelectionError(f"{where.path}: [matrix]: the exclude rules remove every grid point; loosen them")
    group_by = table.get("group_by", ["arch", "dtype"])
    if not isinstance(group_by, list) or any(a not in AXES for a in group_by) or len(set(group_by)) != len(group_by):
        raise where.error("matrix.group_by", f"a list of distinct axis names ({', '.join(AXES)})", group_by)
    groups: dict[tuple, list[Point]] = {}
    for point in points:
        groups.setdefault(tuple(point[AXES.index(a)] for a in group_by), []).append(point)
    rest = [a for a in AXES if a not in group_by]
    cells = []
    for key in sorted(groups, key=lambda k: [_rank(a, value) for a, value in zip(group_by, k)]):
        name = "-".join(_label(a, value) for a, value in zip(group_by, key)) or "all"
        cells += _rectangles(groups[key], name, rest)
    return cells


def _list_of_tables(value: Any, key: str, where: _Where) -> list:
    if not isinstance(value, list):
        raise where.error(key, f"a list of tables ([[{key}]])", value)
    return value


def _shards(value: Any, key: str, where: _Where) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= GITHUB_MAX_JOBS:
        raise where.error(key, f"a positive integer up to {GITHUB_MAX_JOBS} (the machines one cell's TUs are split "
                               f"over)", value)
    return value


def load(name_or_path: str, flag: str = "--config") -> Matrix:
    """The cells of a matrix config (a path, or a name in configs/), every value checked. `flag`: how
    the user named it (`--config`, or `flashbuild matrix` for its argument), for the errors' fixes."""
    from .. import env

    problem = env.root_problem()  # a broken FLASHBUILD_ROOT, named as the build names it
    if problem:
        raise SelectionError(problem)
    path = v.find_config(name_or_path, flag=flag, matrices=True)
    data = _read(path)
    where = _Where(path)
    if "matrix" not in data and "cells" not in data:
        raise SelectionError(f"{name_or_path}: {path} is a preset, not a CI matrix (it has no [matrix] table and no "
                             f"[[cells]]); build it with --config {shlex.quote(str(name_or_path))} and no --cell, or "
                             f"use a matrix ({', '.join(v.matrix_names()) or 'none'} in configs/): "
                             f"{flag} configs/ci.toml")
    unknown = sorted(set(data) - {"matrix", "cells", "description"})
    if unknown:
        raise SelectionError(f"{path}: unknown table or key {', '.join(unknown)} (valid: description, [matrix], "
                             f"[[cells]]); remove it")
    if not isinstance(data.get("description", ""), str):
        raise where.error("description", "a string", data["description"])
    table = _check_keys(data.get("matrix", {}), MATRIX_KEYS, "matrix", where)
    tree = _profile(table, where)
    names = tree.features if tree is not None else v.FEATURES
    defaults = _defaults(tree)
    shards = _shards(table.get("shards", 1), "matrix.shards", where)
    pieces = [(name, values, shards) for name, values in _grid_cells(table, where, names, defaults)] if "matrix" in data \
        else []
    for i, raw in enumerate(_list_of_tables(data.get("cells", []), "cells", where)):
        _check_keys(raw, CELL_KEYS, f"cells[{i}]", where)
        name = raw.get("name")
        if not isinstance(name, str) or not _CELL_NAME.fullmatch(name):
            raise where.error(f"cells[{i}].name", "a name of letters, digits and _.+- (e.g. smoke-sm80)", name)
        values = {axis: _axis_values(axis, raw[axis], f"cells[{i}].{axis}", where, names) if axis in raw
                  else defaults[axis] for axis in AXES}
        if len(values["features"]) != 1:
            raise where.error(f"cells[{i}].features", "one feature set (e.g. \"local,softcap\" or \"none\")",
                              raw.get("features"))
        pieces.append((name, values, _shards(raw.get("shards", 1), f"cells[{i}].shards", where)))
    # Names that differ only in case are one name too: the artifact dirs and CI artifact names built from
    # them would collide on a case-insensitive file system (macOS, Windows runners).
    seen: dict[str, list[str]] = {}
    for name, _, _ in pieces:
        seen.setdefault(name.lower(), []).append(name)
    twice = [" and ".join(dict.fromkeys(names)) if len(set(names)) > 1 else names[0]
             for names in seen.values() if len(names) > 1]
    if twice:
        raise SelectionError(f"{path}: cell name {', '.join(twice)} given twice (names are compared without case); "
                             f"rename one of the [[cells]] or change [matrix] group_by")
    cells = tuple(_cell(name, values, shards, table, tree, where) for name, values, shards in pieces)
    return Matrix(path=path, shown=str(name_or_path), cells=cells)


def _profile(table: dict, where: _Where):
    """The external tree's profile when [matrix] names one (source + profile), else None."""
    if "source" not in table and "profile" not in table:
        return None
    from ..sources import profile as profiles

    for key in ("source", "profile"):
        if not isinstance(table.get(key), str) or not table[key].strip():
            raise where.error(f"matrix.{key}", "a string (an external tree needs both source and profile)",
                              table.get(key))
    return profiles.load(table["profile"])


def _defaults(tree) -> dict[str, tuple]:
    """An axis a matrix leaves out: every value of our kernels (or of the tree's profile)."""
    if tree is None:
        return {"hdim": v.HEAD_DIMS, "dtype": v.DTYPES, "arch": v.ARCHS, "direction": v.implemented_directions(),
                "causal": (False, True), "features": (v.FEATURES,)}
    return {"hdim": tree.hdims, "dtype": tree.dtypes, "arch": tree.archs, "direction": tree.directions,
            "causal": (False, True), "features": (tree.features,)}


def _cell(name: str, values: dict[str, tuple], shards: int, table: dict, tree, where: _Where) -> Cell:
    """A piece of the matrix as a checked Selection (select() refuses what no family serves)."""
    from ..sources import profile as profiles, units

    causal = {(False,): "off", (True,): "on"}.get(values["causal"], "both")
    try:
        selection = v.select(hdim=list(values["hdim"]), dtype=list(values["dtype"]), arch=list(values["arch"]),
                             direction=list(values["direction"]), causal=causal, features=list(values["features"][0]),
                             profile=tree, source=table.get("source"))
    except SelectionError as exc:
        raise SelectionError(f"{where.path}: cell {name}: {exc}") from None
    count = len(units.units(selection, tree or profiles.load(profiles.BUILTIN)))
    return Cell(name=name, selection=selection, shards=shards, units=count)


def cell_request(matrix: Matrix, name: str) -> dict[str, Any]:
    """The build keywords (parse_request's) that select one cell."""
    selection = matrix.cell(name).selection
    request = {"hdim": list(selection.hdims), "dtype": list(selection.dtypes), "arch": list(selection.archs),
               "direction": list(selection.directions), "causal": selection.causal_mode,
               "features": list(selection.features) or "none"}
    if not selection.builtin:
        request.update(source=selection.source, profile=selection.profile)
    return request
