"""The attention reference the kernels are checked against (imports torch; not imported by flashbuild).

Semantics are flash-attn's: (batch, seqlen, nheads, head_dim) tensors; K/V may have fewer heads
(GQA/MQA: each K/V head serves nheads / nheads_k query heads); the causal mask is aligned to the
bottom-right corner (query i sees keys j <= i + seqlen_k - seqlen_q); a row that sees no key
outputs zeros and has lse = +inf.
"""

from __future__ import annotations

import math

import torch


def attention_ref(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool = False,
                  softmax_scale: float | None = None, *, upcast: bool = True) -> tuple[torch.Tensor, torch.Tensor]:
    """(out, lse): out (batch, seqlen_q, nheads, head_dim), lse (batch, nheads, seqlen_q) fp32, natural log.
    upcast=True computes and returns out in fp32 (the reference); upcast=False computes in the input
    dtype, which gives the error budget a kernel is held to ("what PyTorch gets in fp16")."""
    batch, seqlen_q, nheads, head_dim = q.shape
    seqlen_k, nheads_k = k.shape[1], k.shape[2]
    if nheads % nheads_k:
        raise ValueError(f"nheads ({nheads}) must be a multiple of nheads_k ({nheads_k})")
    scale = softmax_scale if softmax_scale is not None else 1.0 / math.sqrt(head_dim)
    compute = torch.float32 if upcast else q.dtype
    group = nheads // nheads_k
    qc = q.to(compute)
    kc = k.to(compute).repeat_interleave(group, dim=2)
    vc = v.to(compute).repeat_interleave(group, dim=2)

    scores = torch.einsum("bqhd,bkhd->bhqk", qc, kc) * scale
    if causal:
        rows = torch.arange(seqlen_q, device=q.device).view(-1, 1)
        cols = torch.arange(seqlen_k, device=q.device).view(1, -1)
        hidden = cols > rows + (seqlen_k - seqlen_q)  # bottom-right alignment
        scores = scores.masked_fill(hidden, float("-inf"))
    lse = torch.logsumexp(scores.float(), dim=-1)  # -inf where a row sees no key
    probs = torch.softmax(scores, dim=-1)
    probs = torch.nan_to_num(probs, nan=0.0)  # softmax of an all -inf row is NaN: such rows output 0
    out = torch.einsum("bhqk,bkhd->bqhd", probs, vc)
    lse = torch.where(torch.isneginf(lse), torch.full_like(lse, float("inf")), lse)
    return out, lse
