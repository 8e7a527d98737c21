"""flashbuild: selective builds of FlashAttention-style CUDA kernels.

Importing flashbuild imports no torch: build() and load() pull in their stages when called.
"""

from __future__ import annotations

from .version import __version__

from .errors import BuildError, FlashbuildError, InvalidIndexError, SelectionError, VariantNotBuiltError

__all__ = ["__version__", "build", "load", "FlashbuildError", "SelectionError", "BuildError", "VariantNotBuiltError",
           "InvalidIndexError"]


def build(**kwargs):
    """Build a selection; returns a BuildResult (build_dir, extension, manifest, timings, key,
    module_name). Keywords: hdim, dtype, arch, direction, causal, features (e.g. ["local"], [] or
    "none"; default every feature), config (the selection) and debug, lineinfo, nvcc_flags, jobs,
    build_dir, launcher, verbose, compile_only (the build); source and profile pick an external kernel
    tree (e.g. source="./flash-attn-2.8.3", profile="flash-attn-2")."""
    from .pipeline import builder as _build
    return _build.build(*_build.parse_request(**_build.check_api_keywords(kwargs), keywords=True))


def load(**kwargs):
    """Build the selection if needed, import the extension, and return it wrapped in flash-attn's
    API (flashbuild.api.AttentionOps: flash_attn_func, flash_attn_varlen_func,
    flash_attn_with_kvcache with autograd; .ext is the raw module, whose other functions pass through).
    Same keywords as build(); e.g. load(hdim=64, dtype="fp16", arch="sm90").

    With source= and profile= (an external tree, e.g. profile="flash-attn-2"), returns the tree's
    own Python package (flash_attn) imported with the slice's extension: its functions run the slice."""
    from . import api as _api
    from .pipeline import builder as _build
    selection, options = _build.parse_request(**_build.check_api_keywords(kwargs), keywords=True)
    module = _build.load(selection, options)
    if selection.builtin:
        return _api.wrap(module)
    from .pipeline import loader
    from .sources import profile as _profiles
    tree = _profiles.load(selection.profile)
    root = _profiles.Path(selection.source)
    plan = _build.make_plan(selection, options)
    return loader.load_package(plan.build_dir, [root / p for p in tree.python_path], tree.python_package,
                               plan.module_name)
