"""The persistent forward: on sm90 the Hopper kernel (kernels/hopper/fwd_kernel.h, PersistentTileScheduler
in tile_scheduler.h), where one CTA per SM walks the tiles the scheduler deals it, longest first when
causal; hdim 256 non-causal, 128-row tiles. The shapes have several times more query blocks than the GPU
has SMs, so every CTA walks many: dense with odd seqlens and GQA, and varlen, whose short sequences leave
query blocks with no rows between ones that have them. Held to the fp32 reference as test_fwd_gpu.py is
(skipped without a CUDA device; on a GPU below sm90 the same calls run on the Ampere path, one block per
CTA, whose hdim-256 non-causal tile has 128 rows too).
"""

from __future__ import annotations

import itertools

import pytest

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")

import flashbuild  # noqa: E402
from flashbuild.reference import attention_ref  # noqa: E402

SELECTION = dict(hdim=256, dtype="fp16", arch="native", direction="fwd", causal="off", features=[])
BLOCK_M = 128  # the query block of the hdim-256 non-causal tile (kernels/hopper/fwd_traits.h, fwd_tile)


@pytest.fixture(scope="module")
def m():
    return flashbuild.load(**SELECTION)


def poison_allocator():
    """Fill cached device memory with NaN so that unwritten outputs read as NaN."""
    junk = torch.full((64 << 20,), float("nan"), dtype=torch.float16, device="cuda")
    del junk


def check(name, out, lse, q, k, v):
    """Output and LSE against the fp32 reference: product.md's rule, as in test_fwd_gpu.py."""
    ref, ref_lse = attention_ref(q, k, v)
    low, low_lse = attention_ref(q, k, v, upcast=False)
    assert not torch.isnan(out).any(), f"{name}: NaN in the output (unwritten or bad math)"
    err = (out.float() - ref).abs().max().item()
    ref_err = (low.float() - ref).abs().max().item()
    tol = 2 * ref_err + 1e-4
    mismatch = ((out.float() - ref).abs() > tol).float().mean().item() * 100
    print(f"{name}: max abs err {err:.3e}, torch fp16 err {ref_err:.3e}, mismatch {mismatch:.3f}%")
    assert err <= tol, f"{name}: max abs err {err:.3e} > {tol:.3e}"
    lse_err = (lse - ref_lse).abs().max().item()
    assert lse_err <= 2 * (low_lse - ref_lse).abs().max().item() + 1e-3, f"{name}: lse err {lse_err:.3e}"


def walked_blocks(seqlen_q, nheads, batch):
    blocks = -(-seqlen_q // BLOCK_M) * nheads * batch
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    assert blocks >= 3 * sms, f"{blocks} query blocks on {sms} SMs: too few for every CTA to walk several"
    return blocks


@pytest.mark.parametrize("batch, seqlen_q, seqlen_k, nheads, nheads_k", [
    (4, 1023, 1001, 16, 2),   # GQA 8:1, both seqlens odd: the last query and key blocks are partial
    (6, 300, 77, 24, 24),     # one key block, partial
])
def test_dense_forward_with_many_blocks_per_cta(m, batch, seqlen_q, seqlen_k, nheads, nheads_k):
    walked_blocks(seqlen_q, nheads, batch)
    torch.manual_seed(seqlen_q + seqlen_k)
    q = torch.randn(batch, seqlen_q, nheads, 256, device="cuda", dtype=torch.float16)
    k, v = (torch.randn(batch, seqlen_k, nheads_k, 256, device="cuda", dtype=torch.float16) for _ in range(2))
    poison_allocator()
    out, lse = m.flash_attn_func(q, k, v, return_lse=True)
    check(f"b{batch} sq{seqlen_q} sk{seqlen_k} h{nheads}/{nheads_k}", out, lse, q, k, v)


def test_varlen_with_blocks_that_have_no_rows(m):
    if not hasattr(m.ext, "mha_varlen_fwd"):
        pytest.skip(f"build {m.build_key()}: its binding has no mha_varlen_fwd")
    seqlens_q, seqlens_k = [1, 700, 129, 1023, 64, 300], [5, 640, 1023, 129, 1, 333]
    nheads, nheads_k = 16, 4
    walked_blocks(max(seqlens_q), nheads, len(seqlens_q))
    cu_q, cu_k = (torch.tensor([0, *itertools.accumulate(s)], device="cuda", dtype=torch.int32)
                  for s in (seqlens_q, seqlens_k))
    torch.manual_seed(7)
    q = torch.randn(sum(seqlens_q), nheads, 256, device="cuda", dtype=torch.float16)
    k, v = (torch.randn(sum(seqlens_k), nheads_k, 256, device="cuda", dtype=torch.float16) for _ in range(2))
    poison_allocator()
    out, lse, _ = m.flash_attn_varlen_func(q, k, v, cu_q, cu_k, max(seqlens_q), max(seqlens_k), return_attn_probs=True)
    for i, (q0, q1, k0, k1) in enumerate(zip(cu_q.tolist(), cu_q.tolist()[1:], cu_k.tolist(), cu_k.tolist()[1:])):
        check(f"seq {i} (sq{q1 - q0} sk{k1 - k0})", out[None, q0:q1], lse[None, :, q0:q1],
              q[None, q0:q1], k[None, k0:k1], v[None, k0:k1])
