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

kvcache_ref is flash_attn_with_kvcache on plain tensors (appending new keys and values, rotary
embedding, cache_batch_idx, cache_leftpad, a paged cache): it returns the caches as the call leaves
them instead of modifying its inputs.
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


def apply_rotary(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, positions: torch.Tensor,
                 interleaved: bool = True, dtype: torch.dtype | None = None) -> torch.Tensor:
    """x (batch, seqlen, nheads, head_dim) rotated at positions (batch, seqlen): cos/sin are
    (seqlen_ro, rotary_dim / 2) and row p holds the angles of position p. Interleaved (GPT-J) rotates
    column pairs (2i, 2i + 1) by angle i, otherwise (GPT-NeoX) pairs (i, i + rotary_dim / 2); each pair
    (a, b) becomes (a cos - b sin, b cos + a sin); columns from rotary_dim on pass through. Computed in
    fp32, returned in `dtype` (default: x's)."""
    rotary_dim = 2 * cos.shape[1]
    if rotary_dim > x.shape[-1]:
        raise ValueError(f"rotary_dim ({rotary_dim}) must be at most the head dim ({x.shape[-1]})")
    c = cos.float()[positions].unsqueeze(2)  # (batch, seqlen, 1, rotary_dim / 2)
    s = sin.float()[positions].unsqueeze(2)
    xf = x.float()
    rot, rest = xf[..., :rotary_dim], xf[..., rotary_dim:]
    if interleaved:
        a, b = rot[..., 0::2], rot[..., 1::2]
        rotated = torch.stack((a * c - b * s, b * c + a * s), dim=-1).flatten(-2)
    else:
        a, b = rot.chunk(2, dim=-1)
        rotated = torch.cat((a * c - b * s, b * c + a * s), dim=-1)
    return torch.cat((rotated, rest), dim=-1).to(dtype or x.dtype)


def cache_slots(positions: torch.Tensor, batch_rows: torch.Tensor | None = None,
                block_table: torch.Tensor | None = None, page_size: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """Where cache positions (batch, n) live: (block, row) index tensors into a cache's first two
    dims. Contiguous: block = the batch row (cache_batch_idx[b], or b), row = the position; paged:
    block = block_table[b, p // page_size], row = p % page_size."""
    positions = positions.long()
    if block_table is not None:
        return block_table.long().gather(1, positions // page_size), positions % page_size
    rows = torch.arange(positions.shape[0], device=positions.device) if batch_rows is None else batch_rows.long()
    return rows.view(-1, 1).expand_as(positions), positions


def kvcache_ref(q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor, k: torch.Tensor | None = None,
                v: torch.Tensor | None = None, rotary_cos: torch.Tensor | None = None,
                rotary_sin: torch.Tensor | None = None, cache_seqlens: torch.Tensor | int | None = None,
                cache_batch_idx: torch.Tensor | None = None, cache_leftpad: torch.Tensor | None = None,
                block_table: torch.Tensor | None = None, causal: bool = False, softmax_scale: float | None = None,
                window_size: tuple[int, int] = (-1, -1), softcap: float = 0.0, rotary_interleaved: bool = True, *,
                upcast: bool = True) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """(out, lse, k_cache, v_cache) of flash_attn_with_kvcache; the returned caches are new tensors
    holding what the call writes (the arguments are not modified).

    - k, v (batch, seqlen_new, nheads_k, head_dim) go into the cache at positions cache_seqlens[b] ..
      cache_seqlens[b] + seqlen_new - 1 of row b; row b then attends to its keys from
      cache_leftpad[b] (0 when None) up to that end, causal/window aligned bottom-right over them.
    - Row b's keys are cache row cache_batch_idx[b] (b when None), or with block_table (batch,
      max_pages) and a (num_pages, page_size, ...) cache, position p is page block_table[b, p //
      page_size], row p % page_size.
    - rotary_cos/sin rotate the new keys at their positions, and q: query i at cache_seqlens[b] + i
      when causal or windowed (a window side in [0, the cache's positions)), else every query at
      cache_seqlens[b] (flash-attn's rule). Positions are cache positions: leftpad does not shift them.
    upcast=True: fp32 (the rotated keys the attention sees are not rounded); upcast=False: the rotated
    q and keys rounded to the input dtype and the attention in it, the error budget of a kernel."""
    batch, seqlen_q = q.shape[:2]
    paged = block_table is not None
    page_size = k_cache.shape[1] if paged else 0
    capacity = block_table.shape[1] * page_size if paged else k_cache.shape[1]
    if cache_seqlens is None:
        cache_seqlens = torch.full((batch,), capacity, dtype=torch.long, device=q.device)
    elif isinstance(cache_seqlens, int):
        cache_seqlens = torch.full((batch,), cache_seqlens, dtype=torch.long, device=q.device)
    cache_seqlens = cache_seqlens.long()
    leftpad = (torch.zeros_like(cache_seqlens) if cache_leftpad is None else cache_leftpad.long())
    compute = torch.float32 if upcast else q.dtype
    k_cache, v_cache = k_cache.clone(), v_cache.clone()
    k_seen, v_seen = k_cache.to(compute), v_cache.to(compute)  # what the attention reads

    seqlen_new = 0
    if k is not None:
        seqlen_new = k.shape[1]
        positions = cache_seqlens.view(-1, 1) + torch.arange(seqlen_new, device=q.device)
        if rotary_cos is not None:
            k = apply_rotary(k, rotary_cos, rotary_sin, positions, rotary_interleaved, dtype=compute)
        slots = cache_slots(positions, cache_batch_idx, block_table, page_size)
        k_cache[slots], v_cache[slots] = k.to(k_cache.dtype), v.to(v_cache.dtype)
        k_seen[slots], v_seen[slots] = k.to(compute), v.to(compute)
    if rotary_cos is not None:
        left, right = window_size
        per_row = causal or 0 <= left < capacity or 0 <= right < capacity
        offsets = torch.arange(seqlen_q, device=q.device) if per_row else torch.zeros(seqlen_q, dtype=torch.long,
                                                                                      device=q.device)
        q = apply_rotary(q, rotary_cos, rotary_sin, cache_seqlens.view(-1, 1) + offsets, rotary_interleaved,
                         dtype=compute)

    outs, lses = [], []
    for b in range(batch):
        start, end = int(leftpad[b]), int(cache_seqlens[b]) + seqlen_new
        positions = torch.arange(start, max(start, end), device=q.device).view(1, -1)
        rows = torch.tensor([b], device=q.device) if cache_batch_idx is None else cache_batch_idx[b:b + 1]
        slots = cache_slots(positions, rows, None if block_table is None else block_table[b:b + 1], page_size)
        out, lse = attention_ref(q[b:b + 1].to(compute), k_seen[slots], v_seen[slots], causal, softmax_scale,
                                 upcast=upcast, window_size=window_size, softcap=softcap)
        outs.append(out)
        lses.append(lse)
    return torch.cat(outs), torch.cat(lses), k_cache, v_cache
