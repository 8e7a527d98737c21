"""How `flashbuild test` and `bench` call a build of an external tree: through the tree's own Python
API, behind the interface our checks use for our own extension (flash_attn_func returning out and
LSE, mha_bwd, mha_fwd_kvcache, variants, build_key).

For flash-attn 2 that is flash_attn.flash_attn_func (the backward through its autograd, as users
call it) and flash_attn.flash_attn_with_kvcache, imported from the tree with the slice's
flash_attn_2_cuda first on the path (pipeline/loader.py's load_package). For flash-attn 3 it is
hopper/flash_attn_interface's flash_attn_func, _flash_attn_backward and flash_attn_with_kvcache, with
the slice's _C picked up by the flash_attn_3 package generated into the build dir."""

from __future__ import annotations

from types import ModuleType
from typing import Any

from ..pipeline.plan import SPLITKV_KERNELS
from ..selection.variants import FEATURES, Variant


def _switch_features(manifest: dict) -> tuple[str, ...]:
    """The switch features of the build's profile (sources/switches.py)."""
    from ..sources import profile as profiles

    tree = profiles.load(manifest["profile"])
    return tree.switches.features if tree.switches is not None else ()


def slice_variants(manifest: dict) -> list[Variant]:
    """The variants a tree's build serves, for the checks: each unit on each of its archs, plus, when
    the build compiled in local and/or softcap, the same kernel again as the feature variant whose
    checks call it with windows and softcap (one TU serves both kinds of call in such trees)."""
    features = tuple(f for f in FEATURES if f in manifest["selection"]["features"])
    out = []
    for unit in manifest["units"]:
        if unit["causal"] is None:
            continue  # causal decided at runtime inside the TU: covered by the tu-per-causal trees only
        for arch in unit["archs"]:
            plain = Variant(unit["direction"], unit["hdim"], unit["dtype"], unit["causal"], arch)
            out.append(plain)
            if features:
                out.append(Variant(plain.direction, plain.hdim, plain.dtype, plain.causal, arch, features))
    return sorted(set(out), key=Variant.sort_key)


def _lacks(function, name: str) -> bool:
    """Whether `function` (of a tree's Python API) has no parameter `name`: false when it takes **kwargs,
    has no signature or is not there (then the newest release's API is assumed)."""
    import inspect

    try:
        parameters = inspect.signature(function).parameters if function is not None else None
    except (TypeError, ValueError):  # a builtin without a signature
        parameters = None
    if parameters is None or any(p.kind is p.VAR_KEYWORD for p in parameters.values()):
        return False
    return name not in parameters


class FlashAttn2Slice:
    """Our checks' calls, made through flash-attn 2's Python functions."""

    def __init__(self, package: ModuleType, manifest: dict):
        self.package = package
        self.manifest = manifest
        self.interface = package.flash_attn_interface  # the tree's flash_attn_interface module
        # the slice's flash_attn_2_cuda (imported as flash_attn_cuda before 2.7)
        self.ext = getattr(self.interface, "flash_attn_gpu", None) or getattr(self.interface, "flash_attn_cuda", None)
        # What the release's Python API lacks (configs/profiles/releases/flash-attn-2/): softcap before 2.6,
        # the backward's window as two ints before 2.7, the KV-cache call's LSE before 2.6.
        backward = getattr(self.interface, "_flash_attn_backward", None)
        self._no_softcap = _lacks(self.interface.flash_attn_func, "softcap")
        self._window_pair = _lacks(backward, "window_size_left") and not _lacks(backward, "window_size")
        self._no_cache_lse = _lacks(getattr(self.interface, "flash_attn_with_kvcache", None), "return_softmax_lse")

    def _softcap(self, softcap: float) -> dict:
        if not self._no_softcap:
            return {"softcap": softcap}
        if softcap:
            raise ValueError(f"softcap={softcap}: this release of flash-attn has no softcap (it came with 2.6)")
        return {}

    def variants(self) -> list[str]:
        return [v.name for v in slice_variants(self.manifest)]

    def outside(self, variant: Variant, shape) -> str | None:
        """Why a check's call takes a switch branch the slice compiled out (docs/switches.md), or None:
        the tree's API runs a causal call with one query row (and no window) not causal; a split-KV check
        splits the keys (feature split) and may append to the cache (feature appendkv); flash-attn 3's
        backward of a GQA/MQA shape needs feature gqa."""
        selection = self.manifest["selection"]
        if variant.causal and selection.get("causal") == "on" and shape.seqlen_q == 1 and shape.window == (-1, -1):
            return ("one query row: the tree's API runs this causal call not causal, a branch this slice (--causal on) "
                    "compiles out")
        if variant.direction == "splitkv":
            for feature, needed in (("split", True), ("appendkv", shape.cache is not None and shape.cache.seqlen_new)):
                if needed and feature not in selection["features"] and feature in _switch_features(self.manifest):
                    return f"the call needs feature {feature}, which this slice compiles out"
        if variant.direction == "bwd" and shape.nheads != shape.nheads_k and "gqa" not in selection["features"] \
                and "gqa" in _switch_features(self.manifest):  # flash-attn 3's backward GQA site
            return ("a backward with fewer K/V heads than query heads (GQA/MQA) needs feature gqa, which this slice "
                    "compiles out")
        return None

    # What the slice's own errors say when a forward reached the split-KV kernels it leaves out: the stub
    # of a missing split-KV direction (pipeline/plan.py's tree_context) and the Split switch's compiled-out branch
    # (sources/switches.py's miss_message).
    SPLIT_MISSES = ("holds no " + SPLITKV_KERNELS + " kernel", "(feature split left out)")

    def outside_call(self, variant: Variant, shape, exc: BaseException) -> str | None:
        """Why a forward check raised the slice's named error for a kernel the tree's API picked at run
        time, or None: flash_api.cpp's num_splits heuristic runs a forward with few query blocks (a small
        batch, few heads) on the split-KV kernels, which a slice without direction splitkv or feature split
        leaves out. Which shapes split depends on the GPU's SM count, so it is read from the call's error."""
        text = str(exc).strip()
        if variant.direction != "fwd" or not isinstance(exc, RuntimeError) or "flashbuild slice" not in text \
                or not any(miss in text for miss in self.SPLIT_MISSES):
            return None
        return ("the tree's API ran this forward on its split-KV kernels (flash_api.cpp's num_splits heuristic: few "
                f"query blocks), which this slice leaves out; the slice's error: {text.splitlines()[0][:400]}")

    def features(self) -> list[str]:
        return list(self.manifest["selection"]["features"])

    def build_key(self) -> str:
        return self.manifest["key"]

    @staticmethod
    def _window(window_size_left: int = -1, window_size_right: int = -1) -> tuple[int, int]:
        return (window_size_left, window_size_right)

    def flash_attn_func(self, q, k, v, causal: bool = False, return_lse: bool = False, softcap: float = 0.0,
                        **window: Any):
        out, lse, _ = self.interface.flash_attn_func(q, k, v, causal=causal, window_size=self._window(**window),
                                                     return_attn_probs=True, **self._softcap(softcap))
        return (out, lse) if return_lse else out

    def mha_bwd(self, dout, q, k, v, out, lse, causal: bool = False, softcap: float = 0.0, **window: Any):
        """dq, dk, dv from the given out and lse through the tree's backward op (as flash_attn_func's
        autograd calls it); a head dim the API pads (not a multiple of 8) goes through the autograd
        of flash_attn_func instead, whose forward then runs again."""
        import torch

        left, right = self._window(**window)
        if q.shape[-1] % 8 == 0 and not self._window_pair:  # 2.7 on; before: through autograd
            dq, dk, dv = torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)
            self.interface._flash_attn_backward(dout, q, k, v, out, lse, dq, dk, dv, 0.0, q.shape[-1] ** -0.5,
                                                causal, left, right, softcap, None, False, None)
            return dq, dk, dv
        leaves = [t.detach().clone().requires_grad_() for t in (q, k, v)]
        with torch.enable_grad():
            result = self.interface.flash_attn_func(*leaves, causal=causal, window_size=self._window(**window),
                                                    **self._softcap(softcap))
            return torch.autograd.grad(result, leaves, dout)

    def mha_fwd_kvcache(self, q, k_cache, v_cache, cache_seqlens=None, causal: bool = False, num_splits: int = 0,
                        softcap: float = 0.0, window_size_left: int = -1, window_size_right: int = -1, **cache: Any):
        import torch

        if cache_seqlens is None:  # the whole cache, as our binding reads a call without lengths
            cache_seqlens = torch.full((q.shape[0],), k_cache.shape[1], dtype=torch.int32, device=q.device)
        if self._no_cache_lse:
            raise ValueError("this release of flash-attn's flash_attn_with_kvcache returns no LSE (it does from 2.6), "
                             "which the split-KV checks compare: check its forward and backward slices alone "
                             "(--direction fwd,bwd)")
        return self.interface.flash_attn_with_kvcache(
            q, k_cache, v_cache, cache_seqlens=cache_seqlens, causal=causal, num_splits=num_splits, softcap=softcap,
            window_size=(window_size_left, window_size_right), return_softmax_lse=True, **cache)


def fa3_slice_variants(manifest: dict) -> list[Variant]:
    """The variants a flash-attn 3 build serves, for the checks: each kernel unit decides causal at
    runtime, and serves the causal values the selection keeps (its switch overlay narrows the rest out);
    local windows and softcap when the build holds them: the feature variants call the same kernels with
    windows (and softcap). Support units (scheduler, combine) are no variant."""
    selection = manifest["selection"]
    features = tuple(f for f in ("local", "softcap") if f in selection["features"])
    causal_values = {"on": (True,), "off": (False,)}.get(selection.get("causal"), (False, True))
    out = set()
    for unit in manifest["units"]:
        if unit["direction"] not in ("fwd", "bwd") or unit["features"] or unit["hdim"] not in manifest["selection"]["hdim"]:
            continue  # a support TU; the same kernel with paged / split / softcap / packgqa on; a backward
            # of another head dim that only calls with a larger V head dim run on (feature hdimv)
        for arch in unit["archs"]:
            for causal in causal_values:
                plain = Variant(unit["direction"], unit["hdim"], unit["dtype"], causal, arch)
                out.update({plain, Variant(plain.direction, plain.hdim, plain.dtype, causal, arch, features)}
                           if features else {plain})
    return sorted(out, key=Variant.sort_key)


class FlashAttn3Slice(FlashAttn2Slice):
    """Our checks' calls, made through flash-attn 3's Python functions in the tree's
    hopper/flash_attn_interface.py (what upstream's tests import; the flash_attn_3 package itself
    holds only a version): flash_attn_func for the forward, its _flash_attn_backward op (as the
    autograd function calls it) for the backward, flash_attn_with_kvcache for cache calls."""

    def __init__(self, package: ModuleType, manifest: dict):
        import importlib

        self.package = package
        self.manifest = manifest
        # imports flash_attn_3._C: the slice's, through the package generated into the build dir
        self.interface = importlib.import_module("flash_attn_interface")
        # torch.ops.flash_attn_3, registered by the slice's _C (named flash_attn_3_cuda before the stable ABI)
        self.ext = getattr(self.interface, "flash_attn_3_gpu", None) or getattr(self.interface, "flash_attn_3_cuda", None)
        # hopper/ of the 2.8 tags (3.0.0b1): flash_attn_func returns out alone, the backward takes one window tuple
        backward = getattr(self.interface, "_flash_attn_backward", None)
        self._out_only = _lacks(self.interface.flash_attn_func, "return_attn_probs")
        self._window_pair = _lacks(backward, "window_size_left") and not _lacks(backward, "window_size")

    def variants(self) -> list[str]:
        return [v.name for v in fa3_slice_variants(self.manifest)]

    def flash_attn_func(self, q, k, v, causal: bool = False, return_lse: bool = False, softcap: float = 0.0,
                        **window: Any):
        if not self._out_only:
            out, lse = self.interface.flash_attn_func(q, k, v, causal=causal, window_size=self._window(**window),
                                                      softcap=softcap, return_attn_probs=True)
        else:  # hopper/ of the 2.8 tags (3.0.0b1): flash_attn_func returns out alone; its forward op both
            out, lse, *_ = self.interface._flash_attn_forward(q, k, v, *[None] * 20, q.shape[-1] ** -0.5, causal,
                                                              window_size=self._window(**window), softcap=softcap)
        # A row that sees no key: FA3 writes LSE -inf, flashbuild's contract (and FA2) +inf.
        return (out, lse.masked_fill(lse == float("-inf"), float("inf"))) if return_lse else out

    def mha_bwd(self, dout, q, k, v, out, lse, causal: bool = False, softcap: float = 0.0, **window: Any):
        """dq, dk, dv from the given out and lse, through the op flash_attn_func's autograd calls."""
        import torch

        left, right = self._window(**window)
        dq, dk, dv = torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)
        args = (dout, q, k, v, out, lse, None, None, None, None, None, None, dq, dk, dv, q.shape[-1] ** -0.5, causal)
        if self._window_pair:  # 3.0.0b1: the window as one tuple
            self.interface._flash_attn_backward(*args, (left, right), softcap)
        else:
            self.interface._flash_attn_backward(*args, left, right, softcap)
        return dq, dk, dv

    def mha_fwd_kvcache(self, q, k_cache, v_cache, cache_seqlens=None, causal: bool = False, num_splits: int = 0,
                        softcap: float = 0.0, window_size_left: int = -1, window_size_right: int = -1, **cache: Any):
        import torch

        if cache_seqlens is None:
            cache_seqlens = torch.full((q.shape[0],), k_cache.shape[1], dtype=torch.int32, device=q.device)
        out, lse, *_ = self.interface.flash_attn_with_kvcache(
            q, k_cache, v_cache, cache_seqlens=cache_seqlens, causal=causal, num_splits=num_splits, softcap=softcap,
            window_size=(window_size_left, window_size_right), return_softmax_lse=True, **cache)
        return out, lse


ADAPTERS = {"flash-attn-2": FlashAttn2Slice, "flash-attn-3": FlashAttn3Slice}


def wrap(adapter: str, package: ModuleType, manifest: dict):
    return ADAPTERS[adapter](package, manifest)
