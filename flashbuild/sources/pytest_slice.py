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
Directions are not filtered: build every direction the tests call (fwd, bwd, splitkv).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from . import switches

DTYPE_NAMES = {"float16": "fp16", "bfloat16": "bf16"}


def _slice():
    from . import profile as profiles

    path = os.environ.get("FLASHBUILD_SLICE")
    if not path:
        raise RuntimeError("flashbuild.sources.pytest_slice: FLASHBUILD_SLICE is not set; run pytest under "
                           "`flashbuild run SELECTION -- python3 -m pytest ...`, which sets it")
    manifest = json.loads(Path(path).read_text())
    tree = profiles.load(manifest["profile"])
    if tree.tests is None:
        raise RuntimeError(f"profile {tree.name} has no [tests] table: it does not say how its tests name "
                           f"dtype and head dim")
    return manifest, tree


def serves(params: dict, manifest: dict, tree, function: str = "") -> str | None:
    """None when the slice serves a case with these parameters (of test `function`), else why not."""
    names = tree.tests
    selection = manifest["selection"]
    dtype = params.get(names.dtype)
    if dtype is not None:
        dtype_name = DTYPE_NAMES.get(str(dtype).replace("torch.", ""), str(dtype))
        if dtype_name not in selection["dtype"]:
            return f"dtype {dtype_name}"
    hdim = params.get(names.hdim)
    if hdim is not None:
        padded = -(-int(hdim) // names.hdim_multiple) * names.hdim_multiple
        kernel = tree.kernel_size(padded)
        if kernel not in selection["hdim"]:
            return f"head dim {hdim} (the hdim-{kernel} kernel)"
        if names.uneven and padded != kernel and names.uneven not in selection["features"]:
            return f"head dim {hdim} needs {names.uneven}"
    for feature, (param, off) in names.features.items():
        if param in params and params[param] != off and feature not in selection["features"]:
            return f"{feature} ({param}={params[param]!r})"
    if tree.switches is not None:  # a switch branch the slice compiled out (sources/switches.py): never run
        causal = {"on": (True,), "off": (False,)}.get(selection.get("causal"), (False, True))
        lacks = switches.case_outside(tree.switches, function, params, causal, tuple(selection["features"]))
        if lacks:
            return f"compiled-out switch branch: {lacks}"
    return None


def test_environment(manifest: dict, tree) -> dict[str, str]:
    """The switches the tree's test module reads from the environment (profile key tests.env), set
    for what the slice leaves out, so the module only generates cases the slice can serve."""
    selection = manifest["selection"]
    out = {}
    for key, variable in tree.tests.env.items():
        if key == "always" or (key in tree.features and key not in selection["features"]) or (
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
        import pytest
        raise pytest.UsageError(
            f"FLASHBUILD_SLICE_SHARD={value}: expected i/n with 0 <= i < n (shards count from 0: "
            f"0/n .. n-1/n)")
    return index, count


def cache_dir_outside_tree(config, manifest: dict) -> None:
    """When pytest's cache dir (ini cache_dir, relative to the rootdir) lies inside the tree, point it
    at pytest_cache/ in the build dir (beside FLASHBUILD_SLICE's manifest) instead; else leave it."""
    source = manifest.get("source")
    if not source:
        return
    tree = Path(source).resolve()
    try:
        configured = config.getini("cache_dir")
    except ValueError:  # no cache_dir option: pytest runs without its cacheprovider (-p no:cacheprovider)
        return
    wanted = Path(config.rootpath, os.path.expandvars(os.path.expanduser(str(configured)))).resolve()
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
    manifest, tree = _slice()
    cache_dir_outside_tree(config, manifest)
    for variable, value in test_environment(manifest, tree).items():
        os.environ.setdefault(variable, value)


def pytest_collection_modifyitems(config, items):
    manifest, tree = _slice()
    only = {int(h) for h in os.environ.get("FLASHBUILD_SLICE_HDIMS", "").split(",") if h.strip()}
    shard = shard_of(os.environ.get("FLASHBUILD_SLICE_SHARD"))
    keep, drop = [], []
    for item in items:
        params = item.callspec.params if hasattr(item, "callspec") else {}
        hdim = params.get(tree.tests.hdim)
        function = getattr(getattr(item, "function", None), "__name__", "") or item.name.split("[")[0]
        outside = serves(params, manifest, tree, function) or (only and hdim is not None and int(hdim) not in only)
        (drop if outside else keep).append(item)
    if shard:
        index, count = shard
        drop += [item for n, item in enumerate(keep) if n % count != index]
        keep = [item for n, item in enumerate(keep) if n % count == index]
    items[:] = keep
    if drop:
        config.hook.pytest_deselected(items=drop)


def pytest_report_header(config):
    manifest, tree = _slice()
    selection = manifest["selection"]
    return (f"flashbuild slice {manifest['key']} of {tree.name}: hdim {selection['hdim']}, dtype {selection['dtype']}, "
            f"features {selection['features'] or 'none'}; cases outside it are deselected")
