"""Switches narrowed inside each TU of an external tree: the static switch macros of its launch templates
(flash-attn 3's CAUSAL_LOCAL_SWITCH, VARLEN_SWITCH, ...; flash-attn 2's BOOL_SWITCH sites) that turn
runtime flags into template arguments, each described as data in the profile's [switches] tables.

Each macro is a list of branches tried in order, as the tree's own macro tries them: the condition
(a macro parameter, or none for the last branch), the constants it binds, and what the selection must
hold for the branch to be compiled (`needs`: "causal", "not_causal" or a feature; none: always). A
build's overlay header (profile key switches.overlay, rendered from the profile's template) redefines
each macro with exactly the kept branches; a branch the selection leaves out becomes a throw of the
slice's error, naming what the call asked and the command that adds it. A branch the profile marks
`general` serves every call (e.g. flash-attn 2's is_even_MN = false: the kernel with bounds checks);
a left-out branch of such a switch runs it instead, as the tree does itself to cut templates.

A BOOL_SWITCH is shared by unrelated sites, so an entry with `site` narrows only the call whose constant
is that name (matched at compile time on the stringified name); the other sites keep both branches. A
site is a two-way switch (feature = ...) or, where its branches need causal / not_causal, spelled out
with params COND, CONST_NAME and a true then a false branch.

Selection features that only narrow switches (switches.features) join the profile's features; they
have no define in the tree's API (the API keeps its own checks; our kernels raise the named error).
Nothing here reads a tree or writes anywhere.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable

from ..errors import SelectionError
from . import device_kernels

CAUSAL_NEEDS = ("causal", "not_causal")
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_INCLUDE = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_./-]*\.h(pp)?")


@dataclass(frozen=True)
class Branch:
    """One branch of a switch macro: taken when `when` (a macro parameter; None: the else) holds."""

    when: str | None
    binds: tuple[tuple[str, bool], ...]  # macro parameter naming a constant -> its value in this branch
    needs: str | None                    # "causal", "not_causal", a feature, or None (always compiled)
    call: str                            # what a call taking this branch asks, for the error


@dataclass(frozen=True)
class Switch:
    macro: str
    params: tuple[str, ...]              # the macro's parameters before its `...` (the code to run)
    branches: tuple[Branch, ...]
    site: str | None = None              # a BOOL_SWITCH site: the constant's name there
    general: int | None = None           # the branch that serves every call (a left-out branch runs it)


@dataclass(frozen=True)
class TestNeeds:
    """How the tree's tests name what a case needs of the switches (sources/pytest_slice.py)."""

    causal: str | None = None            # the case's causal parameter
    # a case whose parameter `decode` is 1 runs not causal (the tree's API drops causal for one query row)
    decode: str | None = None
    params: dict[str, tuple[str, Any]] = field(default_factory=dict, hash=False, compare=False)
    functions: dict[str, tuple[str, ...]] = field(default_factory=dict, hash=False, compare=False)
    env: dict[str, str] = field(default_factory=dict, hash=False, compare=False)


@dataclass(frozen=True)
class Switches:
    features: tuple[str, ...]            # selection features that only narrow switches
    header: str                          # the tree's switch header, included first by the overlay
    overlay: str                         # the overlay's file name in generated/
    macros: tuple[Switch, ...]
    tests: TestNeeds = TestNeeds()
    about: dict[str, str] = field(default_factory=dict, hash=False, compare=False)  # feature -> what it keeps
    # feature -> the directions whose TUs hold its sites (FA3's gqa and deterministic: the backward's);
    # a feature not named here may be reached from any direction
    directions: dict[str, tuple[str, ...]] = field(default_factory=dict, hash=False, compare=False)
    # kernels the tree's launchers pick by the device ([[switches.device]], sources/device_kernels.py)
    devices: tuple[device_kernels.DeviceKernel, ...] = ()


def _error(path: Path, key: str, expected: str, found: Any) -> SelectionError:
    return SelectionError(f"profile {path}: key switches.{key}: expected {expected}, found {found!r}; fix the "
                          f"profile (docs/switches.md describes the format)")


def _check_keys(path: Path, key: str, table: dict, allowed: set[str]) -> None:
    extra = sorted(set(table) - allowed)
    if extra:
        raise SelectionError(f"profile {path}: unknown key {', '.join(f'switches.{key}{k}' for k in extra)}; "
                             f"remove or rename it (known: {', '.join(sorted(allowed))})")


def _text(value) -> bool:
    return isinstance(value, str) and bool(value.strip()) and all(" " <= c <= "~" for c in value)


def _branch(path: Path, key: str, item: Any, params: tuple[str, ...], needs_ok: set[str], last: bool) -> Branch:
    if not isinstance(item, dict):
        raise _error(path, key, "a table { when, set, needs, call }", item)
    _check_keys(path, key + ".", item, {"when", "set", "needs", "call"})
    when = item.get("when")
    if (when is None) != last or (when is not None and when not in params):
        raise _error(path, f"{key}.when", "a macro parameter on every branch but the last (the else), none on it",
                     when)
    binds = item.get("set")
    if not isinstance(binds, dict) or not binds or not all(k in params and isinstance(v, bool)
                                                           for k, v in binds.items()):
        raise _error(path, f"{key}.set", "a table of macro parameter = true/false", binds)
    needs = item.get("needs")
    if needs is not None and needs not in needs_ok:
        raise _error(path, f"{key}.needs", f"one of {', '.join(sorted(needs_ok))}", needs)
    call = item.get("call")
    if not _text(call):
        raise _error(path, f"{key}.call", "what a call taking this branch asks (printable text)", call)
    return Branch(when, tuple(binds.items()), needs, call)


def _macro(path: Path, i: int, item: Any, needs_ok: set[str]) -> Switch:
    key = f"macro[{i}]"
    if not isinstance(item, dict):
        raise _error(path, key, "a table", item)
    _check_keys(path, key + ".", item, {"name", "params", "branches", "site", "feature", "call", "general"})
    name = item.get("name")
    if not (isinstance(name, str) and _NAME.fullmatch(name)):
        raise _error(path, f"{key}.name", "a macro name", name)
    site = item.get("site")
    if site is not None and not (isinstance(site, str) and _NAME.fullmatch(site) and name == "BOOL_SWITCH"):
        raise _error(path, f"{key}.site", "the constant's name at a BOOL_SWITCH site", site)
    general = item.get("general")
    if "feature" in item:  # a two-way switch: (COND, CONST_NAME, ...), true only with the feature
        if "params" in item or "branches" in item:
            raise _error(path, key, "either feature (a two-way switch) or params and branches", sorted(item))
        feature, call = item["feature"], item.get("call")
        if feature not in needs_ok or feature in CAUSAL_NEEDS:
            raise _error(path, f"{key}.feature", "a feature of switches.features", feature)
        if not _text(call):
            raise _error(path, f"{key}.call", "what a call that sets the flag asks (printable text)", call)
        if general is not None and not isinstance(general, bool):
            raise _error(path, f"{key}.general", "true or false: the value that serves every call", general)
        params = ("COND", "CONST_NAME")
        branches = (Branch("COND", (("CONST_NAME", True),), feature, call),
                    Branch(None, (("CONST_NAME", False),), None, f"a call that does not ask {call}"))
        return Switch(name, params, branches, site, None if general is None else (0 if general else 1))
    params = item.get("params")
    if not (isinstance(params, list) and params and all(isinstance(p, str) and _NAME.fullmatch(p) for p in params)
            and len(set(params)) == len(params)):
        raise _error(path, f"{key}.params", "the macro's parameter names before its ...", params)
    raw = item.get("branches")
    if not isinstance(raw, list) or len(raw) < 2:
        raise _error(path, f"{key}.branches", "a list of at least two branches", raw)
    branches = tuple(_branch(path, f"{key}.branches[{j}]", b, tuple(params), needs_ok, j == len(raw) - 1)
                     for j, b in enumerate(raw))
    if general is not None and not (isinstance(general, int) and not isinstance(general, bool)
                                    and 0 <= general < len(branches)):
        raise _error(path, f"{key}.general", "the index of the branch that serves every call", general)
    # A BOOL_SWITCH site spelled out (e.g. flash-attn 2.5's BOOL_SWITCH(params.is_causal, Is_causal), whose
    # branches need causal / not_causal): the overlay's site table holds a true and a false branch only.
    if site is not None and not (tuple(params) == ("COND", "CONST_NAME") and len(branches) == 2
                                 and branches[0].when == "COND" and branches[0].binds == (("CONST_NAME", True),)
                                 and branches[1].binds == (("CONST_NAME", False),)):
        raise _error(path, f"{key}.branches", "at a BOOL_SWITCH site, params = [\"COND\", \"CONST_NAME\"] and two "
                     "branches: when = \"COND\" setting CONST_NAME = true, then the else setting it false", raw)
    return Switch(name, tuple(params), branches, site, general)


def _tests(path: Path, raw: Any, features: tuple[str, ...]) -> TestNeeds:
    if raw is None:
        return TestNeeds()
    if not isinstance(raw, dict):
        raise _error(path, "tests", "a table", raw)
    _check_keys(path, "tests.", raw, {"causal", "decode", "params", "functions", "env"})
    for key in ("causal", "decode"):
        if key in raw and not (isinstance(raw[key], str) and _NAME.fullmatch(raw[key])):
            raise _error(path, f"tests.{key}", "a test parameter name", raw[key])
    params = {}
    for feature, entry in (raw.get("params") or {}).items():
        if feature not in features or not isinstance(entry, dict) or set(entry) != {"param", "off"} \
                or not _text(entry["param"]):
            raise _error(path, f"tests.params.{feature}", "{ param = \"name\", off = value } for a feature of "
                         "switches.features", entry)
        params[feature] = (entry["param"], entry["off"])
    functions = {}
    for feature, names in (raw.get("functions") or {}).items():  # "causal": functions whose cases all are
        if feature not in (*features, "causal") or not isinstance(names, list) or not all(
                isinstance(n, str) and _NAME.fullmatch(n) for n in names):
            raise _error(path, f"tests.functions.{feature}", "a list of test function names, for a feature of "
                         "switches.features or causal", names)
        functions[feature] = tuple(names)
    env = raw.get("env") or {}
    if not all(k in features and isinstance(v, str) and _NAME.fullmatch(v) for k, v in env.items()):
        raise _error(path, "tests.env", "feature = \"ENV_VAR\" for features of switches.features", env)
    return TestNeeds(raw.get("causal"), raw.get("decode"), params, functions, dict(env))


def parse(path: Path, raw: Any, profile_features: tuple[str, ...],
          profile_directions: tuple[str, ...] = ("fwd", "bwd", "splitkv"),
          hdims: tuple[int, ...] = (32, 64, 96, 128, 192, 256)) -> Switches | None:
    """The [switches] table of profile `path` (None when it has none), checked."""
    if raw is None:
        return None
    if not isinstance(raw, dict):
        raise _error(path, "", "a table", raw)
    _check_keys(path, "", raw, {"features", "header", "overlay", "macro", "tests", "about", "directions", "device"})
    features = raw.get("features", [])
    if not (isinstance(features, list) and all(isinstance(f, str) and f.isidentifier() for f in features)
            and len(set(features)) == len(features)) or set(features) & set(profile_features):
        raise _error(path, "features", "a list of new feature names (not already in features.names)", features)
    header, overlay = raw.get("header"), raw.get("overlay")
    if not (isinstance(header, str) and _INCLUDE.fullmatch(header) and ".." not in header.split("/")):
        raise _error(path, "header", "the tree's switch header as its launch templates include it", header)
    if not (isinstance(overlay, str) and _INCLUDE.fullmatch(overlay) and "/" not in overlay):
        raise _error(path, "overlay", "a header file name (rendered into generated/)", overlay)
    needs_ok = set(CAUSAL_NEEDS) | set(features) | set(profile_features)
    macros = raw.get("macro", [])
    if not isinstance(macros, list):
        raise _error(path, "macro", "a list of tables ([[switches.macro]])", macros)
    parsed = tuple(_macro(path, i, m, needs_ok) for i, m in enumerate(macros))
    keys = [(m.macro, m.site) for m in parsed]
    if len(set(keys)) != len(keys) or any(m.site is None and (m.macro, None) in keys and m.macro == "BOOL_SWITCH"
                                          for m in parsed):
        raise _error(path, "macro", "each macro (each BOOL_SWITCH site) once, BOOL_SWITCH only by site", keys)
    about = raw.get("about", {})
    if not isinstance(about, dict) or not all(k in features and _text(v) for k, v in about.items()):
        raise _error(path, "about", "feature = \"what it keeps\" for features of switches.features", about)
    directions = raw.get("directions", {})
    if not isinstance(directions, dict) or not all(
            k in features and isinstance(v, list) and v and all(d in profile_directions for d in v)
            for k, v in directions.items()):
        raise _error(path, "directions", f"feature = [directions whose TUs hold its sites] for features of "
                     f"switches.features, directions of {', '.join(profile_directions)}", directions)
    return Switches(tuple(features), header, overlay, parsed, _tests(path, raw.get("tests"), tuple(features)),
                    dict(about), {k: tuple(v) for k, v in directions.items()},
                    device_kernels.parse(path, raw.get("device"), hdims))


def unreachable(switches: Switches, directions: Iterable[str]) -> tuple[str, ...]:
    """The switch features whose sites are all in directions a slice does not hold: no call of the slice
    reaches them, so a case that names one needs nothing of it (its direction is the plugin's concern)."""
    held = set(directions)
    return tuple(f for f, where in switches.directions.items() if not held & set(where))


def speed_features(switches: Switches) -> tuple[str, ...]:
    """The features of switches with a general branch: leaving them out changes no result, only speed
    (a benchmark's peer keeps them, to run as fast as the tree's own build)."""
    out = []
    for switch in switches.macros:
        if switch.general is not None:
            out += [b.needs for b in switch.branches if b.needs and b.needs not in out]
    return tuple(out)


# ---------------------------------------------------------------- what a selection keeps

def holds(needs: str | None, causal: tuple[bool, ...], features: tuple[str, ...]) -> bool:
    """Whether a selection (its causal values and features) compiles a branch that `needs` this."""
    if needs is None:
        return True
    if needs in CAUSAL_NEEDS:
        return (needs == "causal") in causal
    return needs in features


@dataclass(frozen=True)
class Narrowed:
    """One branch as the overlay renders it: compiled (`binds`, maybe a general branch's instead of its
    own), or a throw of `message`."""

    when: str | None
    binds: tuple[tuple[str, bool], ...] | None   # None: left out
    message: str = ""
    folded: bool = False                         # runs the general branch's constants

    @property
    def state(self) -> str:
        return "left out" if self.binds is None else "runs the general branch" if self.folded else "kept"


def narrow(switch: Switch, causal: tuple[bool, ...], features: tuple[str, ...],
           command: Callable[..., str], describe: str) -> tuple[Narrowed, ...]:
    """The branches of `switch` for a selection: each kept, folded onto the general branch, or a throw
    naming what the call asked and `command(**changes)` that adds it. `describe`: the slice, for the text."""
    out = []
    for branch in switch.branches:
        if holds(branch.needs, causal, features):
            out.append(Narrowed(branch.when, branch.binds))
        elif switch.general is not None:
            out.append(Narrowed(branch.when, switch.branches[switch.general].binds, folded=True))
        else:
            out.append(Narrowed(branch.when, None, miss_message(branch, causal, features, command, describe)))
    return tuple(out)


def miss_message(branch: Branch, causal: tuple[bool, ...], features: tuple[str, ...],
                 command: Callable[..., str], describe: str) -> str:
    if branch.needs in CAUSAL_NEEDS:
        holds_text = f"causal {'on' if causal == (True,) else 'off'} only"
        fix = command(causal="both")
    else:
        holds_text = f"feature {branch.needs} left out"
        fix = command(features=",".join((*features, branch.needs)))
    return f"{branch.call}: this flashbuild slice of {describe} compiles that branch out ({holds_text}); rebuild with: {fix}"


def overlay_context(switches: Switches, selection, profile, command: Callable[..., str]) -> dict:
    """What the overlay template renders for `selection` (a Selection of `profile`): the tree's header,
    the plain macros with their narrowed branches, and the BOOL_SWITCH sites (each with its two
    branches); `command(**changes)` is the command that builds the selection with some axes changed."""
    def fix(**changes):
        if "features" in changes:  # in the profile's order, as the CLI prints them
            wanted = set(changes["features"].split(","))
            changes["features"] = ",".join(f for f in profile.features if f in wanted)
        return command(**changes)
    macros, sites = [], []
    for switch in switches.macros:
        entry = dict(switch=switch, branches=narrow(switch, selection.causal, selection.features, fix, profile.name))
        (sites if switch.site else macros).append(entry)
    return dict(switch_header=switches.header, switch_macros=macros, switch_sites=sites,
                causal_mode=selection.causal_mode)


def kept(switches: Switches, causal: tuple[bool, ...], features: tuple[str, ...]) -> dict[str, list[dict]]:
    """For the plan and tests: each macro (or BOOL_SWITCH:site) -> the constant bindings it compiles."""
    out = {}
    for switch in switches.macros:
        key = f"{switch.macro}:{switch.site}" if switch.site else switch.macro
        bound = [dict(n.binds) for n in narrow(switch, causal, features, lambda **_: "", "") if n.binds is not None]
        out[key] = [b for i, b in enumerate(bound) if b not in bound[:i]]
    return out


def summary(switches: Switches, causal: tuple[bool, ...], features: tuple[str, ...]) -> str:
    """One line for the plan: each narrowed macro's branches, kept or out ('as the tree' when none is)."""
    parts = []
    for switch in switches.macros:
        narrowed = narrow(switch, causal, features, lambda **_: "", "")
        if all(n.binds is not None and not n.folded for n in narrowed):
            continue
        labels = [b.needs or ("false" if len(switch.branches) == 2 and b.when is None else "else")
                  for b in switch.branches]
        labels = ["true" if switch.params == ("COND", "CONST_NAME") and b.when and b.needs not in CAUSAL_NEEDS
                  else label for b, label in zip(switch.branches, labels)]
        shown = ", ".join(f"{label} {n.state}" for label, n in zip(labels, narrowed))
        parts.append(f"{switch.macro}{'(' + switch.site + ')' if switch.site else ''}: {shown}")
    return "; ".join(parts) or "every branch compiled, as the tree builds it"


# ---------------------------------------------------------------- the tree's tests

def case_needs(switches: Switches, function: str, params: dict) -> list[str]:
    """What a test case of the tree needs of the switches: "causal" / "not_causal" and features."""
    names = switches.tests
    needs = [f for f, functions in names.functions.items() if function in functions]
    needs += [f for f, (param, off) in names.params.items() if param in params and params[param] != off]
    if names.causal and names.causal in params:
        one_row = names.decode is not None and params.get(names.decode) == 1
        needs.append("causal" if params[names.causal] and not one_row else "not_causal")
    return needs


def case_outside(switches: Switches, function: str, params: dict, causal: tuple[bool, ...],
                 features: tuple[str, ...]) -> str | None:
    """None when the slice compiles every switch branch the case needs, else which it lacks."""
    for need in case_needs(switches, function, params):
        if not holds(need, causal, features):
            return need.replace("not_causal", "not causal")
    return None
