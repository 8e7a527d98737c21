"""The checks of the arguments flash-attn's API takes, before any kernel runs (api.py's AttentionOps calls
them): features our kernels lack are UnsupportedFeatureError, a value flash-attn would refuse (or
misread) is InvalidArgumentError naming the argument, what was given and what to pass. Shapes, dtypes
and devices are the binding's checks. No `from __future__ import annotations`, as in api.py."""

import math
import numbers
import operator
from typing import Optional, Tuple

import torch
from torch import Tensor

from .errors import FlashbuildError


class UnsupportedFeatureError(FlashbuildError, NotImplementedError):
    """A flash-attn argument asking for a feature this build's kernels do not implement."""

    exit_code = 2


class InvalidArgumentError(FlashbuildError, ValueError):
    """A flash-attn argument of the wrong type or out of range (a negative softcap, a window that is
    not a pair of ints)."""

    exit_code = 2


def _unsupported(feature: str, asked: str, fix: str) -> UnsupportedFeatureError:
    return UnsupportedFeatureError(
        f"flashbuild: {feature} is not supported by this build's kernels (asked: {asked}); {fix}")


def _contiguous_last_dim(t: Tensor) -> Tensor:
    """The binding needs a unit stride in the head dim (other strides are free)."""
    return t if t.stride(-1) == 1 else t.contiguous()


def _int32_on(t: Tensor, device: torch.device) -> Tensor:
    """An index tensor as the binding takes it: contiguous int32 on q's device (no copy if it is)."""
    return t.to(device=device, dtype=torch.int32).contiguous()


def _check_common(dropout_p: float, alibi_slopes) -> None:
    if dropout_p != 0.0:
        raise _unsupported("dropout", f"dropout_p={dropout_p}", "pass dropout_p=0.0")
    if alibi_slopes is not None:
        raise _unsupported("ALiBi", f"alibi_slopes={_describe(alibi_slopes)}", "pass alibi_slopes=None")


def _as_int(value) -> Optional[int]:
    """An int (or numpy int) as an int; None for floats, bools and anything else."""
    if isinstance(value, bool):
        return None
    try:
        return operator.index(value)
    except TypeError:
        return None


def _softmax_scale(softmax_scale) -> Optional[float]:
    """flash-attn's softmax_scale: None (1/sqrt(head_dim)) or a finite number."""
    if softmax_scale is None:
        return None
    fix = "pass softmax_scale=None (1/sqrt(head_dim)) or a finite number, e.g. softmax_scale=0.125"
    if isinstance(softmax_scale, bool) or not isinstance(softmax_scale, numbers.Real):
        raise InvalidArgumentError(f"flashbuild: softmax_scale={softmax_scale!r}: not a number; {fix}")
    if not math.isfinite(softmax_scale):
        raise InvalidArgumentError(f"flashbuild: softmax_scale={softmax_scale!r}: not finite (every output would be "
                                   f"NaN); {fix}")
    return float(softmax_scale)


def _index_arg(name: str, value, int_ok: bool = False):
    """An index argument of flash_attn_with_kvcache: None, an integer tensor (or an int for
    cache_seqlens), as flash-attn takes them; a list would be a host copy each call, so it is refused."""
    if value is None or (isinstance(value, Tensor) and not value.is_floating_point() and not value.is_complex()
                         and value.dtype != torch.bool):
        return value
    if int_ok and _as_int(value) is not None:
        return _as_int(value)
    what = "an int or an int tensor (batch,)" if int_ok else "an int tensor"
    example = (f"torch.tensor({value!r}, dtype=torch.int32, device=q.device)" if isinstance(value, (list, tuple))
               else "a torch.int32 tensor on q's device")
    raise InvalidArgumentError(f"flashbuild: flash_attn_with_kvcache: {name}={_describe(value)[:80]}: expected {what} "
                               f"(as flash-attn); pass {example}")


def _window(window_size) -> Tuple[int, int]:
    """(left, right) of flash-attn's window_size: two ints, each -1 (unbounded on that side) or >= 0."""
    fix = ("pass window_size=(left, right): ints, each -1 (unbounded) or >= 0, e.g. window_size=(256, 0); "
           "(-1, -1) is no window")
    try:
        left, right = window_size
    except (TypeError, ValueError):
        raise InvalidArgumentError(f"flashbuild: window_size={window_size!r}: not a pair (left, right); {fix}") from None
    sides = [_as_int(left), _as_int(right)]
    for given, side in zip((left, right), sides):
        if side is None:
            raise InvalidArgumentError(f"flashbuild: window_size={window_size!r}: {given!r} is not an int; {fix}")
    if min(sides) < -1:
        raise InvalidArgumentError(f"flashbuild: window_size={tuple(sides)}: {min(sides)} is below -1; {fix}")
    return sides[0], sides[1]


def _softcap(softcap) -> float:
    """flash-attn's softcap: a finite float >= 0, 0 meaning off."""
    fix = "pass softcap=0.0 (off) or a positive cap, e.g. softcap=30.0"
    if isinstance(softcap, bool) or not isinstance(softcap, numbers.Real):
        raise InvalidArgumentError(f"flashbuild: softcap={softcap!r}: not a number; {fix}")
    if not math.isfinite(softcap) or softcap < 0:
        raise InvalidArgumentError(f"flashbuild: softcap={softcap!r}: must be a finite number >= 0 "
                                   f"(scores become softcap * tanh(scores / softcap)); {fix}")
    return float(softcap)


def _deterministic(deterministic) -> bool:
    """flash-attn's deterministic: a bool; True makes the backward bit-identical from run to run."""
    if isinstance(deterministic, bool):
        return deterministic
    raise InvalidArgumentError(f"flashbuild: deterministic={deterministic!r}: not a bool; pass deterministic=True "
                               f"(a bit-identical backward, slower) or deterministic=False")


def _check_kvcache_args(k_cache, v_cache, k, v, rotary_cos, rotary_sin, cache_seqlens, cache_batch_idx, cache_leftpad,
                        block_table, rotary_interleaved) -> None:
    """flash-attn's rules for combining the KV-cache arguments, before any kernel runs (the binding
    checks shapes, dtypes and devices)."""
    def invalid(message: str) -> InvalidArgumentError:
        return InvalidArgumentError(f"flashbuild: flash_attn_with_kvcache: {message}")

    if (k is None) != (v is None):
        given, missing = ("k", "v") if v is None else ("v", "k")
        raise invalid(f"{given}= was given without {missing}=: new keys and values are appended together; pass both "
                      f"(batch, seqlen_new, nheads_k, head_dim), or neither")
    if (rotary_cos is None) != (rotary_sin is None):
        given, missing = ("rotary_cos", "rotary_sin") if rotary_sin is None else ("rotary_sin", "rotary_cos")
        raise invalid(f"{given}= was given without {missing}=; pass both (seqlen_ro, rotary_dim / 2), or neither")
    if rotary_cos is not None and k is None:
        raise invalid("rotary_cos/rotary_sin rotate the appended keys and q, so they need k= and v= (flash-attn's "
                      "rule); without new keys, rotate q yourself and pass rotary_cos=None, rotary_sin=None")
    if not isinstance(rotary_interleaved, bool):
        raise invalid(f"rotary_interleaved={rotary_interleaved!r}: pass True (GPT-J pairs) or False (GPT-NeoX halves)")
    if block_table is not None and (cache_batch_idx is not None or cache_leftpad is not None):
        other = "cache_batch_idx" if cache_batch_idx is not None else "cache_leftpad"
        raise invalid(f"a paged cache (block_table) does not take {other} (flash-attn does not either): the block "
                      f"table already says where each row's keys are; pass {other}=None")
    if k is None:
        return
    if cache_seqlens is None:
        raise invalid("appending k and v needs cache_seqlens (where each row's new keys go); pass cache_seqlens= "
                      "(an int, or an int tensor (batch,))")
    if k_cache.stride(-1) != 1 or v_cache.stride(-1) != 1:
        raise invalid("k_cache and v_cache must have a unit stride in the head dim to be appended to in place (a "
                      "contiguous copy would receive the new keys instead); allocate them with one")
    capacity = k_cache.shape[1] * (block_table.shape[1] if block_table is not None else 1)
    if isinstance(cache_seqlens, int) and not 0 <= cache_seqlens <= capacity - k.shape[1]:
        raise invalid(f"cache_seqlens={cache_seqlens} plus {k.shape[1]} new keys does not fit the cache's "
                      f"{capacity} positions; pass 0 <= cache_seqlens <= {capacity - k.shape[1]}, or a larger cache")


def _describe(value) -> str:
    if isinstance(value, Tensor):
        return f"tensor of shape {tuple(value.shape)}"
    return repr(value)
