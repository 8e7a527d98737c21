"""The drop-in API (flashbuild.api) over a real build on a GPU (skipped without a CUDA device).

Gradients through loss.backward() are held to the correctness rule (docs/correctness.md) against the fp32 reference:
max |ours - fp32 ref| <= 2 * max |PyTorch in fp16 - fp32 ref| + eps, per tensor (dq, dk, dv);
NaN never passes. Varlen is checked against per-sequence flash_attn_func calls and the KV-cache
forward against flash_attn_func on each row's cache prefix; those skip when the build's binding
lacks the raw function (mha_varlen_fwd, mha_fwd_kvcache).
"""

from __future__ import annotations

import itertools
import time

import pytest

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")

import flashbuild  # noqa: E402
from flashbuild.api import AttentionOps  # noqa: E402
from flashbuild.selection import variants  # noqa: E402
from flashbuild.reference import attention_ref  # noqa: E402
from helpers import check_close  # noqa: E402

# hdim 64 fp16, forward and backward (and split-KV decode once a family implements it).
DIRECTIONS = ",".join(d for d in ("fwd", "bwd", "splitkv") if d in variants.implemented_directions())
SELECTION = dict(hdim=64, dtype="fp16", arch="native", direction=DIRECTIONS, causal="both")
FWD_ONLY = dict(hdim=64, dtype="fp16", arch="native", direction="fwd", causal="both",
                features=[])  # test_fwd_gpu.py's build


@pytest.fixture(scope="module")
def m():
    started = time.monotonic()
    module = flashbuild.load(**SELECTION)
    print(f"\nbuild + load: {time.monotonic() - started:.1f}s; variants: {module.variants()}")
    assert isinstance(module, AttentionOps)
    return module


def poison_allocator():
    """Fill cached device memory with NaN so that unwritten outputs read as NaN, in both of PyTorch's
    pools: one large block, and 64 blocks of 1 MiB (the small pool's largest, cut from its 2 MiB
    segments), since every output here is under 1 MiB and comes from the small pool."""
    from flashbuild.debug.checking import poison
    poison("cuda", [1 << 20] * 16)  # 4 copies of each size


def randn(*shape, grad=False):
    return torch.randn(*shape, device="cuda", dtype=torch.float16).requires_grad_(grad)


def grads_of(fn, tensors, dout):
    """Gradients of fn(*tensors) for dout, on fresh leaves of the tensors' dtype."""
    leaves = [t.detach().clone().requires_grad_() for t in tensors]
    fn(*leaves).backward(dout)
    return [t.grad for t in leaves]


def check(name, got, ref, low, kind):
    """The correctness rule (docs/correctness.md) through flashbuild's own comparator; `kind`: out, lse or grad."""
    check_close(name, got, ref, low, kind)


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("batch, seqlen_q, seqlen_k, nheads, nheads_k, head_dim", [
    (2, 17, 17, 4, 4, 64),
    (2, 113, 1023, 8, 2, 64),    # GQA 4:1, seqlen_k > seqlen_q
    (1, 1023, 113, 8, 2, 64),    # GQA 4:1, seqlen_q > seqlen_k: causal rows that see no key
    (2, 65, 129, 4, 1, 48),      # MQA, head dim 48 on the hdim-64 kernel, padded
])
def test_backward_through_autograd_matches_the_fp32_reference(m, batch, seqlen_q, seqlen_k, nheads, nheads_k,
                                                              head_dim, causal):
    torch.manual_seed(seqlen_q * 7919 + seqlen_k * 31 + nheads_k + causal)
    q = randn(batch, seqlen_q, nheads, head_dim, grad=True)
    k = randn(batch, seqlen_k, nheads_k, head_dim, grad=True)
    v = randn(batch, seqlen_k, nheads_k, head_dim, grad=True)
    dout = randn(batch, seqlen_q, nheads, head_dim)
    poison_allocator()
    out = m.flash_attn_func(q, k, v, causal=causal)
    (out * dout).sum().backward()  # the loss's gradient wrt out is dout
    torch.cuda.synchronize()

    ref_grads = grads_of(lambda *t: attention_ref(*t, causal)[0], [t.float() for t in (q, k, v)], dout.float())
    low_grads = grads_of(lambda *t: attention_ref(*t, causal, upcast=False)[0], (q, k, v), dout)
    print(f"\nb{batch} sq{seqlen_q} sk{seqlen_k} h{nheads}/{nheads_k} d{head_dim} causal={causal}")
    check("out", out, attention_ref(q.detach(), k.detach(), v.detach(), causal)[0],
          attention_ref(q.detach(), k.detach(), v.detach(), causal, upcast=False)[0], "out")
    for name, got, ref, low in zip(("dq", "dk", "dv"), (q.grad, k.grad, v.grad), ref_grads, low_grads):
        assert got.shape == ref.shape and got.dtype == torch.float16
        check(name, got, ref, low, "grad")


def test_fake_impls_match_the_real_outputs(m):
    """opcheck compares the fake impls' shapes, dtypes and strides with real calls and tests the
    autograd registration and AOT dispatch; head dim 48 makes the binding return narrowed views."""
    q, k, v = randn(2, 33, 4, 48, grad=True), randn(2, 65, 2, 48, grad=True), randn(2, 65, 2, 48, grad=True)
    for features in ((-1, -1, 0.0), (16, 0, 20.0)):  # the plain kernel, and the local+softcap one
        torch.library.opcheck(m.ops.fwd, (q, k, v, True, None, *features))
        out, lse = m.ops.fwd(q.detach(), k.detach(), v.detach(), True, None, *features)
        torch.library.opcheck(m.ops.bwd, (torch.randn_like(out), q.detach(), k.detach(), v.detach(), out, lse, True,
                                          None, *features))


class TinyAttention(torch.nn.Module):
    def __init__(self, m, dim=256, nheads=4, nheads_k=2):
        super().__init__()
        self.m, self.nheads, self.nheads_k, self.head_dim = m, nheads, nheads_k, dim // nheads
        self.wq = torch.nn.Linear(dim, dim)
        self.wkv = torch.nn.Linear(dim, 2 * nheads_k * self.head_dim)
        self.wo = torch.nn.Linear(dim, dim)

    def forward(self, x):
        b, s, _ = x.shape
        q = self.wq(x).view(b, s, self.nheads, self.head_dim)
        k, v = self.wkv(x).view(b, s, 2, self.nheads_k, self.head_dim).unbind(2)
        return self.wo(self.m.flash_attn_func(q, k, v, causal=True).reshape(b, s, -1))


def test_torch_compile_fullgraph_of_a_tiny_attention_model(m):
    torch.manual_seed(0)
    model = TinyAttention(m).cuda().half()
    x = torch.randn(2, 113, 256, device="cuda", dtype=torch.float16)
    eager = model(x)
    eager.float().square().mean().backward()
    eager_grads = [p.grad.clone() for p in model.parameters()]
    model.zero_grad()

    torch._dynamo.reset()
    started = time.monotonic()
    compiled = torch.compile(model, fullgraph=True)  # inductor; a graph break would raise
    out = compiled(x)
    out.float().square().mean().backward()
    print(f"\ntorch.compile(fullgraph=True) forward+backward: {time.monotonic() - started:.1f}s")
    torch.testing.assert_close(out, eager, atol=2e-2, rtol=2e-2)
    for p, want in zip(model.parameters(), eager_grads):
        torch.testing.assert_close(p.grad, want, atol=2e-2, rtol=2e-2)


def test_a_build_without_bwd_says_so_on_backward():
    m_fwd = flashbuild.load(**FWD_ONLY)
    q, k, v = randn(1, 33, 2, 64, grad=True), randn(1, 33, 2, 64, grad=True), randn(1, 33, 2, 64, grad=True)
    out = m_fwd.flash_attn_func(q, k, v)
    with pytest.raises(flashbuild.VariantNotBuiltError, match=r"bwd_hdim64_fp16.*flashbuild --hdim"):
        out.sum().backward()


@pytest.mark.parametrize("causal", [False, True])
def test_varlen_matches_per_sequence_calls(m, causal):
    if not hasattr(m.ext, "mha_varlen_fwd"):
        pytest.skip(f"build {m.build_key()}: its binding has no mha_varlen_fwd (varlen not implemented yet)")
    seqlens_q, seqlens_k = [1, 17, 113, 64], [1, 33, 113, 40]
    cu_q = torch.tensor([0, *itertools.accumulate(seqlens_q)], device="cuda", dtype=torch.int32)
    cu_k = torch.tensor([0, *itertools.accumulate(seqlens_k)], device="cuda", dtype=torch.int32)
    torch.manual_seed(1 + causal)
    q = randn(sum(seqlens_q), 8, 64, grad=True)
    k, v = randn(sum(seqlens_k), 2, 64, grad=True), randn(sum(seqlens_k), 2, 64, grad=True)
    dout = randn(sum(seqlens_q), 8, 64)
    poison_allocator()
    out, lse, _ = m.flash_attn_varlen_func(q, k, v, cu_q, cu_k, max(seqlens_q), max(seqlens_k), causal=causal,
                                           return_attn_probs=True)
    out.backward(dout)
    assert lse.shape == (8, sum(seqlens_q)) and lse.dtype == torch.float32
    print()
    for i, ((q0, q1), (k0, k1)) in enumerate(zip(_spans(cu_q), _spans(cu_k))):
        one = [t.detach()[None, a:b] for t, (a, b) in ((q, (q0, q1)), (k, (k0, k1)), (v, (k0, k1)))]
        ref = attention_ref(*one, causal)[0][0]
        low = attention_ref(*one, causal, upcast=False)[0][0]
        check(f"seq {i} out vs fp32 ref", out[q0:q1], ref, low, "out")
        single, single_lse = m.flash_attn_func(*one, causal=causal, return_lse=True)
        check(f"seq {i} out vs flash_attn_func", out[q0:q1], single[0], low, "out")
        finite = torch.isfinite(single_lse[0])
        assert torch.equal(torch.isinf(lse[:, q0:q1]), ~finite)
        torch.testing.assert_close(lse[:, q0:q1][finite], single_lse[0][finite], atol=1e-3, rtol=1e-3)
        single_grads = grads_of(lambda *t: m.flash_attn_func(*t, causal=causal), one, dout[None, q0:q1])
        low_grads = grads_of(lambda *t: attention_ref(*t, causal, upcast=False)[0], one, dout[None, q0:q1])
        for name, got, want, lo in zip(("dq", "dk", "dv"), (q.grad[q0:q1], k.grad[k0:k1], v.grad[k0:k1]),
                                       single_grads, low_grads):
            check(f"seq {i} {name} vs flash_attn_func", got, want[0], lo[0], "grad")


@pytest.mark.parametrize("num_splits", [0, 1, 3])
@pytest.mark.parametrize("seqlen_q, causal", [(1, False), (4, True)])
def test_kvcache_matches_flash_attn_func_on_the_cache_prefix(m, seqlen_q, causal, num_splits):
    if not hasattr(m.ext, "mha_fwd_kvcache"):
        pytest.skip(f"build {m.build_key()}: its binding has no mha_fwd_kvcache (split-KV not implemented yet)")
    torch.manual_seed(seqlen_q + num_splits)
    lens = [1, 500, 1023]
    q = randn(3, seqlen_q, 8, 64)
    k_cache, v_cache = randn(3, 1023, 2, 64), randn(3, 1023, 2, 64)
    poison_allocator()
    out, lse = m.flash_attn_with_kvcache(q, k_cache, v_cache, cache_seqlens=torch.tensor(lens, device="cuda"),
                                         causal=causal, num_splits=num_splits, return_softmax_lse=True)
    assert out.shape == q.shape and lse.shape == (3, 8, seqlen_q) and lse.dtype == torch.float32
    print()
    for b, n in enumerate(lens):
        one = (q[b:b + 1], k_cache[b:b + 1, :n], v_cache[b:b + 1, :n])
        full, full_lse = m.flash_attn_func(*one, causal=causal, return_lse=True)
        low = attention_ref(*one, causal, upcast=False)[0]
        check(f"row {b} (cache {n}) vs flash_attn_func", out[b:b + 1], full, low, "out")
        check(f"row {b} (cache {n}) vs fp32 ref", out[b:b + 1], attention_ref(*one, causal)[0], low, "out")
        finite = torch.isfinite(full_lse)
        torch.testing.assert_close(lse[b:b + 1][finite], full_lse[finite], atol=1e-3, rtol=1e-3)
    whole = m.flash_attn_with_kvcache(q, k_cache, v_cache, cache_seqlens=1023, causal=causal, num_splits=num_splits)
    check("int cache_seqlens = whole cache", whole, m.flash_attn_func(q, k_cache, v_cache, causal=causal),
          attention_ref(q, k_cache, v_cache, causal, upcast=False)[0], "out")


def _spans(cu_seqlens):
    bounds = cu_seqlens.tolist()
    return list(zip(bounds[:-1], bounds[1:]))


def test_backward_with_no_query_rows_gives_zero_dk_dv(m):
    # No query sees the keys: their gradients are exactly zero, never unwritten memory.
    poison_allocator()
    q, k, v = randn(2, 0, 4, 64), randn(2, 37, 4, 64), randn(2, 37, 4, 64)
    out, lse = m.ext.flash_attn_func(q, k, v, return_lse=True)
    dq, dk, dv = m.ext.mha_bwd(torch.randn_like(out), q, k, v, out, lse)
    assert dq.shape == q.shape
    assert (dk == 0).all() and (dv == 0).all()
