"""A pytest plugin for counting, on a machine without a GPU, which of a tree's test cases a slice's
pytest_slice keeps and which it deselects, and why: it stubs what the test modules need at import
(torch.cuda's capability, the tree's compiled extension, einops) so that `pytest --collect-only`
reaches collection. Nothing is run. Used as

    FLASHBUILD_SLICE=manifest.json python3 -m pytest --collect-only -q -p collect_shim \\
        -p flashbuild.sources.pytest_slice -p no:cacheprovider --import-mode=append TREE/.../test_flash_attn.py

with this directory on PYTHONPATH. The reasons table is printed at the end of collection."""

from __future__ import annotations

import collections
import sys
import types

import pytest


def _stub(name: str, **attrs) -> types.ModuleType:
    module = types.ModuleType(name)
    module.__dict__.update(attrs)
    def anything(*args, **kwargs):  # a call, or a decorator (with or without arguments) that keeps the function
        if len(args) == 1 and callable(args[0]) and not kwargs:
            return args[0]
        return lambda function=None, *a, **k: function

    def other(attr):  # any other public name: a no-op callable
        if attr.startswith("__"):
            raise AttributeError(attr)
        return anything
    module.__getattr__ = other
    sys.modules[name] = module
    return module


def pytest_configure(config):
    import torch

    torch.cuda.get_device_capability = lambda *a, **k: (9, 0)  # the H200's: sm90 cases are generated
    _stub("einops")
    _stub("flash_attn_2_cuda")
    _stub("flash_attn_interface")          # flash-attn 3's interface imports its compiled _C
    # flash-attn 2's rotary layer imports triton kernels: stub that module, not triton itself (a stub
    # triton breaks torch._inductor, which flash-attn 3's tests import through torch.testing)
    _stub("flash_attn.ops.triton.rotary")


@pytest.hookimpl(hookwrapper=True, tryfirst=True)
def pytest_collection_modifyitems(config, items):
    from flashbuild.sources import pytest_slice

    manifest, tree = pytest_slice._slice()
    reasons = collections.Counter()
    for item in items:
        params = item.callspec.params if hasattr(item, "callspec") else {}
        function = getattr(getattr(item, "function", None), "__name__", "") or item.name.split("[")[0]
        why = pytest_slice.serves(params, manifest, tree, function)
        reasons[(why or "kept").split(" (")[0] if why and why.startswith(("dtype", "head dim")) else why or "kept"] += 1
    yield
    print(f"\ncollected {sum(reasons.values())}: " + ", ".join(f"{n} {why}" for why, n in reasons.most_common()))


if __name__ == "__main__":  # a pytest plugin, not a script: run directly, it says how it is used
    print(__doc__)
