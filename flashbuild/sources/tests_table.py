"""A profile's [tests] table: how the tree's own test suite names what a case needs (the dtype, the head
dim, each feature's parameter, the module's own environment switches, the functions that always call a
direction or feature), for sources/pytest_slice.py. Read by sources/profile.py."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from .profile_checks import one_line as _is_str


@dataclass(frozen=True)
class TestNames:
    """How the tree's own test suite names what a case needs (sources/pytest_slice.py reads it)."""

    dtype: str
    hdim: str
    hdim_multiple: int = 1
    uneven: str | None = None                       # the feature an uneven head dim needs
    features: dict[str, tuple[str, Any]] = field(default_factory=dict, hash=False, compare=False)
    # Switches the test module reads from the environment to choose its own parameters (flash-attn 3's
    # FLASH_ATTENTION_DISABLE_*): key = a feature, "hdim<N>" or "always"; the plugin sets the variable
    # to TRUE for the features, directions and head dims the slice leaves out, and for "always".
    env: dict[str, str] = field(default_factory=dict, hash=False, compare=False)
    # Test functions every case of which calls a direction or feature (flash-attn 2's tests run the
    # backward of each forward they check): key = a direction or a feature; the plugin deselects those
    # cases when the slice leaves it out, instead of running them into the slice's stub error.
    functions: dict[str, tuple[str, ...]] = field(default_factory=dict, hash=False, compare=False)
    # Test functions the tree's own build fails too (a test its own API no longer matches): key = the
    # function, value = why, naming the upstream change. The plugin runs them as xfail: reported as
    # expected failures, never as passes; one that passes shows as XPASS (the entry is stale).
    known_failures: dict[str, str] = field(default_factory=dict, hash=False, compare=False)


def parse(names, features: tuple[str, ...], directions: tuple[str, ...], hdims: tuple[int, ...]) -> TestNames:
    """The [tests] table, read through `names` (profile.py's reader of that table: typed keys, errors
    naming the file and the key), checked against the profile's features, directions and head dims."""
    parsed = {}
    for feature, entry in names.get("features", dict, "a table of feature = { param, off }", {}).items():
        if feature not in features or not isinstance(entry, dict) or set(entry) != {"param", "off"} \
                or not _is_str(entry["param"]):
            raise names.error(f"features.{feature}", "{ param = \"name\", off = value } for a feature in "
                              "features.names", entry)
        parsed[feature] = (entry["param"], entry["off"])
    env_names = names.get("env", dict, 'a table of feature / direction / "hdim<N>" / "always" = "ENV_VAR"', {})
    bad = {k: v for k, v in env_names.items() if not (
        (k in features or k in directions or k == "always"
         or (k.startswith("hdim") and k[4:].isdigit() and int(k[4:]) in hdims))
        and isinstance(v, str) and re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", v))}
    if bad:
        raise names.error("env", 'feature / direction / "hdim<N>" / "always" = "ENV_VAR" (features, directions and '
                          'head dims of the profile)', bad)
    functions = names.get("functions", dict, 'a table of direction / feature = ["test function", ...]', {})
    bad = {k: v for k, v in functions.items() if not (
        (k in features or k in directions) and isinstance(v, list) and len(v) <= 1000
        and all(isinstance(n, str) and re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]{0,199}", n) for n in v))}
    if bad:
        raise names.error("functions", 'direction / feature = ["test_function_name", ...] (directions and features '
                          'of the profile)', dict(list(bad.items())[:1]))
    known = names.get("known_failures", dict, 'a table of "test_function" = "why the tree\'s own build fails it"', {})
    bad = {k: v for k, v in known.items() if not (
        re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]{0,199}", k) and _is_str(v) and len(v) <= 400)}
    if bad or len(known) > 200:
        raise names.error("known_failures", '"test_function_name" = "why the tree\'s own build fails it (one line, '
                          'at most 400 characters)", at most 200 entries', dict(list(bad.items())[:1]) or len(known))
    tests = TestNames(names.get("dtype", str, "a parameter name", ..., _is_str),
                      names.get("hdim", str, "a parameter name", ..., _is_str),
                      names.get("hdim_multiple", int, "a positive int", 1, lambda v: v > 0),
                      names.get("uneven", str, "a feature in features.names", None, lambda v: v in features),
                      parsed, dict(env_names), {k: tuple(v) for k, v in functions.items()}, dict(known))
    names.done()
    return tests
