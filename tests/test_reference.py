"""The fp32 attention reference (CPU): it is what the GPU tests trust, so it is checked on its own."""

from __future__ import annotations

import math

import pytest

torch = pytest.importorskip("torch")
F = torch.nn.functional

from flashbuild.reference import apply_rotary, attention_ref, cache_slots, hidden_keys, kvcache_ref  # noqa: E402


def visible(i, j, sq, sk, causal, window):
    """flash-attn's rule for one (query, key) pair, written out: query i sits at key position
    i + sk - sq; it sees j within `left` keys before and `right` keys after it (-1: unbounded);
    causal means right = 0."""
    left, right = window
    if causal:
        right = 0
    at = i + sk - sq
    return (left < 0 or j >= at - left) and (right < 0 or j <= at + right)


def naive(q, k, v, causal, scale, window=(-1, -1), softcap=0.0):
    """Row by row, key by key, in float64: out and lse of one (batch, head)."""
    b, sq, h, d = q.shape
    sk, hk = k.shape[1], k.shape[2]
    out = torch.zeros(b, sq, h, d, dtype=torch.float64)
    lse = torch.full((b, h, sq), math.inf, dtype=torch.float64)
    for bi in range(b):
        for hi in range(h):
            kv = hi // (h // hk)
            for i in range(sq):
                keys = [j for j in range(sk) if visible(i, j, sq, sk, causal, window)]
                if not keys:
                    continue
                s = (k[bi, keys, kv].double() @ q[bi, i, hi].double()) * scale
                if softcap:
                    s = softcap * torch.tanh(s / softcap)
                p = torch.softmax(s, 0)
                out[bi, i, hi] = p @ v[bi, keys, kv].double()
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


@pytest.mark.parametrize("sq, sk", [(7, 7), (5, 12), (12, 5), (1, 9)])
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("window", [(-1, -1), (2, 1), (0, 0), (-1, 3), (3, -1), (0, -1), (20, 20)])
def test_the_mask_is_flash_attns_rule_for_every_pair(sq, sk, causal, window):
    hidden = hidden_keys(sq, sk, causal, window)
    want = torch.tensor([[not visible(i, j, sq, sk, causal, window) for j in range(sk)] for i in range(sq)])
    if hidden is None:
        assert not want.any()  # None only when every key is seen
    else:
        assert torch.equal(hidden, want)


@pytest.mark.parametrize("sq, sk, h, hk, causal, window, softcap", [
    (17, 17, 4, 4, False, (3, 2), 0.0), (17, 17, 4, 4, True, (4, 0), 0.0), (17, 17, 4, 4, True, (4, -1), 0.0),
    (5, 23, 4, 2, False, (-1, 2), 0.0), (23, 5, 6, 1, False, (1, -1), 0.0), (23, 5, 6, 1, True, (2, 0), 0.0),
    (9, 14, 6, 3, False, (0, 0), 0.0), (1, 31, 2, 2, True, (6, 0), 0.0),
    (17, 17, 4, 4, False, (-1, -1), 0.5), (9, 14, 6, 3, True, (-1, -1), 2.0), (23, 5, 6, 1, True, (3, 0), 1.0),
])
def test_windows_and_softcap_match_a_row_by_row_float64_computation(sq, sk, h, hk, causal, window, softcap):
    g = torch.Generator().manual_seed(sq * 100 + sk + window[0])
    q = torch.randn(2, sq, h, 32, generator=g)
    k = torch.randn(2, sk, hk, 32, generator=g)
    v = torch.randn(2, sk, hk, 32, generator=g)
    out, lse = attention_ref(q, k, v, causal, 0.3, window_size=window, softcap=softcap)
    want_out, want_lse = naive(q, k, v, causal, 0.3, window, softcap)
    torch.testing.assert_close(out.double(), want_out, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(lse.double(), want_lse, atol=1e-5, rtol=1e-5)


def test_causal_means_right_zero_and_keeps_the_left_bound():
    q, k, v = (torch.randn(1, 11, 2, 16) for _ in range(3))
    for left in (-1, 0, 3):
        causal = attention_ref(q, k, v, True, window_size=(left, 5))  # right is ignored: causal sets it to 0
        torch.testing.assert_close(causal[0], attention_ref(q, k, v, False, window_size=(left, 0))[0])
    torch.testing.assert_close(attention_ref(q, k, v, True, window_size=(-1, -1))[0], attention_ref(q, k, v, True)[0])
    torch.testing.assert_close(attention_ref(q, k, v, window_size=(10, 10))[0], attention_ref(q, k, v)[0])


def test_a_window_that_sees_no_key_gives_zeros_and_infinite_lse():
    q, k, v = torch.randn(1, 8, 2, 16), torch.randn(1, 3, 2, 16), torch.randn(1, 3, 2, 16)
    out, lse = attention_ref(q, k, v, window_size=(1, 1))  # row i sits at key i - 5 and sees i - 6 .. i - 4
    assert torch.all(out[:, :4] == 0) and torch.all(torch.isinf(lse[:, :, :4]))  # rows 0-3 see none
    assert torch.all(torch.isfinite(lse[:, :, 4:])) and not torch.isnan(out).any()


def test_softcap_is_cap_times_tanh_of_the_scaled_score():
    q, k, v = torch.randn(1, 1, 1, 4), torch.randn(1, 6, 1, 4) * 3, torch.randn(1, 6, 1, 4)
    out, lse = attention_ref(q, k, v, softmax_scale=0.5, softcap=2.0)
    scores = 2.0 * torch.tanh((k[0, :, 0] @ q[0, 0, 0]) * 0.5 / 2.0)  # no further scale after the cap
    torch.testing.assert_close(lse[0, 0, 0], torch.logsumexp(scores, 0))
    torch.testing.assert_close(out[0, 0, 0], torch.softmax(scores, 0) @ v[0, :, 0])
    assert scores.abs().max() < 2.0  # capped
    torch.testing.assert_close(attention_ref(q, k, v, softcap=0.0)[0], attention_ref(q, k, v)[0])  # 0 is off
    with pytest.raises(ValueError, match="softcap"):
        attention_ref(q, k, v, softcap=-1.0)


def test_softcap_in_low_precision_is_computed_in_that_precision_and_differentiable():
    q, k, v = (torch.randn(1, 9, 2, 32) for _ in range(3))
    low, _ = attention_ref(q.half(), k.half(), v.half(), upcast=False, softcap=2.0, window_size=(3, 0))
    ref, _ = attention_ref(q, k, v, softcap=2.0, window_size=(3, 0))
    assert low.dtype == torch.float16 and 0 < (low.float() - ref).abs().max().item() < 0.05
    small = [t[:, :4, :, :4].double().requires_grad_() for t in (q, k, v)]  # float64 throughout (upcast=False)
    assert torch.autograd.gradcheck(
        lambda *t: attention_ref(*t, causal=True, upcast=False, softcap=1.5, window_size=(2, 0))[0], small)


# ---------------------------------------------------------------- rotary embedding and the KV cache

def rope_angles(positions: int, rotary_dim: int, base: float = 10000.0):
    """cos, sin (positions, rotary_dim / 2) of the standard RoPE: angle i of position p is
    p * base^(-2i / rotary_dim)."""
    inv_freq = base ** (-torch.arange(0, rotary_dim, 2, dtype=torch.float64) / rotary_dim)
    angles = torch.arange(positions, dtype=torch.float64).view(-1, 1) * inv_freq
    return angles.cos().float(), angles.sin().float()


def test_rotary_on_one_pair_is_a_plane_rotation_in_both_layouts():
    x = torch.tensor([[[[1.0, 2.0, 3.0, 4.0, 5.0]]]])  # head dim 5, rotary_dim 4: the last column passes through
    theta = torch.tensor([[0.0, 0.0], [0.3, 1.1]])
    at = torch.tensor([[1]])
    got = apply_rotary(x, theta.cos(), theta.sin(), at, interleaved=True)[0, 0, 0]
    c, s = theta[1].cos(), theta[1].sin()
    want = [1 * c[0] - 2 * s[0], 2 * c[0] + 1 * s[0], 3 * c[1] - 4 * s[1], 4 * c[1] + 3 * s[1], 5.0]
    torch.testing.assert_close(got, torch.tensor(want))
    got = apply_rotary(x, theta.cos(), theta.sin(), at, interleaved=False)[0, 0, 0]  # pairs (0, 2), (1, 3)
    want = [1 * c[0] - 3 * s[0], 2 * c[1] - 4 * s[1], 3 * c[0] + 1 * s[0], 4 * c[1] + 2 * s[1], 5.0]
    torch.testing.assert_close(got, torch.tensor(want))
    torch.testing.assert_close(apply_rotary(x, theta.cos(), theta.sin(), torch.tensor([[0]])), x)  # angle 0


@pytest.mark.parametrize("interleaved", [True, False])
def test_rotary_keeps_norms_and_scores_depend_on_the_distance_only(interleaved):
    cos, sin = rope_angles(64, 16)
    q, k = torch.randn(1, 1, 1, 24), torch.randn(1, 1, 1, 24)  # rotary_dim 16 of head dim 24

    def rot(x, p):
        return apply_rotary(x, cos, sin, torch.tensor([[p]]), interleaved)

    torch.testing.assert_close(rot(q, 37).norm(), q.norm())
    torch.testing.assert_close(rot(q, 37)[..., 16:], q[..., 16:])
    score = lambda m, n: (rot(q, m) * rot(k, n)).sum()  # noqa: E731
    torch.testing.assert_close(score(10, 3), score(50, 43), atol=1e-4, rtol=1e-4)
    assert not torch.allclose(score(10, 3), score(10, 4), atol=1e-3)


def test_rotary_layouts_are_the_same_rotation_of_permuted_columns():
    cos, sin = rope_angles(32, 8)
    x = torch.randn(2, 5, 3, 12)
    positions = torch.randint(0, 32, (2, 5))
    halves = torch.cat([torch.arange(0, 8, 2), torch.arange(1, 8, 2), torch.arange(8, 12)])  # interleaved -> halves
    torch.testing.assert_close(apply_rotary(x, cos, sin, positions, True)[..., halves],
                               apply_rotary(x[..., halves], cos, sin, positions, False))
    assert apply_rotary(x.half(), cos, sin, positions).dtype == torch.float16
    with pytest.raises(ValueError, match="rotary_dim"):
        apply_rotary(x[..., :6], cos, sin, positions)


def test_cache_slots_of_a_paged_and_a_batch_indexed_cache():
    positions = torch.tensor([[0, 7, 8], [3, 15, 16]])
    table = torch.tensor([[5, 2, 9], [1, 0, 4]])
    block, row = cache_slots(positions, block_table=table, page_size=8)
    assert block.tolist() == [[5, 5, 2], [1, 0, 4]] and row.tolist() == [[0, 7, 0], [3, 7, 0]]
    block, row = cache_slots(positions, batch_rows=torch.tensor([3, 1]))
    assert block.tolist() == [[3, 3, 3], [1, 1, 1]] and row.tolist() == positions.tolist()


def test_kvcache_ref_appends_then_attends_over_the_prefix_and_leaves_its_inputs_alone():
    q, k_cache, v_cache = torch.randn(2, 3, 4, 16), torch.randn(2, 20, 2, 16), torch.randn(2, 20, 2, 16)
    k, v = torch.randn(2, 3, 2, 16), torch.randn(2, 3, 2, 16)
    before = k_cache.clone()
    lens, leftpad = torch.tensor([4, 11]), torch.tensor([0, 2])
    out, lse, new_k, new_v = kvcache_ref(q, k_cache, v_cache, k, v, cache_seqlens=lens, cache_leftpad=leftpad,
                                         causal=True)
    assert torch.equal(k_cache, before)
    assert torch.equal(new_k[0, 4:7], k[0]) and torch.equal(new_v[1, 11:14], v[1])
    assert torch.equal(new_k[0, :4], before[0, :4]) and torch.equal(new_k[0, 7:], before[0, 7:])
    for b, (start, end) in enumerate([(0, 7), (2, 14)]):
        want, want_lse = attention_ref(q[b:b + 1], new_k[b:b + 1, start:end], new_v[b:b + 1, start:end], True)
        torch.testing.assert_close(out[b:b + 1], want)
        torch.testing.assert_close(lse[b:b + 1], want_lse)


@pytest.mark.parametrize("causal", [False, True])
def test_kvcache_ref_rotates_q_per_row_only_when_causal_or_windowed(causal):
    cos, sin = rope_angles(16, 8)
    q, cache = torch.randn(1, 3, 2, 8), torch.randn(1, 16, 2, 8)
    k, v = torch.randn(1, 3, 2, 8), torch.randn(1, 3, 2, 8)
    lens = torch.tensor([5])
    out, *_ = kvcache_ref(q, cache, cache, k, v, cos, sin, lens, causal=causal)
    offsets = torch.arange(3) if causal else torch.zeros(3, dtype=torch.long)
    q_rot = apply_rotary(q, cos, sin, (5 + offsets).view(1, 3))
    keys = torch.cat([cache[:, :5], apply_rotary(k, cos, sin, torch.arange(5, 8).view(1, 3))], dim=1)
    values = torch.cat([cache[:, :5], v], dim=1)
    torch.testing.assert_close(out, attention_ref(q_rot, keys, values, causal)[0])


@pytest.mark.parametrize("sq, sk, h, hk, causal, window, softcap", [
    (23, 5, 6, 2, True, (-1, -1), 0.0),   # GQA 3:1, rows 0-17 see no key
    (5, 23, 4, 1, True, (3, -1), 0.0),    # MQA, a left window
    (9, 14, 6, 3, False, (2, 1), 1.5),    # window and softcap
])
def test_the_backward_reference_matches_autograd_through_the_row_by_row_float64_computation(
        sq, sk, h, hk, causal, window, softcap):
    """`flashbuild test` holds dQ, dK, dV to autograd through attention_ref: check that against
    autograd through `naive` (float64, only the keys each row sees, no masking, no nan_to_num), so a
    reference whose gradient is wrong (GQA not summed, NaN leaking from rows that see no key) fails
    here rather than passing every kernel it agrees with."""
    g = torch.Generator().manual_seed(sq * 100 + sk)
    q, k, v = (torch.randn(2, n, heads, 16, generator=g) for n, heads in ((sq, h), (sk, hk), (sk, hk)))
    dout = torch.randn(2, sq, h, 16, generator=g)
    leaves = [t.clone().requires_grad_() for t in (q, k, v)]
    got = torch.autograd.grad(attention_ref(*leaves, causal, 0.3, window_size=window, softcap=softcap)[0], leaves,
                              dout)
    leaves64 = [t.double().requires_grad_() for t in (q, k, v)]
    want = torch.autograd.grad(naive(*leaves64, causal, 0.3, window, softcap)[0], leaves64, dout.double())
    for name, a, b in zip(("dq", "dk", "dv"), got, want):
        assert a.shape == b.shape and not torch.isnan(a).any(), name
        torch.testing.assert_close(a.double(), b, atol=1e-5, rtol=1e-5, msg=name)
