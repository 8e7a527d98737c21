"""flash-attn's Python API over a loaded extension: autograd, torch.compile, clear errors.

flashbuild.load() returns an AttentionOps. Its flash_attn_func, flash_attn_varlen_func and
flash_attn_with_kvcache take flash-attn's argument names, order and shapes, so switching an import
line is enough. Each call goes through torch.library custom ops, registered once per extension
under the namespace of its module name (`_flashbuild_<hash>`; a build rebuilt after this process
loaded it is `_flashbuild_<hash>_<digest>`: pipeline/loader.py), so two loaded builds never share an
op. The ops carry fake implementations (exact output shapes, dtypes and strides, for
torch.compile(fullgraph=True) and FakeTensorMode) and autograd formulas that run our backward
kernels. Every other attribute (variants(), build_key(), mha_bwd, ...) is the raw extension's;
`.ext` is the raw module.

What the wrapper adds to the raw functions:
- window_size (local attention) and softcap reach the kernels: they are checked here for their
  types and ranges (a pair of ints, each -1 or >= 0; a finite float >= 0), and passed to every
  raw function as window_size_left, window_size_right and softcap keywords. Whether the build
  holds them is the binding's call: a build with a feature compiled out (--no-local,
  --no-softcap) raises VariantNotBuiltError from the binding, naming the rebuild command.
- deterministic=True (flash_attn_func, flash_attn_varlen_func) reaches the backward: the forward op
  carries it (unused there) so that its autograd formula passes it to the backward op, which passes
  deterministic=True to the raw mha_bwd / mha_varlen_bwd (a default call passes nothing, so a binding
  from before the flag still serves it; one that lacks it raises VariantNotBuiltError when asked).
  The kernels then add dQ in a fixed order: bit-identical gradients from run to run.
- Features our kernels lack (dropout, ALiBi) raise UnsupportedFeatureError instead of being ignored.
- flash_attn_with_kvcache takes all of flash-attn 2's KV-cache arguments: k/v appended to the cache
  in place (so its op declares k_cache and v_cache mutated), rotary_cos/rotary_sin,
  cache_batch_idx, cache_leftpad and a paged cache (block_table). Combinations flash-attn refuses
  (rotary without k/v, k without v or cache_seqlens, block_table with cache_batch_idx or
  cache_leftpad) and an int cache_seqlens that leaves no room for k are InvalidArgumentError here,
  before any kernel; shapes, dtypes and devices are the binding's checks.
- The LSE output carries no gradient (as in flash-attn, whose backward ignores it): it is marked
  non-differentiable, so a loss of the LSE alone says "does not require grad" instead of returning
  a wrong zero gradient.
- Outputs are contiguous, as the fake implementations declare them (the binding returns a
  narrowed view for a head dim that runs on a bigger kernel, padded).
- A raw function a build's binding lacks (an extension built before it existed) is a
  VariantNotBuiltError naming the build and how to rebuild it, at call time.
- No call synchronizes with the host (docs/serving.md): index values (cache_seqlens, cache_batch_idx,
  cache_leftpad, block_table, cu_seqlens) are checked on the device, where the kernels clamp a bad one
  and record it; the next call on that device raises it as InvalidIndexError naming the argument, the
  row and the value, and check_errors() raises it after synchronizing. So every call can be captured in
  a CUDA graph (torch.cuda.graph) and replayed with new inputs in the same tensors.

No `from __future__ import annotations` here: torch.library reads the ops' schemas from their
annotations at runtime, and only typing.Optional/Tuple spell them on every torch since 2.4.
"""

import functools
import inspect
import re
import threading
from types import ModuleType
from typing import Any, Optional, Tuple

import torch
from torch import Tensor

# The argument checks and their error types live in api_args.py; flashbuild.api.InvalidArgumentError and
# flashbuild.api.UnsupportedFeatureError stay importable from here.
from .api_args import (InvalidArgumentError, UnsupportedFeatureError, _check_common, _check_kvcache_args,  # noqa: F401
                       _contiguous_last_dim, _deterministic, _index_arg, _int32_on, _softcap, _softmax_scale,
                       _unsupported, _window)
from .errors import FlashbuildError, VariantNotBuiltError


# ---------------------------------------------------------------- the custom ops of one extension

def namespace_of(ext: Any) -> str:
    """The torch.library namespace of an extension: its module name, e.g. `_flashbuild_3f2a...`."""
    name = getattr(ext, "__name__", None)
    if not name:
        raise TypeError(f"flashbuild: {ext!r} has no __name__, so its ops would have no namespace; pass namespace=")
    return re.sub(r"\W", "_", name.rsplit(".", 1)[-1])


def _build_key(ext: Any) -> str:
    return ext.build_key() if hasattr(ext, "build_key") else getattr(ext, "__name__", "?")


def _raw(ext: Any, name: str, what: str):
    """The raw extension function `name`, or a VariantNotBuiltError saying which build lacks it."""
    fn = getattr(ext, name, None)
    if fn is None:
        key = _build_key(ext)
        raise VariantNotBuiltError(
            f"flashbuild: build {key} has no {what}: its binding has no {name}() (it was built before "
            f"flashbuild had it); remove it with `flashbuild clean {key}` and build the selection again")
    return fn


def _takes_keyword(fn: Any, keyword: str) -> bool:
    """Whether a raw function takes `keyword`: a Python function by its signature, a pybind11 one by the
    signature pybind11 writes as the first line of its docstring ("mha_bwd(dout: torch.Tensor, ...)")."""
    try:
        return keyword in inspect.signature(fn).parameters
    except (TypeError, ValueError):  # a builtin without a text signature
        first_line = (getattr(fn, "__doc__", None) or "").split("\n", 1)[0]
        return re.search(rf"\b{keyword}\s*:", first_line) is not None


def _raw_deterministic(ext: Any, name: str, what: str):
    """The raw backward `name` for a deterministic call, or a VariantNotBuiltError if its binding
    predates the deterministic= keyword."""
    fn = _raw(ext, name, what)
    if not _takes_keyword(fn, "deterministic"):
        key = _build_key(ext)
        raise VariantNotBuiltError(
            f"flashbuild: build {key} has no deterministic {what}: its binding's {name}() takes no "
            f"deterministic= (it was built before flashbuild had it); remove it with `flashbuild clean {key}` "
            f"and build the selection again, or call with deterministic=False")
    return fn


class _Ops:
    """The five custom ops of one extension (OpOverloads: what torch.compile records in a graph)."""

    def __init__(self, namespace: str, ext: Any):
        self.namespace = namespace
        self.ext = ext
        self._defs = _define(namespace, ext)  # the CustomOpDefs own the registrations: keep them alive
        ops = getattr(torch.ops, namespace)
        self.fwd = ops.fwd.default
        self.bwd = ops.bwd.default
        self.varlen_fwd = ops.varlen_fwd.default
        self.varlen_bwd = ops.varlen_bwd.default
        self.fwd_kvcache = ops.fwd_kvcache.default


def _define(ns: str, ext: Any) -> list:
    """Registers {ns}::fwd, bwd, varlen_fwd, varlen_bwd, fwd_kvcache: the real impl calls `ext`,
    the fake impl declares the outputs, and autograd wires each forward to its backward."""
    op = torch.library.custom_op

    # ------------------------------------------------ dense: (batch, seqlen, nheads, head_dim)
    # Every op has the same three arguments, passed to the raw functions as keywords:
    # window_size_left, window_size_right (-1: unbounded on that side) and softcap (0: off). The
    # training ops (fwd, bwd, varlen_*) end in deterministic (default False): the forwards only carry
    # it to their backward; a backward passes deterministic=True to the raw function when it is set.
    def features(window_size_left, window_size_right, softcap):
        return dict(window_size_left=window_size_left, window_size_right=window_size_right, softcap=softcap)

    def raw_bwd(name, what, deterministic):
        if deterministic:
            return functools.partial(_raw_deterministic(ext, name, what), deterministic=True)
        return _raw(ext, name, what)

    @op(f"{ns}::fwd", mutates_args=())
    def fwd(q: Tensor, k: Tensor, v: Tensor, causal: bool, softmax_scale: Optional[float], window_size_left: int,
            window_size_right: int, softcap: float, deterministic: bool = False) -> Tuple[Tensor, Tensor]:
        out, lse = _raw(ext, "flash_attn_func", "forward")(
            q, k, v, causal=causal, softmax_scale=softmax_scale, return_lse=True,
            **features(window_size_left, window_size_right, softcap))
        return out.contiguous(), lse.contiguous()

    @fwd.register_fake
    def _(q, k, v, causal, softmax_scale, window_size_left, window_size_right, softcap, deterministic=False):
        batch, seqlen_q, nheads, _ = q.shape
        return (q.new_empty((batch, seqlen_q, nheads, v.shape[-1])),
                q.new_empty((batch, nheads, seqlen_q), dtype=torch.float32))

    @op(f"{ns}::bwd", mutates_args=())
    def bwd(dout: Tensor, q: Tensor, k: Tensor, v: Tensor, out: Tensor, lse: Tensor, causal: bool,
            softmax_scale: Optional[float], window_size_left: int, window_size_right: int,
            softcap: float, deterministic: bool = False) -> Tuple[Tensor, Tensor, Tensor]:
        dq, dk, dv = raw_bwd("mha_bwd", "backward", deterministic)(
            dout, q, k, v, out, lse, causal=causal, softmax_scale=softmax_scale,
            **features(window_size_left, window_size_right, softcap))
        return dq.contiguous(), dk.contiguous(), dv.contiguous()

    @bwd.register_fake
    def _(dout, q, k, v, out, lse, causal, softmax_scale, window_size_left, window_size_right, softcap,
          deterministic=False):
        return q.new_empty(q.shape), k.new_empty(k.shape), v.new_empty(v.shape)

    def fwd_setup(ctx, inputs, output):
        (q, k, v, ctx.causal, ctx.softmax_scale, ctx.window_size_left, ctx.window_size_right, ctx.softcap,
         ctx.deterministic) = inputs
        out, lse = output
        ctx.save_for_backward(q, k, v, out, lse)
        ctx.mark_non_differentiable(lse)

    def fwd_backward(ctx, dout, _dlse):
        q, k, v, out, lse = ctx.saved_tensors
        dq, dk, dv = bwd(dout.contiguous(), q, k, v, out, lse, ctx.causal, ctx.softmax_scale,
                         ctx.window_size_left, ctx.window_size_right, ctx.softcap, ctx.deterministic)
        return dq, dk, dv, None, None, None, None, None, None

    fwd.register_autograd(fwd_backward, setup_context=fwd_setup)
    # A gradient of a gradient (create_graph=True, then backward again) is no kernel of ours: our
    # error, naming what is supported, rather than torch's "no autograd formula".
    bwd.register_autograd(_no_double_backward, setup_context=_no_setup)

    # ------------------------------------------------ varlen: packed (total_tokens, nheads, head_dim)
    @op(f"{ns}::varlen_fwd", mutates_args=())
    def varlen_fwd(q: Tensor, k: Tensor, v: Tensor, cu_seqlens_q: Tensor, cu_seqlens_k: Tensor, max_seqlen_q: int,
                   max_seqlen_k: int, causal: bool, softmax_scale: Optional[float], window_size_left: int,
                   window_size_right: int, softcap: float, deterministic: bool = False) -> Tuple[Tensor, Tensor]:
        out, lse = _raw(ext, "mha_varlen_fwd", "variable-length forward")(
            q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, causal=causal,
            softmax_scale=softmax_scale, **features(window_size_left, window_size_right, softcap))
        return out.contiguous(), lse.contiguous()

    @varlen_fwd.register_fake
    def _(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, causal, softmax_scale, window_size_left,
          window_size_right, softcap, deterministic=False):
        total_q, nheads, _ = q.shape
        return (q.new_empty((total_q, nheads, v.shape[-1])),
                q.new_empty((nheads, total_q), dtype=torch.float32))

    @op(f"{ns}::varlen_bwd", mutates_args=())
    def varlen_bwd(dout: Tensor, q: Tensor, k: Tensor, v: Tensor, out: Tensor, lse: Tensor, cu_seqlens_q: Tensor,
                   cu_seqlens_k: Tensor, max_seqlen_q: int, max_seqlen_k: int, causal: bool,
                   softmax_scale: Optional[float], window_size_left: int, window_size_right: int,
                   softcap: float, deterministic: bool = False) -> Tuple[Tensor, Tensor, Tensor]:
        dq, dk, dv = raw_bwd("mha_varlen_bwd", "variable-length backward", deterministic)(
            dout, q, k, v, out, lse, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, causal=causal,
            softmax_scale=softmax_scale, **features(window_size_left, window_size_right, softcap))
        return dq.contiguous(), dk.contiguous(), dv.contiguous()

    @varlen_bwd.register_fake
    def _(dout, q, k, v, out, lse, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, causal, softmax_scale,
          window_size_left, window_size_right, softcap, deterministic=False):
        return q.new_empty(q.shape), k.new_empty(k.shape), v.new_empty(v.shape)

    def varlen_setup(ctx, inputs, output):
        (q, k, v, cu_q, cu_k, ctx.max_seqlen_q, ctx.max_seqlen_k, ctx.causal, ctx.softmax_scale,
         ctx.window_size_left, ctx.window_size_right, ctx.softcap, ctx.deterministic) = inputs
        out, lse = output
        ctx.save_for_backward(q, k, v, out, lse, cu_q, cu_k)
        ctx.mark_non_differentiable(lse)

    def varlen_backward(ctx, dout, _dlse):
        q, k, v, out, lse, cu_q, cu_k = ctx.saved_tensors
        dq, dk, dv = varlen_bwd(dout.contiguous(), q, k, v, out, lse, cu_q, cu_k, ctx.max_seqlen_q,
                                ctx.max_seqlen_k, ctx.causal, ctx.softmax_scale, ctx.window_size_left,
                                ctx.window_size_right, ctx.softcap, ctx.deterministic)
        return (dq, dk, dv) + (None,) * 10

    varlen_fwd.register_autograd(varlen_backward, setup_context=varlen_setup)
    varlen_bwd.register_autograd(_no_double_backward, setup_context=_no_setup)

    # ------------------------------------------------ decode: q against a KV cache (forward only)
    # k, v (new keys and values) are written into k_cache and v_cache in place: the op mutates them.
    @op(f"{ns}::fwd_kvcache", mutates_args=("k_cache", "v_cache"))
    def fwd_kvcache(q: Tensor, k_cache: Tensor, v_cache: Tensor, k: Optional[Tensor], v: Optional[Tensor],
                    rotary_cos: Optional[Tensor], rotary_sin: Optional[Tensor], cache_seqlens: Optional[Tensor],
                    cache_batch_idx: Optional[Tensor], cache_leftpad: Optional[Tensor], block_table: Optional[Tensor],
                    causal: bool, softmax_scale: Optional[float], rotary_interleaved: bool, num_splits: int,
                    window_size_left: int, window_size_right: int, softcap: float) -> Tuple[Tensor, Tensor]:
        return _fwd_kvcache_raw(ext, q, k_cache, v_cache, k, v, rotary_cos, rotary_sin, cache_seqlens,
                                cache_batch_idx, cache_leftpad, block_table, causal, softmax_scale,
                                rotary_interleaved, num_splits, window_size_left, window_size_right, softcap)

    @fwd_kvcache.register_fake
    def _(q, k_cache, v_cache, k, v, rotary_cos, rotary_sin, cache_seqlens, cache_batch_idx, cache_leftpad,
          block_table, causal, softmax_scale, rotary_interleaved, num_splits, window_size_left, window_size_right,
          softcap):
        batch, seqlen_q, nheads, _ = q.shape
        return (q.new_empty((batch, seqlen_q, nheads, v_cache.shape[-1])),
                q.new_empty((batch, nheads, seqlen_q), dtype=torch.float32))

    # No autograd formula: torch.library takes none for an op that mutates its inputs. The wrapper
    # turns a backward through the output into a clear UnsupportedFeatureError (_forward_only).

    return [fwd, bwd, varlen_fwd, varlen_bwd, fwd_kvcache]


def _fwd_kvcache_raw(ext, q, k_cache, v_cache, k, v, rotary_cos, rotary_sin, cache_seqlens, cache_batch_idx,
                     cache_leftpad, block_table, causal, softmax_scale, rotary_interleaved, num_splits,
                     window_size_left, window_size_right, softcap) -> Tuple[Tensor, Tensor]:
    """The fwd_kvcache op's body: the raw binding call, with only the arguments a call uses as keywords (a call
    without them reaches a binding from before them as before)."""
    cache_kwargs = {name: t for name, t in (("k", k), ("v", v), ("rotary_cos", rotary_cos),
                                            ("rotary_sin", rotary_sin), ("cache_batch_idx", cache_batch_idx),
                                            ("cache_leftpad", cache_leftpad), ("block_table", block_table))
                    if t is not None}
    if rotary_cos is not None:
        cache_kwargs["rotary_interleaved"] = rotary_interleaved
    out, lse = _raw(ext, "mha_fwd_kvcache", "KV-cache (split-KV) forward")(
        q, k_cache, v_cache, cache_seqlens, causal=causal, softmax_scale=softmax_scale, num_splits=num_splits,
        window_size_left=window_size_left, window_size_right=window_size_right, softcap=softcap, **cache_kwargs)
    return out.contiguous(), lse.contiguous()


# flash_attn_with_kvcache's default window, by identity: a call that leaves window_size out may take the plain
# decoding path (_plain_decode) without _window's checks.
_NO_WINDOW = (-1, -1)

# Whether plain decoding calls take _plain_decode (True, the default). benchmarks/decode/decode_table.py --host-ab turns
# it off for a column, to time the checks it skips (with FLASHBUILD_SPLITKV_PATH=fresh-descriptors) beside it.
_DECODE_FAST_PATH = True


def _plain_decode(ext, q, k_cache, v_cache, cache_seqlens, softmax_scale, causal, softcap, num_splits):
    """(out, lse) of a plain decoding call made straight through the binding, or None for any call the checks of
    flash_attn_with_kvcache might change or refuse (it then takes them). A serving loop's step pays its host time in
    full when eager, and the checks cost more than the binding's launch (benchmarks/decode/README.md, "Host time of
    an eager call"). Plain: nothing appended, rotated, indexed or paged (the caller has checked those are None and
    window_size is the default), q and the caches plain tensors with a unit head-dim stride and no gradient, eager
    (_plain_eager), cache_seqlens None or already int32, contiguous and on q's device, the flags of the types the
    binding takes. Shapes, dtypes and devices are the binding's checks, as on the other path."""
    if type(softcap) is not float or softcap != 0.0 or type(causal) is not bool or type(num_splits) is not int:
        return None
    if type(q) is not Tensor or type(k_cache) is not Tensor or type(v_cache) is not Tensor:
        return None
    if q.stride(-1) != 1 or k_cache.stride(-1) != 1 or v_cache.stride(-1) != 1:
        return None
    if cache_seqlens is not None and (type(cache_seqlens) is not Tensor or cache_seqlens.dtype is not torch.int32
                                      or not cache_seqlens.is_contiguous()
                                      or cache_seqlens.get_device() != q.get_device()):
        return None
    if q.requires_grad or k_cache.requires_grad or v_cache.requires_grad or not _eager():
        return None
    # Positional: pybind11 matches keywords by name, a cost of its own at this rate. The LSE comes contiguous; out is a
    # view for a padded head dim.
    out, lse = _raw(ext, "mha_fwd_kvcache", "KV-cache (split-KV) forward")(
        q, k_cache, v_cache, cache_seqlens, causal, _softmax_scale(softmax_scale), num_splits, -1, -1, softcap)
    return out.contiguous(), lse


def _plain_eager(tensors) -> bool:
    """Whether a decode call may skip its custom op's dispatch and call the binding itself: eager (not traced
    by torch.compile, no torch function or dispatch mode active, so no FakeTensor), on plain tensors that need
    no gradient. The op's dispatch costs tens of microseconds a call (more than a small decode kernel), and
    does nothing more in such a call than the binding does, but bump the mutated caches' version counters,
    which the caller then does itself."""
    return _eager() and all(t is None or (type(t) is Tensor and not t.requires_grad) for t in tensors)


def _eager() -> bool:
    """Not traced by torch.compile, no torch function or dispatch mode active (so no FakeTensor)."""
    try:
        if torch.compiler.is_compiling() or torch._C._len_torch_dispatch_stack() or \
                torch._C._is_torch_function_mode_enabled():
            return False
        get_mode = torch._C._get_dispatch_mode
        for key in _INFRA_MODE_KEYS:
            if get_mode(key) is not None:
                return False
    except AttributeError:  # a torch without these: the op's path, always right
        return False
    return True


# The dispatch modes torch keeps off the user stack (FakeTensorMode, make_fx's proxy, functionalization).
_INFRA_MODE_KEYS = tuple(getattr(torch._C._TorchDispatchModeKey, name)
                         for name in ("FAKE", "PROXY", "FUNCTIONAL")
                         if hasattr(torch._C, "_TorchDispatchModeKey")
                         and hasattr(torch._C._TorchDispatchModeKey, name))


_registry: dict[str, _Ops] = {}
_registry_lock = threading.Lock()


def _ops_for(namespace: str, ext: Any) -> _Ops:
    """The ops of `namespace`, registered on first use. A namespace serves one extension for the
    life of the process: torch.library cannot unregister an op."""
    with _registry_lock:
        ops = _registry.get(namespace)
        if ops is None:
            ops = _registry[namespace] = _Ops(namespace, ext)
        elif ops.ext is not ext:
            raise FlashbuildError(
                f"flashbuild: the torch ops namespace {namespace!r} is already bound to another module "
                f"({ops.ext!r}); a module name serves one extension per process (flashbuild.load() gives a "
                f"rebuilt extension a module name of its own; for a module loaded otherwise, pass another "
                f"namespace=)")
        return ops


# ---------------------------------------------------------------- the user-facing wrapper

def _no_setup(ctx, inputs, output) -> None:
    pass


def _no_double_backward(ctx, *grads):
    raise _unsupported("a double backward (the gradient of a gradient)", "backward through the gradients of "
                       "flash_attn_func / flash_attn_varlen_func", "one backward is supported: call backward() "
                       "without create_graph=True, or take second derivatives through a reference attention")


class AttentionOps:
    """A loaded flashbuild extension with flash-attn's functions. Make one with wrap(ext)."""

    def __init__(self, ext: ModuleType, namespace: Optional[str] = None):
        self.ext = ext
        self.namespace = namespace or namespace_of(ext)
        self.ops = _ops_for(self.namespace, ext)

    def __getattr__(self, name: str):
        # Only reached for names the wrapper lacks: variants(), build_key(), mha_bwd, ...
        ext = self.__dict__.get("ext")
        if ext is None or name.startswith("__"):
            raise AttributeError(name)
        return getattr(ext, name)

    def __dir__(self):
        return sorted(set(super().__dir__()) | set(dir(self.ext)))

    def __repr__(self) -> str:
        return f"<flashbuild AttentionOps over {getattr(self.ext, '__name__', self.ext)!r}>"

    def check_errors(self, synchronize: bool = True, device=None) -> None:
        """Raises InvalidIndexError for a bad index value an earlier call's kernels found on the device
        (every call also checks at its start, without synchronizing). synchronize=True (the default)
        waits for the current stream's work first: call it after replaying a CUDA graph, or wherever a
        synchronisation is already paid for. device: an index or torch.device (default: the current)."""
        if isinstance(device, torch.device):
            device = device.index
        _raw(self.ext, "check_errors", "device-side index check")(device, synchronize)

    def flash_attn_func(self, q, k, v, dropout_p=0.0, softmax_scale=None, causal=False, window_size=(-1, -1),
                        softcap=0.0, alibi_slopes=None, deterministic=False, return_attn_probs=False, *,
                        return_lse=False):
        """Attention over q (batch, seqlen_q, nheads, head_dim), k and v (batch, seqlen_k, nheads_k,
        head_dim); nheads % nheads_k == 0; causal is aligned bottom-right. window_size=(left, right)
        lets query i see keys i + seqlen_k - seqlen_q - left .. i + seqlen_k - seqlen_q + right (-1:
        unbounded; causal sets right = 0); softcap > 0 caps the scores at softcap * tanh(s / softcap).
        deterministic=True makes the backward's gradients bit-identical from run to run (dQ is added
        in a fixed order; slower; on sm90 it runs on the Ampere-path backward).
        Returns out (like q), or (out, lse) with return_lse=True, or (out, lse, None) with
        return_attn_probs=True (no probabilities, as flash-attn without dropout); lse is
        (batch, nheads, seqlen_q) float32."""
        _check_common(dropout_p, alibi_slopes)
        deterministic = _deterministic(deterministic)
        window, softcap = _window(window_size), _softcap(softcap)
        softmax_scale = _softmax_scale(softmax_scale)
        q, k, v = (_contiguous_last_dim(t) for t in (q, k, v))
        out, lse = self.ops.fwd(q, k, v, causal, softmax_scale, *window, softcap, deterministic)
        if return_attn_probs:
            return out, lse, None
        return (out, lse) if return_lse else out

    def flash_attn_varlen_func(self, q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k,
                               dropout_p=0.0, softmax_scale=None, causal=False, window_size=(-1, -1), softcap=0.0,
                               alibi_slopes=None, deterministic=False, return_attn_probs=False):
        """Attention over packed sequences: q (total_q, nheads, head_dim), k and v (total_k,
        nheads_k, head_dim); sequence i is rows cu_seqlens[i]:cu_seqlens[i + 1] (int32, batch + 1).
        causal, window_size, softcap and deterministic as in flash_attn_func, per sequence. Returns out
        (like q), or (out, lse, None) with return_attn_probs=True; lse is (nheads, total_q) float32."""
        _check_common(dropout_p, alibi_slopes)
        deterministic = _deterministic(deterministic)
        window, softcap = _window(window_size), _softcap(softcap)
        softmax_scale = _softmax_scale(softmax_scale)
        q, k, v = (_contiguous_last_dim(t) for t in (q, k, v))
        out, lse = self.ops.varlen_fwd(q, k, v, _int32_on(cu_seqlens_q, q.device), _int32_on(cu_seqlens_k, q.device),
                                       max_seqlen_q, max_seqlen_k, causal, softmax_scale, *window, softcap,
                                       deterministic)
        return (out, lse, None) if return_attn_probs else out

    def flash_attn_with_kvcache(self, q, k_cache, v_cache, k=None, v=None, rotary_cos=None, rotary_sin=None,
                                cache_seqlens=None, cache_batch_idx=None, cache_leftpad=None, block_table=None,
                                softmax_scale=None, causal=False, window_size=_NO_WINDOW, softcap=0.0,
                                rotary_interleaved=True, alibi_slopes=None, num_splits=0,
                                return_softmax_lse=False):
        """Decode attention of q (batch, seqlen_q, nheads, head_dim) against the first
        cache_seqlens[b] rows of k_cache, v_cache (batch, seqlen_cache, nheads_k, head_dim);
        cache_seqlens is an int, an int tensor (batch,), or None (the whole cache). The split-KV
        kernel chooses its number of splits when num_splits=0. causal and window_size align to the
        bottom-right of each row's keys; softcap as in flash_attn_func. Returns out, or (out, lse) with
        return_softmax_lse=True; lse is (batch, nheads, seqlen_q) float32. Forward only. On sm90, a
        plain cache call (nothing appended or rotated, no cache_batch_idx or cache_leftpad, a
        block_table only at head dims 32-128, num_splits=0) of at least 128 queries runs the Hopper
        forward kernel when the build holds the forward variant (2.3x the split-KV kernel there:
        benchmarks/decode/README.md).

        flash-attn 2's cache arguments:
        - k, v (batch, seqlen_new, nheads_k, head_dim): written into k_cache/v_cache in place at rows
          cache_seqlens[b] .. cache_seqlens[b] + seqlen_new - 1, then attended to (row b sees
          cache_seqlens[b] + seqlen_new keys). cache_seqlens is not changed: advance it yourself. The
          cache must have room (an int cache_seqlens is checked here; a tensor's values on the device,
          raised as InvalidIndexError by the next call or check_errors()).
        - rotary_cos, rotary_sin (seqlen_ro >= the cache's positions, rotary_dim / 2), q's dtype: rotate
          the new keys at their positions, and q (not in place) at cache_seqlens[b] + i when causal or
          windowed, else every query at cache_seqlens[b]. rotary_interleaved=True pairs columns
          (2i, 2i + 1) (GPT-J), False pairs (i, i + rotary_dim / 2) (GPT-NeoX); columns from rotary_dim on
          pass through. Needs k and v.
        - cache_batch_idx (batch,): row b uses cache row cache_batch_idx[b].
        - cache_leftpad (batch,): row b's keys start at cache row cache_leftpad[b] (rotary positions stay
          cache positions).
        - block_table (batch, max_pages) with k_cache/v_cache (num_pages, page_size, nheads_k, head_dim):
          a paged cache; position p of row b is row p % page_size of page block_table[b, p // page_size].
          page_size must be a multiple of the split-KV key block (128 for head dims up to 128, else 64;
          flash-attn's 256 always works). Not with cache_batch_idx or cache_leftpad.
        Index tensors may be any integer dtype and device: they are passed as int32 on q's device (one on
        another device is a copy, which synchronizes: keep them on q's). num_splits=0 picks the split
        count from the shapes and the SM count alone (no device memory is read), so a captured call
        keeps its split count when cache_seqlens changes between replays. Bad index values are found on
        the device (check_errors)."""
        if (k is None and v is None and rotary_cos is None and rotary_sin is None and cache_batch_idx is None
                and cache_leftpad is None and block_table is None and alibi_slopes is None
                and window_size is _NO_WINDOW and type(rotary_interleaved) is bool and _DECODE_FAST_PATH):
            plain = _plain_decode(self.ext, q, k_cache, v_cache, cache_seqlens, softmax_scale, causal, softcap,
                                  num_splits)
            if plain is not None:
                return plain if return_softmax_lse else plain[0]
        _check_common(0.0, alibi_slopes)
        window, softcap = _window(window_size), _softcap(softcap)
        softmax_scale = _softmax_scale(softmax_scale)
        cache_seqlens = _index_arg("cache_seqlens", cache_seqlens, int_ok=True)
        cache_batch_idx, cache_leftpad, block_table = (_index_arg(n, t) for n, t in (
            ("cache_batch_idx", cache_batch_idx), ("cache_leftpad", cache_leftpad), ("block_table", block_table)))
        _check_kvcache_args(k_cache, v_cache, k, v, rotary_cos, rotary_sin, cache_seqlens, cache_batch_idx,
                            cache_leftpad, block_table, rotary_interleaved)
        q = _contiguous_last_dim(q)
        if k is None:  # read only: a copy with a unit head-dim stride serves as well
            k_cache, v_cache = _contiguous_last_dim(k_cache), _contiguous_last_dim(v_cache)
        else:
            k, v = _contiguous_last_dim(k), _contiguous_last_dim(v)
        if isinstance(cache_seqlens, int):
            cache_seqlens = torch.full((q.shape[0],), cache_seqlens, dtype=torch.int32, device=q.device)
        cache_seqlens, cache_batch_idx, cache_leftpad, block_table = (
            None if t is None else _int32_on(t, q.device)
            for t in (cache_seqlens, cache_batch_idx, cache_leftpad, block_table))
        rotary_cos, rotary_sin = (None if t is None else t.contiguous() for t in (rotary_cos, rotary_sin))
        args = (q, k_cache, v_cache, k, v, rotary_cos, rotary_sin, cache_seqlens, cache_batch_idx, cache_leftpad,
                block_table, causal, softmax_scale, rotary_interleaved, num_splits, *window, softcap)
        if _plain_eager(args[:11]):
            out, lse = _fwd_kvcache_raw(self.ext, *args)
            if k is not None:  # what the op's mutates_args does: autograd sees the caches changed
                torch.autograd.graph.increment_version(k_cache)
                torch.autograd.graph.increment_version(v_cache)
            return (out, lse) if return_softmax_lse else out
        out, lse = self.ops.fwd_kvcache(*args)
        out, lse = _forward_only(out), lse.detach()  # the LSE carries no gradient, as in flash_attn_func
        return (out, lse) if return_softmax_lse else out


def _no_backward(grad: Tensor) -> None:
    raise _unsupported("backward through flash_attn_with_kvcache", "a gradient of its output",
                       "it is a decode (inference) kernel: call it under torch.no_grad(), or use "
                       "flash_attn_func for training")


def _forward_only(out: Tensor) -> Tensor:
    """The KV-cache output: a backward through it raises UnsupportedFeatureError (a hook runs before
    torch's own error for an op without an autograd formula would)."""
    if out.requires_grad:
        out.register_hook(_no_backward)
    return out


_wrappers: dict[str, AttentionOps] = {}


def wrap(ext: Any, namespace: Optional[str] = None) -> AttentionOps:
    """The AttentionOps of an extension module (one per module: wrapping it again returns the same)."""
    if isinstance(ext, AttentionOps):
        return ext
    namespace = namespace or namespace_of(ext)
    with _registry_lock:
        wrapper = _wrappers.get(namespace)
    if wrapper is not None and wrapper.ext is ext:
        return wrapper
    wrapper = AttentionOps(ext, namespace)  # raises if the namespace serves another module
    with _registry_lock:
        return _wrappers.setdefault(namespace, wrapper)
