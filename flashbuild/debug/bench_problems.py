"""The benchmark standard as numbers: problem sizes (16k tokens per batch, model dim 2048), FLOPs
(exact under a local window), the backends compared, and parsing --seqlens and --window. Pure
functions: no GPU, no torch. The standard is written in benchmarks/README.md."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..selection.variants import Variant, feature_kwargs

TOKENS = 16384
MODEL_DIM = 2048
BWD_FLOP_FACTOR = 2.5
DEFAULT_SEQLENS = (1024, 2048, 4096, 8192, 16384)
DEFAULT_REPS = 30
WARMUP = 5
REGRESSION_PCT = 5.0  # a row this much slower than before is marked a regression
JSON_FORMAT = "flashbuild-bench"
OURS = "flashbuild"
SDPA_BACKENDS = {"sdpa-flash": "FLASH_ATTENTION", "sdpa-cudnn": "CUDNN_ATTENTION",
                 "sdpa-efficient": "EFFICIENT_ATTENTION"}
BACKENDS = (OURS, *SDPA_BACKENDS)
DIRECTIONS = ("fwd", "bwd")  # split-KV decoding needs decode shapes, not the 16k-token standard


# ---------------------------------------------------------------- problems and FLOPs

@dataclass(frozen=True)
class Problem:
    direction: str
    hdim: int
    dtype: str
    causal: bool
    seqlen: int
    batch: int
    nheads: int
    window: tuple[int, int] = (-1, -1)  # the calls' window_size; (-1, -1) is none
    softcap: float = 0.0

    def feature_kwargs(self) -> dict[str, Any]:
        """The raw functions' keywords for this problem's window and softcap (none for a plain one)."""
        return feature_kwargs(self.window, self.softcap)


def problem(variant: Variant, seqlen: int, window: tuple[int, int] = (-1, -1), softcap: float = 0.0) -> Problem:
    return Problem(variant.direction, variant.hdim, variant.dtype, variant.causal, seqlen,
                   batch=max(1, TOKENS // seqlen), nheads=max(1, MODEL_DIM // variant.hdim),
                   window=tuple(window), softcap=softcap)


def visible_pairs(seqlen_q: int, seqlen_k: int, causal: bool, window: tuple[int, int]) -> int:
    """How many (query, key) pairs the mask lets through: flash-attn's bottom-right rule, query i
    seeing keys i + seqlen_k - seqlen_q - left .. i + seqlen_k - seqlen_q + right (-1: unbounded;
    causal: right = 0), counted row by row."""
    left, right = window
    if causal:
        right = 0
    total = 0
    for i in range(seqlen_q):
        at = i + seqlen_k - seqlen_q
        first = max(0, at - left) if left >= 0 else 0
        last = min(seqlen_k - 1, at + right) if right >= 0 else seqlen_k - 1
        total += max(0, last - first + 1)
    return total


def flops(p: Problem) -> float:
    """The standard's count without a window; with one, 4 * d per visible (query, key) pair."""
    if p.window != (-1, -1):
        fwd = 4.0 * p.batch * p.nheads * p.hdim * visible_pairs(p.seqlen, p.seqlen, p.causal, p.window)
    else:
        fwd = 4.0 * p.batch * p.nheads * p.seqlen * p.seqlen * p.hdim
        if p.causal:
            fwd /= 2
    return fwd * (BWD_FLOP_FACTOR if p.direction == "bwd" else 1.0)


def features_asked(window: tuple[int, int], softcap: float) -> tuple[str, ...]:
    """The features that --window / --softcap ask for."""
    return tuple(f for f, on in (("local", tuple(window) != (-1, -1)), ("softcap", bool(softcap))) if on)


def features_for(variant: Variant, window: tuple[int, int], softcap: float) -> dict[str, Any]:
    """measure()'s window and softcap for a variant: a plain variant runs plain calls; a feature
    variant, the asked features it holds."""
    return {"window": tuple(window) if "local" in variant.features else (-1, -1),
            "softcap": softcap if "softcap" in variant.features else 0.0}


def parse_window(text: str) -> tuple[int, int]:
    """'256,0' -> (256, 0): left and right, each -1 (unbounded) or >= 0, not both -1."""
    parts = [part.strip() for part in text.split(",")]
    try:
        window = tuple(int(part) for part in parts)
    except ValueError:
        window = ()
    if len(window) != 2 or min(window) < -1 or window == (-1, -1):
        raise ValueError(f"--window {text}: expected LEFT,RIGHT, each -1 (unbounded) or a number of keys >= 0, "
                         f"not both -1 (e.g. --window 256,0)")
    return window


def tflops(p: Problem, ms: float) -> float:
    return flops(p) / (ms * 1e-3) / 1e12


def parse_seqlens(text: str) -> tuple[int, ...]:
    """'1024,2k,16384' -> (1024, 2048, 16384)."""
    out = []
    for item in (i.strip().lower() for i in text.split(",") if i.strip()):
        scale = 1024 if item.endswith("k") else 1
        digits = item[:-1] if item.endswith("k") else item
        if not (digits.isascii() and digits.isdigit()) or int(digits) == 0:  # int() takes '²' and '٦٤'; we do not
            raise ValueError(f"--seqlens {text}: {item!r} is not a positive sequence length (e.g. --seqlens 1024,4k,16k)")
        out.append(int(digits) * scale)
    if not out:
        raise ValueError(f"--seqlens {text!r}: empty; give e.g. --seqlens 1024,4096,16384")
    return tuple(dict.fromkeys(out))
