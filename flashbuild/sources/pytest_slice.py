"""A pytest plugin that runs a tree's own tests on a flashbuild slice: it keeps the cases the slice
serves and deselects the others (pytest counts them), by the case parameters the profile's [tests]
table names: the dtype, the head dim (which runs on the next kernel size up, after padding to the
tree's multiple) and each feature's parameter.

    flashbuild run --source TREE --profile flash-attn-2 --hdim 64 --dtype fp16 -- \\
        python3 -m pytest TREE/tests/test_flash_attn.py -p flashbuild.sources.pytest_slice

`flashbuild run` sets FLASHBUILD_SLICE to the build's manifest. FLASHBUILD_SLICE_HDIMS=40,59 keeps
only those head dims of the cases (e.g. the ones an acceptance run names); FLASHBUILD_SLICE_SHARD=i/n
keeps every n-th of the remaining cases starting at i, 0 <= i < n (to split a long suite over several
runs: 0/5 .. 4/5).
The tree is not written: pytest's cache (.pytest_cache, in the rootdir, which is the sdist's root since
it holds setup.py) goes to the build dir when it would land inside the tree.
Directions: the module's own switch for a direction the slice leaves out is set (tests.env, e.g.
flash-attn 3's FLASH_ATTENTION_DISABLE_BACKWARD), and the cases of a test function that always calls a
direction or feature the slice leaves out are deselected (tests.functions: flash-attn 2's tests run the
backward of every forward they check, and its KV-cache test the split-KV kernels).
A case that reaches a branch or kernel the slice compiled out in a way its parameters do not say (flash-attn
2's num_splits heuristic sends a small forward to the split-KV kernels; a random window that reduces to
another branch) ends in the slice's own error ("this flashbuild slice of ... rebuild with: ..."): it is
reported as skipped with that error as the reason, and counted in the summary, never as a pass or a
failure of the tree (REFUSED).
A test function the tree's own build fails too (tests.known_failures of its release line, with why)
runs as an xfail: counted as an expected failure, never as a pass; if it passes (a newer tree fixed the
test), pytest reports it XPASS, which says the entry is stale.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

from . import switches

DTYPE_NAMES = {"float16": "fp16", "bfloat16": "bf16"}
# The slice's own error, raised where a call needs what the build left out (stubs, switch misses, device
# kernels: each says "this flashbuild slice of PROFILE ... rebuild with: COMMAND").
REFUSED = re.compile(r"this flashbuild slice of \S+.*?rebuild with: ", re.S)
_refused: list[str] = []   # the cases skipped for it, for the summary


SLICE_FIX = ("run pytest under `flashbuild run SELECTION -- python3 -m pytest ... -p flashbuild.sources.pytest_slice`, "
             "which sets FLASHBUILD_SLICE to the build's manifest.json")
_loaded: dict[str, tuple[dict, object]] = {}


def _usage(message: str):
    import pytest

    from ..errors import one_line
    return pytest.UsageError(one_line(f"flashbuild.sources.pytest_slice: {message}"))


def _names(value, kind) -> bool:
    return isinstance(value, list) and all(isinstance(v, kind) and not isinstance(v, bool) for v in value)


def manifest_problem(manifest) -> str | None:
    """What a manifest the plugin reads lacks (it reads key, profile, source and the selection's
    hdim, dtype and features), or None."""
    if not isinstance(manifest, dict):
        return f"a JSON {type(manifest).__name__}, not a build manifest (an object)"
    selection = manifest.get("selection")
    if not isinstance(selection, dict):
        return "no \"selection\" object"
    for key, kind in (("hdim", int), ("dtype", str), ("features", str)):
        if not _names(selection.get(key), kind):
            return f"selection.{key} is {json.dumps(selection.get(key))[:60]}, not a list of {kind.__name__}s"
    if not isinstance(manifest.get("profile", "flashbuild"), str):
        return "\"profile\" is not a string"
    if not isinstance(manifest.get("source"), (str, type(None))):
        return "\"source\" is not a path"
    return None


def _profile_of(name: str):
    """The profile a manifest names: one of configs/profiles by name (with its release line, as a
    detected tree's build records it: flash-attn-3@3.0.0), or a .toml file by path (as
    `flashbuild run --profile PATH` records it); never another file."""
    from . import profile as profiles
    from . import releases

    base, release = releases.split_name(name)
    if base in profiles.available():  # flash-attn-2, or one of its release lines: flash-attn-2@2.6
        if release is not None and release not in {r.name for r in profiles.releases(base)}:
            raise _usage(f"FLASHBUILD_SLICE's manifest names profile {name!r}, and {base} has no release line "
                         f"{release} (lines: {', '.join(r.name for r in profiles.releases(base)) or 'none'}); "
                         f"{SLICE_FIX}")
        return profiles.load(name)
    path = Path(name)
    if path.suffix != ".toml" or not path.is_file():
        raise _usage(f"FLASHBUILD_SLICE's manifest names profile {name!r}, which is neither a profile of "
                     f"{profiles.profiles_dir()} ({', '.join(profiles.available())}) nor a .toml file; {SLICE_FIX}")
    return profiles.load(str(path))


def _slice():
    """(the build's manifest, its profile), checked; a pytest.UsageError naming the variable otherwise."""
    from .. import safe_io
    from ..errors import FlashbuildError

    path = os.environ.get("FLASHBUILD_SLICE", "")
    if not path.strip():
        raise _usage(f"FLASHBUILD_SLICE is not set; {SLICE_FIX}")
    try:
        stamp = os.stat(path)
        key = f"{path}:{stamp.st_mtime_ns}:{stamp.st_size}"
    except OSError:
        key = None
    if key in _loaded:
        return _loaded[key]
    try:
        manifest = safe_io.read_json(path)
    except FileNotFoundError:
        raise _usage(f"FLASHBUILD_SLICE={path}: no such file; {SLICE_FIX}") from None
    except (OSError, ValueError) as exc:
        why = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        raise _usage(f"FLASHBUILD_SLICE={path}: cannot be read as a build manifest ({why}); {SLICE_FIX}") from None
    problem = manifest_problem(manifest)
    if problem:
        raise _usage(f"FLASHBUILD_SLICE={path}: {problem}; {SLICE_FIX}")
    try:
        tree = _profile_of(manifest.get("profile", "flashbuild"))
    except FlashbuildError as exc:
        raise _usage(f"FLASHBUILD_SLICE={path}: {exc}") from None
    if tree.tests is None:
        raise _usage(f"FLASHBUILD_SLICE={path}: profile {tree.name} ({tree.path}) has no [tests] table, so the plugin "
                     f"cannot tell which of the tests' cases the slice serves; add one (see "
                     f"configs/profiles/flash-attn-2.toml), or run pytest without -p flashbuild.sources.pytest_slice")
    if key:
        _loaded[key] = (manifest, tree)
    return manifest, tree


def only_hdims(value: str | None) -> set[int]:
    """FLASHBUILD_SLICE_HDIMS's head dims (empty: no filter)."""
    items = [h.strip() for h in (value or "").split(",") if h.strip()]
    if not all(h.isascii() and h.isdigit() and len(h) <= 4 for h in items):
        raise _usage(f"FLASHBUILD_SLICE_HDIMS={value}: expected head dims separated by commas, e.g. 40,59")
    return {int(h) for h in items}


def as_hdim(value) -> int | None:
    """A case's head dim parameter as an int (64, or "64"); None when it is not one (then the case is
    not filtered by head dim: the test itself decides)."""
    if isinstance(value, str) and value.strip().isascii() and value.strip().isdigit() and len(value.strip()) <= 6:
        value = int(value)
    return value if isinstance(value, int) and not isinstance(value, bool) and 0 < value < 1 << 20 else None


def _same(a, b) -> bool:
    """A test parameter equals a profile's `off` value (TOML has lists where tests use tuples)."""
    norm = (lambda x: list(x) if isinstance(x, tuple) else x)
    return norm(a) == norm(b)


def _directions(manifest: dict, tree) -> tuple[str, ...]:
    """The directions the slice holds: the selection's, or every one of the tree's when the manifest
    names none (then a case that calls a missing one meets the slice's stub error, never a wrong kernel)."""
    directions = manifest["selection"].get("direction")
    return tuple(directions) if _names(directions, str) else tuple(tree.directions)


def serves(params: dict, manifest: dict, tree, function: str = "") -> str | None:
    """None when the slice serves a case with these parameters (of test `function`), else why not."""
    names = tree.tests
    selection = manifest["selection"]
    dtype = params.get(names.dtype)
    if dtype is not None:
        dtype_name = DTYPE_NAMES.get(str(dtype).replace("torch.", ""), str(dtype))
        if dtype_name not in selection["dtype"]:
            return f"dtype {dtype_name}"
    hdim = as_hdim(params.get(names.hdim))
    if hdim is not None:
        padded = -(-hdim // names.hdim_multiple) * names.hdim_multiple
        kernel = tree.kernel_size(padded)
        if kernel not in selection["hdim"]:
            return f"head dim {hdim} (the hdim-{kernel} kernel)"
        if names.uneven and padded != kernel and names.uneven not in selection["features"]:
            return f"head dim {hdim} needs {names.uneven}"
    for feature, (param, off) in names.features.items():
        if param in params and not _same(params[param], off) and feature not in selection["features"]:
            return f"{feature} ({param}={params[param]!r})"
    directions = _directions(manifest, tree)
    for need, functions in names.functions.items():  # every case of these functions calls it
        if function in functions and need not in directions and need not in selection["features"]:
            return f"{'direction ' if need in tree.directions else ''}{need} (every case of {function} calls it)"
    if tree.switches is not None:  # a switch branch the slice compiled out (sources/switches.py): never run
        causal = {"on": (True,), "off": (False,)}.get(selection.get("causal"), (False, True))
        # a feature whose sites are in directions the slice lacks (FA3's gqa: the backward's) narrows nothing
        # this slice can call: a forward-only slice serves GQA cases (the module skips their backward)
        held = (*selection["features"], *switches.unreachable(tree.switches, directions))
        lacks = switches.case_outside(tree.switches, function, params, causal, held)
        if lacks:
            return f"compiled-out switch branch: {lacks}"
    return None


def test_environment(manifest: dict, tree) -> dict[str, str]:
    """The switches the tree's test module reads from the environment (profile key tests.env), set
    for what the slice leaves out, so the module only generates cases the slice can serve."""
    selection = manifest["selection"]
    out = {}
    directions = _directions(manifest, tree)
    for key, variable in tree.tests.env.items():
        if key == "always" or (key in tree.features and key not in selection["features"]) or (
                key in tree.directions and key not in directions) or (
                key.startswith("hdim") and int(key[4:]) not in selection["hdim"]):
            out[variable] = "TRUE"
    for key, variable in (tree.switches.tests.env.items() if tree.switches is not None else ()):
        if key not in selection["features"]:
            out[variable] = "TRUE"
    return out


def shard_of(value: str | None) -> tuple[int, int] | None:
    """FLASHBUILD_SLICE_SHARD's (i, n), or None when unset. Shards count from 0; an i outside 0..n-1
    would select nothing and pass silently, so it is an error."""
    if not value:
        return None
    try:
        index, count = (int(x) for x in value.split("/"))
    except ValueError:
        index, count = -1, 0
    if not 0 <= index < count:
        raise _usage(f"FLASHBUILD_SLICE_SHARD={value}: expected i/n with 0 <= i < n (shards count from 0: "
                     f"0/n .. n-1/n)")
    return index, count


def cache_dir_outside_tree(config, manifest: dict) -> None:
    """When pytest's cache dir (ini cache_dir, relative to the rootdir) lies inside the tree, point it
    at pytest_cache/ in the build dir (beside FLASHBUILD_SLICE's manifest) instead; else leave it."""
    source = manifest.get("source")
    if not source:
        return
    try:
        cache_dir = config.getini("cache_dir")
    except ValueError:  # -p no:cacheprovider: no cache, nothing to move
        return
    tree = Path(source).resolve()
    wanted = Path(config.rootpath, os.path.expandvars(os.path.expanduser(str(cache_dir)))).resolve()
    if wanted == tree or tree in wanted.parents:
        # getini's cache, read by the cacheprovider's pytest_configure, which runs after this one
        config._inicache["cache_dir"] = str(Path(os.environ["FLASHBUILD_SLICE"]).resolve().parent / "pytest_cache")


def _tryfirst(function):
    import pytest

    return pytest.hookimpl(tryfirst=True)(function)


@_tryfirst  # before the cacheprovider's (also tryfirst, registered earlier) creates the cache dir
def pytest_configure(config):
    """Before any test module is imported: the tree's environment switches (tests.env) for the slice;
    a value already in the environment is kept. A malformed shard is refused before collecting.
    pytest's cache goes to the build dir, not the tree."""
    shard_of(os.environ.get("FLASHBUILD_SLICE_SHARD"))
    only_hdims(os.environ.get("FLASHBUILD_SLICE_HDIMS"))
    manifest, tree = _slice()
    cache_dir_outside_tree(config, manifest)
    for variable, value in test_environment(manifest, tree).items():
        os.environ.setdefault(variable, value)


def pytest_collection_modifyitems(config, items):
    manifest, tree = _slice()
    only = only_hdims(os.environ.get("FLASHBUILD_SLICE_HDIMS"))
    shard = shard_of(os.environ.get("FLASHBUILD_SLICE_SHARD"))
    keep, drop = [], []
    for item in items:
        params = item.callspec.params if hasattr(item, "callspec") else {}
        hdim = as_hdim(params.get(tree.tests.hdim))
        function = getattr(getattr(item, "function", None), "__name__", "") or item.name.split("[")[0]
        outside = serves(params, manifest, tree, function) or (only and hdim is not None and hdim not in only)
        (drop if outside else keep).append(item)
        if not outside and function in tree.tests.known_failures:
            import pytest

            item.add_marker(pytest.mark.xfail(reason=f"the tree's own build fails it too: "
                                              f"{tree.tests.known_failures[function]}", strict=False))
    if shard:
        index, count = shard
        drop += [item for n, item in enumerate(keep) if n % count != index]
        keep = [item for n, item in enumerate(keep) if n % count == index]
    items[:] = keep
    if drop:
        config.hook.pytest_deselected(items=drop)


def refusal(exc: BaseException | None) -> str | None:
    """The slice's error in `exc` or what it was raised from (its first line), or None."""
    seen = 0
    while exc is not None and seen < 8:
        text = str(exc)
        found = REFUSED.search(text)
        if found:
            start = text.rfind("\n", 0, found.start()) + 1
            end = text.find("\n", found.end())
            return text[start:end if end >= 0 else None].strip()
        exc, seen = exc.__cause__ or exc.__context__, seen + 1
    return None


def _hookwrapper(function):
    import pytest

    return pytest.hookimpl(hookwrapper=True)(function)


@_hookwrapper
def pytest_runtest_makereport(item, call):
    """A case that failed on the slice's own error is a skip naming it (REFUSED), unless it is an xfail."""
    outcome = yield
    report = outcome.get_result()
    if call.when != "call" or not report.failed or call.excinfo is None or hasattr(report, "wasxfail"):
        return
    why = refusal(call.excinfo.value)
    if why is not None:
        _refused.append(item.nodeid)
        report.outcome = "skipped"
        report.longrepr = (str(item.path), item.location[1], f"needs what this slice compiled out: {why}")


def pytest_terminal_summary(terminalreporter):
    if _refused:
        terminalreporter.write_line(
            f"flashbuild slice: {len(_refused)} case(s) reached a branch or kernel the slice compiled out and raised "
            f"its error (reported as skipped, with the command that adds it: -rs shows them)")


def pytest_report_header(config):
    manifest, tree = _slice()
    selection = manifest["selection"]
    return (f"flashbuild slice {manifest.get('key', '?')} of {tree.name}: hdim {selection['hdim']}, dtype {selection['dtype']}, "
            f"features {selection['features'] or 'none'}; cases outside it are deselected")
