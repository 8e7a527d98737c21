"""Host-side (binding and launch) fixes, end to end on a GPU (skipped without one): views the
kernels cannot read in 16-byte vectors are copied, not faulted on; an LSE on the wrong device, an
empty decode call and a batch past CUDA's grid limit are answered by name. After each case the
process must still be healthy (a misaligned address or a SIGFPE would poison or kill it)."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")

import flashbuild  # noqa: E402
from flashbuild.reference import attention_ref  # noqa: E402

from test_api_gpu import SELECTION, randn  # noqa: E402
from test_hostile_inputs_gpu import still_healthy  # noqa: E402

B, S, H, D = 2, 97, 4, 64


@pytest.fixture(scope="module")
def m():
    return flashbuild.load(**SELECTION)


def odd_offset(*shape):
    """A view with a unit last-dim stride whose pointer and strides are not multiples of 16 bytes."""
    wide = randn(*shape[:-1], shape[-1] + 1)
    return wide[..., 1:]


@pytest.mark.parametrize("causal", [False, True])
def test_a_view_at_an_odd_offset_is_copied_and_right(m, causal):
    q, k, v = odd_offset(B, S, H, D), odd_offset(B, S + 3, H, D), odd_offset(B, S + 3, H, D)
    out = m.flash_attn_func(q, k, v, causal=causal)
    ref, _ = attention_ref(q.contiguous(), k.contiguous(), v.contiguous(), causal=causal)
    assert (out.float() - ref).abs().max().item() < 2e-2
    still_healthy(m)


def test_the_backward_of_odd_offset_views_runs(m):
    q, k, v = (odd_offset(B, S, H, D).requires_grad_() for _ in range(3))
    m.flash_attn_func(q, k, v, causal=True).sum().backward()
    assert all(t.grad is not None and not t.grad.isnan().any() for t in (q, k, v))
    still_healthy(m)


def test_an_lse_on_the_cpu_is_an_error_naming_it(m):
    q, k, v, dout = (randn(B, S, H, D) for _ in range(4))
    out, lse = m.flash_attn_func(q, k, v, return_lse=True)
    with pytest.raises(RuntimeError, match="lse must be on q's device"):
        m.mha_bwd(dout, q, k, v, out, lse.cpu())
    still_healthy(m)


@pytest.mark.parametrize("batch, seqlen_q", [(0, 1), (2, 0)])
def test_an_empty_decode_call_with_automatic_splits_returns_empty(m, batch, seqlen_q):
    q = randn(batch, seqlen_q, H, D)
    k_cache, v_cache = randn(batch, 256, H, D), randn(batch, 256, H, D)
    out = m.flash_attn_with_kvcache(q, k_cache, v_cache, num_splits=0)
    assert out.shape == q.shape
    still_healthy(m)


def test_appending_to_a_cache_at_an_odd_offset_is_an_error_naming_it(m):
    q = randn(B, 1, H, D)
    k_cache, v_cache = odd_offset(B, 256, H, D), odd_offset(B, 256, H, D)
    new = dict(k=randn(B, 1, H, D), v=randn(B, 1, H, D))
    with pytest.raises(RuntimeError, match="k_cache is appended to in place"):
        m.flash_attn_with_kvcache(q, k_cache, v_cache, cache_seqlens=3, **new)
    still_healthy(m)


def test_a_batch_past_the_grid_limit_runs_forward_and_is_an_error_naming_it_backward(m):
    """70,000 packed sequences of one row and one key: the Hopper forward's persistent grid walks any number of
    them (each row's output is its one value row); the backward puts the batch on the grid's z axis, and is
    refused by name past CUDA's 65535 (as the Ampere path's forward is), not with a launch error."""
    batch = 70000
    q = randn(batch, 1, 1, D)
    k = v = randn(batch, 1, 1, D)
    cu = torch.arange(batch + 1, dtype=torch.int32, device="cuda")
    q1, k1, v1 = (t[:, 0].detach().requires_grad_() for t in (q, k, v))
    out = m.flash_attn_varlen_func(q1, k1, v1, cu, cu, 1, 1)
    assert torch.allclose(out.float(), v[:, 0].float(), rtol=2e-3, atol=1e-3)  # softmax over one key is 1
    with pytest.raises(RuntimeError, match="65535"):
        out.backward(randn(*out.shape))
    still_healthy(m)


def test_a_causal_only_build_serves_a_one_row_causal_decode():
    """One query row sees the whole cache with or without the (bottom-right) causal mask, so such a call
    takes the non-causal kernel, packing a GQA group's heads as rows. A build holding only the causal
    split-KV kernel refused it, naming a non-causal variant the user never asked for; it now runs it on
    the causal kernel, unpacked (packed rows would be masked as query positions)."""
    from flashbuild.reference import kvcache_ref
    from test_api_gpu import check
    m_causal = flashbuild.load(hdim="64", dtype="fp16", arch="native", direction="splitkv", causal="on",
                               no_local=True, no_softcap=True)
    batch, seqlen_k, nheads, nheads_k = 3, 1000, 8, 2  # GQA 4:1
    q = randn(batch, 1, nheads, D)
    k_cache, v_cache = randn(batch, seqlen_k, nheads_k, D), randn(batch, seqlen_k, nheads_k, D)
    lens = torch.tensor([1000, 517, 3], dtype=torch.int32, device="cuda")
    out = m_causal.flash_attn_with_kvcache(q, k_cache, v_cache, cache_seqlens=lens, causal=True)
    ref = kvcache_ref(q, k_cache, v_cache, cache_seqlens=lens, causal=True)[0]
    low = kvcache_ref(q, k_cache, v_cache, cache_seqlens=lens, causal=True, upcast=False)[0]
    check("out", out, ref, low, "out")
    with pytest.raises(RuntimeError, match="causal"):  # more than one row still needs the causal kernel's own rows
        m_causal.flash_attn_with_kvcache(randn(batch, 2, nheads, D), k_cache, v_cache, cache_seqlens=lens, causal=False)


def test_calls_without_keys_or_queries_are_answered_by_the_binding(m):
    """The Hopper kernels take no call without keys (or, backward, without queries), and sm90 builds compile
    no Ampere-path kernel beside them: the binding answers those calls itself. Rows that see no key output 0
    with LSE +inf; every gradient of such a call is 0 (poisoned memory never shows through); dense and packed."""
    from test_api_gpu import poison_allocator

    poison_allocator()
    q, k, v = randn(B, S, H, D), randn(B, 0, H, D), randn(B, 0, H, D)
    out, lse = m.ext.flash_attn_func(q, k, v, return_lse=True)
    assert out.shape == q.shape and (out == 0).all() and (lse == float("inf")).all()
    dq, dk, dv = m.ext.mha_bwd(randn(*out.shape), q, k, v, out, lse)
    assert dq.shape == q.shape and (dq == 0).all() and dk.shape == k.shape and dv.shape == v.shape

    cu_q = torch.tensor([0, 5, 12], dtype=torch.int32, device="cuda")
    cu_k = torch.zeros(3, dtype=torch.int32, device="cuda")
    packed_q = randn(12, H, D).requires_grad_()
    packed_k, packed_v = randn(0, H, D).requires_grad_(), randn(0, H, D).requires_grad_()
    out = m.flash_attn_varlen_func(packed_q, packed_k, packed_v, cu_q, cu_k, 7, 0)
    assert out.shape == packed_q.shape and (out == 0).all()
    out.backward(randn(*out.shape))
    assert (packed_q.grad == 0).all() and packed_k.grad.shape == packed_k.shape
    still_healthy(m)
