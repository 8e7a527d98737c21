"""The causal Hopper forward on calls with few query blocks per head and many heads, where the persistent
scheduler deals pairs of query blocks (m, M - 1 - m) of one (batch, head) before a longest-first tail
(PersistentTileScheduler::pair_rounds, kernels/hopper/tile_scheduler.h): every query block must be computed
exactly once, in the pair phase or the tail, with an even and an odd number of blocks per head, the tail
starting inside a head's pairs, and the keys longer than the queries (the mask's bottom-right corner). The
shapes are chosen so that the pair phase runs on this GPU (the test says so if it cannot). At hdim 192 and
256 the same calls walk many tiles whose O leaves through V's ring (FwdTraits::kOAliasesV). Held to the fp32
reference as test_persistent_fwd_gpu.py is; skipped without a CUDA device.
"""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")

import flashbuild  # noqa: E402
from flashbuild.reference import attention_ref  # noqa: E402

BLOCK_M = {64: 192, 128: 128, 192: 128, 256: 128}  # fwd_tile() in kernels/hopper/fwd_traits.h
PAIR_MAX_BLOCKS = 16  # kPairMaxBlocks in kernels/hopper/tile_scheduler.h


@pytest.fixture(scope="module")
def m():
    # One build of every head dim here, causal both (the selection `flashbuild test --causal both` builds).
    return flashbuild.load(hdim="64,128,192,256", dtype="fp16", arch="native", direction="fwd", causal="both",
                           features=[])


def pair_rounds(seqlen_q, hdim, heads_batches):
    """The scheduler's rounds of pairs on this GPU (make() in tile_scheduler.h)."""
    m_blocks = -(-seqlen_q // BLOCK_M[hdim])
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    grid = min(m_blocks * heads_batches, sms)
    units = (m_blocks // 2) * heads_batches
    return units // grid - 1 if 2 <= m_blocks <= PAIR_MAX_BLOCKS and units // grid > 1 else 0


def check(name, out, lse, q, k, v):
    ref, ref_lse = attention_ref(q, k, v, causal=True)
    low, low_lse = attention_ref(q, k, v, causal=True, upcast=False)
    assert not torch.isnan(out).any(), f"{name}: NaN in the output (a tile not computed, or bad math)"
    err = (out.float() - ref).abs().max().item()
    tol = 2 * (low.float() - ref).abs().max().item() + 1e-4
    print(f"{name}: max abs err {err:.3e} (tolerance {tol:.3e})")
    assert err <= tol, f"{name}: max abs err {err:.3e} > {tol:.3e}"
    lse_err = (lse - ref_lse).abs().max().item()
    assert lse_err <= 2 * (low_lse - ref_lse).abs().max().item() + 1e-3, f"{name}: lse err {lse_err:.3e}"


@pytest.mark.parametrize("hdim, batch, seqlen_q, seqlen_k, nheads, nheads_k", [
    (128, 8, 1024, 1024, 40, 40),   # 8 blocks a head: pairs of whole heads, the tail inside one
    (128, 6, 1100, 1100, 48, 8),    # 9 blocks (odd: middles in the tail), the first partial; GQA
    (128, 5, 700, 1500, 64, 64),    # keys past the queries: every block sees more keys
    (64, 8, 1000, 1000, 48, 48),    # 192-row tiles, 6 blocks a head
    (256, 4, 1024, 1024, 80, 80),   # O through V's ring, many tiles per CTA
    (192, 4, 900, 900, 80, 16),     # the same at hdim 192 (ping-pong), 8 blocks, the first partial
])
def test_causal_pairs_cover_every_block(m, hdim, batch, seqlen_q, seqlen_k, nheads, nheads_k):
    rounds = pair_rounds(seqlen_q, hdim, batch * nheads)
    assert rounds > 0, f"b{batch} h{nheads} sq{seqlen_q}: no pair rounds on this GPU: the shape misses its purpose"
    torch.manual_seed(hdim + seqlen_q + seqlen_k)
    q = torch.randn(batch, seqlen_q, nheads, hdim, device="cuda", dtype=torch.float16)
    k, v = (torch.randn(batch, seqlen_k, nheads_k, hdim, device="cuda", dtype=torch.float16) for _ in range(2))
    torch.full((256 << 20,), float("nan"), dtype=torch.float16, device="cuda")  # unwritten output reads NaN
    out, lse = m.flash_attn_func(q, k, v, causal=True, return_lse=True)
    check(f"hdim {hdim} b{batch} sq{seqlen_q} sk{seqlen_k} h{nheads}/{nheads_k} ({rounds} pair rounds)",
          out, lse, q, k, v)
