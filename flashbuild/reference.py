"""The attention reference the kernels are checked against (imports torch; not imported by flashbuild).

Semantics are flash-attn's: (batch, seqlen, nheads, head_dim) tensors; K/V may have fewer heads
(GQA/MQA: each K/V head serves nheads / nheads_k query heads); masks are aligned to the
bottom-right corner of the score matrix: query i sits at key position i + seqlen_k - seqlen_q, and
- causal: it sees keys j <= i + seqlen_k - seqlen_q;
- window_size=(left, right): it sees keys i + seqlen_k - seqlen_q - left <= j <= i + seqlen_k -
  seqlen_q + right, each bound only where that side is >= 0 (-1: unbounded); causal=True means
  right = 0 and keeps left;
- softcap > 0: the scores become softcap * tanh(q.k * softmax_scale / softcap) before the softmax;
a row that sees no key outputs zeros and has lse = +inf.
"""

from __future__ import annotations

import math

import torch


def hidden_keys(seqlen_q: int, seqlen_k: int, causal: bool = False, window_size: tuple[int, int] = (-1, -1),
                device: torch.device | str | None = None) -> torch.Tensor | None:
    """(seqlen_q, seqlen_k) bool, True where query i may not see key j; None when every key is seen."""
    left, right = window_size
    if causal:
        right = 0
    if left < 0 and right < 0:
        return None
    diagonal = torch.arange(seqlen_q, device=device).view(-1, 1) + (seqlen_k - seqlen_q)  # bottom-right alignment
    cols = torch.arange(seqlen_k, device=device).view(1, -1)
    hidden = torch.zeros(seqlen_q, seqlen_k, dtype=torch.bool, device=device)
    if right >= 0:
        hidden |= cols > diagonal + right
    if left >= 0:
        hidden |= cols < diagonal - left
    return hidden


def attention_ref(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool = False,
                  softmax_scale: float | None = None, *, upcast: bool = True,
                  window_size: tuple[int, int] = (-1, -1), softcap: float = 0.0) -> tuple[torch.Tensor, torch.Tensor]:
    """(out, lse): out (batch, seqlen_q, nheads, head_dim), lse (batch, nheads, seqlen_q) fp32, natural log.
    upcast=True computes and returns out in fp32 (the reference); upcast=False computes in the input
    dtype, softcap included, which gives the error budget a kernel is held to ("what PyTorch gets in
    fp16"). Differentiable: autograd through it is the backward reference (through tanh too)."""
    batch, seqlen_q, nheads, head_dim = q.shape
    seqlen_k, nheads_k = k.shape[1], k.shape[2]
    if nheads % nheads_k:
        raise ValueError(f"nheads ({nheads}) must be a multiple of nheads_k ({nheads_k})")
    if softcap < 0:
        raise ValueError(f"softcap ({softcap}) must be >= 0 (0: off)")
    scale = softmax_scale if softmax_scale is not None else 1.0 / math.sqrt(head_dim)
    compute = torch.float32 if upcast else q.dtype
    group = nheads // nheads_k
    qc = q.to(compute)
    kc = k.to(compute).repeat_interleave(group, dim=2)
    vc = v.to(compute).repeat_interleave(group, dim=2)

    scores = torch.einsum("bqhd,bkhd->bhqk", qc, kc) * scale
    if softcap > 0:
        scores = torch.tanh(scores / softcap) * softcap
    hidden = hidden_keys(seqlen_q, seqlen_k, causal, window_size, device=q.device)
    if hidden is not None:
        scores = scores.masked_fill(hidden, float("-inf"))
    lse = torch.logsumexp(scores.float(), dim=-1)  # -inf where a row sees no key
    probs = torch.softmax(scores, dim=-1)
    probs = torch.nan_to_num(probs, nan=0.0)  # softmax of an all -inf row is NaN: such rows output 0
    out = torch.einsum("bhqk,bkhd->bqhd", probs, vc)
    lse = torch.where(torch.isneginf(lse), torch.full_like(lse, float("inf")), lse)
    return out, lse
