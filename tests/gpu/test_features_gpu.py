"""Local (sliding-window) attention and softcap through the drop-in API on a GPU (skipped without a
CUDA device): forward and autograd backward, varlen and the KV cache, against the fp32 reference
with the same window and softcap, by the correctness rule (docs/correctness.md) (max |ours - fp32 ref| <= 2 * max |PyTorch
in fp16 - fp32 ref| + eps; NaN never passes). And a build with the features compiled out
(features=[]): a call that needs one raises VariantNotBuiltError naming the feature and the rebuild.
"""

from __future__ import annotations

import itertools

import pytest

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")

import flashbuild  # noqa: E402
from flashbuild.reference import attention_ref  # noqa: E402

from test_api_gpu import FWD_ONLY, SELECTION, check, grads_of, poison_allocator, randn  # noqa: E402


@pytest.fixture(scope="module")
def m():
    module = flashbuild.load(**SELECTION)  # test_api_gpu.py's build: every feature (the default)
    assert module.ext.features() == ["local", "softcap"]
    return module


CALLS = [  # causal, window_size, softcap
    (False, (64, 32), 0.0), (True, (37, 0), 0.0), (False, (-1, 5), 0.0), (False, (37, -1), 0.0), (True, (0, 0), 0.0),
    (False, (-1, -1), 2.0), (True, (-1, -1), 2.0), (True, (37, 0), 2.0), (False, (64, 32), 2.0),
]


@pytest.mark.parametrize("causal, window, softcap", CALLS)
@pytest.mark.parametrize("batch, seqlen_q, seqlen_k, nheads, nheads_k, head_dim", [
    (2, 113, 1023, 8, 2, 64),    # GQA 4:1, seqlen_k > seqlen_q
    (1, 1023, 113, 8, 1, 64),    # MQA, seqlen_q > seqlen_k: rows that see no key
    (2, 129, 129, 4, 4, 48),     # head dim 48 on the hdim-64 kernel, padded
])
def test_forward_and_backward_with_window_and_softcap(m, batch, seqlen_q, seqlen_k, nheads, nheads_k, head_dim,
                                                     causal, window, softcap):
    torch.manual_seed(seqlen_q * 7919 + seqlen_k + window[0] + int(softcap * 10) + causal)
    q = randn(batch, seqlen_q, nheads, head_dim, grad=True)
    k = randn(batch, seqlen_k, nheads_k, head_dim, grad=True)
    v = randn(batch, seqlen_k, nheads_k, head_dim, grad=True)
    dout = randn(batch, seqlen_q, nheads, head_dim)
    features = dict(window_size=window, softcap=softcap)
    poison_allocator()
    out, lse = m.flash_attn_func(q, k, v, causal=causal, return_lse=True, **features)
    (out * dout).sum().backward()
    torch.cuda.synchronize()

    detached = [t.detach() for t in (q, k, v)]
    ref, ref_lse = attention_ref(*detached, causal, **features)
    low, low_lse = attention_ref(*detached, causal, upcast=False, **features)
    print(f"\nb{batch} sq{seqlen_q} sk{seqlen_k} h{nheads}/{nheads_k} d{head_dim} causal={causal} {features}")
    check("out", out, ref, low, "out")
    assert torch.equal(torch.isinf(lse), torch.isinf(ref_lse))  # +inf exactly where a row sees no key
    seen = torch.isfinite(ref_lse)
    check("lse", lse[seen], ref_lse[seen], low_lse[seen], "lse")
    ref_grads = grads_of(lambda *t: attention_ref(*t, causal, **features)[0], [t.float() for t in (q, k, v)],
                         dout.float())
    low_grads = grads_of(lambda *t: attention_ref(*t, causal, upcast=False, **features)[0], (q, k, v), dout)
    for name, got, want, lo in zip(("dq", "dk", "dv"), (q.grad, k.grad, v.grad), ref_grads, low_grads):
        check(name, got, want, lo, "grad")


@pytest.mark.parametrize("causal, window, softcap", [(True, (37, 0), 0.0), (False, (16, 8), 2.0)])
def test_varlen_applies_the_window_per_sequence(m, causal, window, softcap):
    if not hasattr(m.ext, "mha_varlen_fwd"):
        pytest.skip(f"build {m.build_key()}: its binding has no mha_varlen_fwd")
    seqlens_q, seqlens_k = [1, 17, 113, 64], [1, 33, 113, 40]
    cu_q = torch.tensor([0, *itertools.accumulate(seqlens_q)], device="cuda", dtype=torch.int32)
    cu_k = torch.tensor([0, *itertools.accumulate(seqlens_k)], device="cuda", dtype=torch.int32)
    torch.manual_seed(3)
    q = randn(sum(seqlens_q), 8, 64, grad=True)
    k, v = randn(sum(seqlens_k), 2, 64, grad=True), randn(sum(seqlens_k), 2, 64, grad=True)
    dout = randn(sum(seqlens_q), 8, 64)
    features = dict(window_size=window, softcap=softcap)
    poison_allocator()
    out = m.flash_attn_varlen_func(q, k, v, cu_q, cu_k, max(seqlens_q), max(seqlens_k), causal=causal, **features)
    out.backward(dout)
    bounds = zip(zip(cu_q.tolist()[:-1], cu_q.tolist()[1:]), zip(cu_k.tolist()[:-1], cu_k.tolist()[1:]))
    for i, ((q0, q1), (k0, k1)) in enumerate(bounds):
        one = [t.detach()[None, a:b] for t, (a, b) in ((q, (q0, q1)), (k, (k0, k1)), (v, (k0, k1)))]
        check(f"seq {i} out", out[q0:q1], attention_ref(*one, causal, **features)[0][0],
              attention_ref(*one, causal, upcast=False, **features)[0][0], "out")
        want = grads_of(lambda *t: attention_ref(*t, causal, **features)[0], [t.float() for t in one],
                        dout[None, q0:q1].float())
        low = grads_of(lambda *t: attention_ref(*t, causal, upcast=False, **features)[0], one, dout[None, q0:q1])
        for name, got, w, lo in zip(("dq", "dk", "dv"), (q.grad[q0:q1], k.grad[k0:k1], v.grad[k0:k1]), want, low):
            check(f"seq {i} {name}", got, w[0], lo[0], "grad")


@pytest.mark.parametrize("num_splits", [0, 3])
@pytest.mark.parametrize("seqlen_q, causal, window, softcap", [
    (1, False, (255, 0), 0.0), (1, True, (-1, -1), 30.0), (4, True, (100, 0), 2.0), (4, False, (7, 2), 0.0),
])
def test_kvcache_window_aligns_to_each_rows_cache_length(m, seqlen_q, causal, window, softcap, num_splits):
    if not hasattr(m.ext, "mha_fwd_kvcache"):
        pytest.skip(f"build {m.build_key()}: its binding has no mha_fwd_kvcache")
    torch.manual_seed(seqlen_q + num_splits + window[0])
    lens = [1, 500, 1023]
    q = randn(3, seqlen_q, 8, 64)
    k_cache, v_cache = randn(3, 1023, 2, 64), randn(3, 1023, 2, 64)
    features = dict(window_size=window, softcap=softcap)
    poison_allocator()
    out, lse = m.flash_attn_with_kvcache(q, k_cache, v_cache, cache_seqlens=torch.tensor(lens, device="cuda"),
                                         causal=causal, num_splits=num_splits, return_softmax_lse=True, **features)
    for b, n in enumerate(lens):
        one = (q[b:b + 1], k_cache[b:b + 1, :n], v_cache[b:b + 1, :n])
        ref, ref_lse = attention_ref(*one, causal, **features)
        check(f"row {b} (cache {n})", out[b:b + 1], ref, attention_ref(*one, causal, upcast=False, **features)[0],
              1e-4)
        seen = torch.isfinite(ref_lse)
        assert torch.equal(torch.isinf(lse[b:b + 1]), ~seen)
        torch.testing.assert_close(lse[b:b + 1][seen], ref_lse[seen], atol=1e-3, rtol=1e-3)


def test_a_build_without_features_names_the_feature_and_the_rebuild():
    narrowed = flashbuild.load(**FWD_ONLY)  # features=[]
    assert narrowed.ext.features() == []
    assert not any(name.endswith(("_local", "_softcap")) for name in narrowed.variants())
    q = randn(1, 129, 2, 64)
    narrowed.flash_attn_func(q, q, q, causal=True)  # plain calls run
    for kwargs, feature, flag in [(dict(window_size=(16, 0)), "local", "--no-local"),
                                  (dict(softcap=20.0), "softcap", "--no-softcap")]:
        with pytest.raises(flashbuild.VariantNotBuiltError) as info:
            narrowed.flash_attn_func(q, q, q, **kwargs)
        message = str(info.value)
        print(f"\n{message}")
        assert feature in message and flag in message and "flashbuild" in message
