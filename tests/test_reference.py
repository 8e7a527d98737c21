"""The fp32 attention reference (CPU): it is what the GPU tests trust, so it is checked on its own."""

from __future__ import annotations

import math

import pytest

torch = pytest.importorskip("torch")
F = torch.nn.functional

from flashbuild.reference import attention_ref  # noqa: E402


def naive(q, k, v, causal, scale):
    """Row by row, in float64: out and lse of one (batch, head)."""
    b, sq, h, d = q.shape
    sk, hk = k.shape[1], k.shape[2]
    out = torch.zeros(b, sq, h, d, dtype=torch.float64)
    lse = torch.full((b, h, sq), math.inf, dtype=torch.float64)
    for bi in range(b):
        for hi in range(h):
            kv = hi // (h // hk)
            for i in range(sq):
                last = i + sk - sq if causal else sk - 1
                if last < 0:
                    continue
                s = (k[bi, : last + 1, kv].double() @ q[bi, i, hi].double()) * scale
                p = torch.softmax(s, 0)
                out[bi, i, hi] = p @ v[bi, : last + 1, kv].double()
                lse[bi, hi, i] = torch.logsumexp(s, 0)
    return out, lse


@pytest.mark.parametrize("sq, sk, h, hk, causal", [
    (17, 17, 4, 4, False), (17, 17, 4, 4, True), (5, 23, 4, 2, True), (23, 5, 6, 1, True), (1, 31, 2, 2, True),
    (9, 14, 6, 3, False),
])
def test_matches_a_row_by_row_float64_computation(sq, sk, h, hk, causal):
    g = torch.Generator().manual_seed(sq * 100 + sk)
    q = torch.randn(2, sq, h, 32, generator=g)
    k = torch.randn(2, sk, hk, 32, generator=g)
    v = torch.randn(2, sk, hk, 32, generator=g)
    out, lse = attention_ref(q, k, v, causal, 0.3)
    want_out, want_lse = naive(q, k, v, causal, 0.3)
    assert out.dtype == torch.float32 and lse.shape == (2, h, sq)
    torch.testing.assert_close(out.double(), want_out, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(lse.double(), want_lse, atol=1e-5, rtol=1e-5)


def test_rows_that_see_no_key_are_zero_with_infinite_lse():
    q, k, v = torch.randn(1, 8, 2, 16), torch.randn(1, 3, 2, 16), torch.randn(1, 3, 2, 16)
    out, lse = attention_ref(q, k, v, causal=True)
    assert torch.all(out[:, :5] == 0) and torch.all(torch.isinf(lse[:, :, :5]))  # rows 0-4 see no key
    assert torch.all(out[:, 5:].abs().sum(-1) > 0) and torch.all(torch.isfinite(lse[:, :, 5:]))
    assert not torch.isnan(out).any()


def test_agrees_with_sdpa_where_the_two_causal_conventions_agree():
    q, k, v = (torch.randn(2, 33, 4, 64) for _ in range(3))
    for causal in (False, True):
        want = F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2),
                                              is_causal=causal).transpose(1, 2)
        torch.testing.assert_close(attention_ref(q, k, v, causal)[0], want, atol=1e-5, rtol=1e-5)


def test_default_scale_and_low_precision_mode():
    q, k, v = (torch.randn(1, 7, 2, 64) for _ in range(3))
    torch.testing.assert_close(attention_ref(q, k, v)[0], attention_ref(q, k, v, softmax_scale=1 / 8)[0])
    low, _ = attention_ref(q.bfloat16(), k.bfloat16(), v.bfloat16(), upcast=False)
    assert low.dtype == torch.bfloat16
    ref, _ = attention_ref(q.bfloat16(), k.bfloat16(), v.bfloat16())
    err = (low.float() - ref).abs().max().item()
    assert 0 < err < 0.1  # low precision really is computed in low precision, and is still close
