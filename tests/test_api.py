"""flashbuild.api on CPU: the drop-in layer over a fake extension that has the binding's raw API and
computes with the reference math (forward from flashbuild.reference, backward in closed form from
the saved out and lse, as the kernels do; local windows and softcap included). Checks outputs and
autograd against the reference, that window_size and softcap reach every raw function as keywords
(and deterministic=True the backward ones), the fake (meta) implementations, torch.compile(fullgraph=True),
the argument and unsupported-feature errors, and that two loaded builds keep apart."""

from __future__ import annotations

import itertools
import math
import time
import types

import pytest

torch = pytest.importorskip("torch")

import flashbuild  # noqa: E402
from flashbuild import api
from flashbuild.pipeline import builder  # noqa: E402
from flashbuild.errors import VariantNotBuiltError  # noqa: E402
from flashbuild.reference import attention_ref, hidden_keys, kvcache_ref  # noqa: E402

_names = itertools.count()
NO_FEATURES = dict(window_size_left=-1, window_size_right=-1, softcap=0.0)
NOT_PASSED = "not passed"  # the fake backward's default for deterministic: what a call without it logs


def reference_bwd(dout, q, k, v, out, lse, causal, softmax_scale, window_size_left=-1, window_size_right=-1,
                  softcap=0.0):
    """dq, dk, dv from the saved out and lse (the kernels' recipe): P = exp(S - lse),
    dS = P * (dO V^T - rowsum(dO * O)), through the softcap's tanh (dS/ds = 1 - tanh^2), summed
    over each K/V head's query group."""
    batch, seqlen_q, nheads, head_dim = q.shape
    seqlen_k, nheads_k = k.shape[1], k.shape[2]
    group = nheads // nheads_k
    scale = softmax_scale if softmax_scale is not None else 1.0 / math.sqrt(head_dim)
    qf, dof, of = q.double(), dout.double(), out.double()
    kf = k.double().repeat_interleave(group, dim=2)
    vf = v.double().repeat_interleave(group, dim=2)
    scores = torch.einsum("bqhd,bkhd->bhqk", qf, kf) * scale
    capped = torch.tanh(scores / softcap) if softcap else None
    if softcap:
        scores = capped * softcap
    probs = torch.exp(scores - lse.double().unsqueeze(-1))  # lse = +inf on empty rows: P = 0
    hidden = hidden_keys(seqlen_q, seqlen_k, causal, (window_size_left, window_size_right))
    if hidden is not None:
        probs = probs.masked_fill(hidden, 0.0)
    dv = torch.einsum("bhqk,bqhd->bkhd", probs, dof)
    dp = torch.einsum("bqhd,bkhd->bhqk", dof, vf)
    rowsum = (dof * of).sum(-1).transpose(1, 2).unsqueeze(-1)  # (b, h, sq, 1)
    ds = probs * (dp - rowsum)
    if softcap:
        ds = ds * (1 - capped * capped)
    dq = torch.einsum("bhqk,bkhd->bqhd", ds, kf) * scale
    dk = torch.einsum("bhqk,bqhd->bkhd", ds, qf) * scale
    dk = dk.view(batch, seqlen_k, nheads_k, group, head_dim).sum(3)
    dv = dv.view(batch, seqlen_k, nheads_k, group, head_dim).sum(3)
    return dq.to(q.dtype), dk.to(k.dtype), dv.to(v.dtype)


class FakeExtension(types.ModuleType):
    """The raw API of a built extension (kernels/binding/flash_api.cpp), in pure torch on CPU.
    `directions` says what the "build" holds; a call outside it raises VariantNotBuiltError as the
    binding does; so does a call that asks for a feature outside `features` (compiled out). `pad_to`
    returns outputs as the binding does for a padded head dim: a narrowed, non-contiguous view.
    Every call is logged in `calls`, its window and softcap keywords in `feature_kwargs`, and each
    backward's deterministic keyword in `deterministic_kwargs` (NOT_PASSED when the call left it out)."""

    def __init__(self, name: str | None = None, directions=("fwd", "bwd", "splitkv"), pad_to: int | None = None,
                 varlen: bool = True, features=("local", "softcap")):
        super().__init__(name or f"_flashbuild_test{next(_names)}")
        self.directions, self.pad_to, self.features, self.calls, self.feature_kwargs = (
            directions, pad_to, features, [], [])
        self.kvcache_kwargs = []  # the KV-cache keywords of each mha_fwd_kvcache call (those given)
        self.deterministic_kwargs = []  # the deterministic keyword of each mha_bwd / mha_varlen_bwd call
        for name in ("variants", "build_key", "flash_attn_func", "mha_bwd", "mha_fwd_kvcache"):
            setattr(self, name, getattr(self, name))  # in the module's namespace, as a binding's functions are
        if varlen:
            self.mha_varlen_fwd, self.mha_varlen_bwd = self._varlen_fwd, self._varlen_bwd

    def _need(self, direction, name, window_size_left, window_size_right, softcap):
        self.calls.append(name)
        self.feature_kwargs.append(dict(window_size_left=window_size_left, window_size_right=window_size_right,
                                        softcap=softcap))
        if direction not in self.directions:
            raise VariantNotBuiltError(f"flashbuild: this build has no kernel {direction}_hdim64_fp16_sm90 "
                                       f"(asked: {direction}). Build one that holds it with: flashbuild --direction "
                                       f"{direction}")
        for feature, asked in (("local", window_size_left >= 0 or window_size_right >= 0), ("softcap", softcap > 0)):
            if asked and feature not in self.features:
                raise VariantNotBuiltError(f"flashbuild: this build has no {feature} kernel (compiled out with "
                                           f"--no-{feature}); build it without --no-{feature}")

    def _check(self, *tensors):
        for t in tensors:
            assert t.stride(-1) == 1, "the binding needs a unit stride in the head dim"

    def _padded(self, t):
        if self.pad_to is None:
            return t
        padded = torch.nn.functional.pad(t, (0, self.pad_to - t.shape[-1]))
        return padded.narrow(-1, 0, t.shape[-1])

    def variants(self):
        return [f"{d}_hdim64_fp16{c}_sm90" for d in self.directions for c in ("", "_causal")]

    def build_key(self):
        return f"sm90-fp16-h64-{self.__name__}"

    # The binding's signatures: window_size_left, window_size_right and softcap are keyword arguments
    # with flash-attn's defaults (no window, no softcap).
    def flash_attn_func(self, q, k, v, causal=False, softmax_scale=None, return_lse=False, window_size_left=-1,
                        window_size_right=-1, softcap=0.0):
        self._need("fwd", "flash_attn_func", window_size_left, window_size_right, softcap)
        self._check(q, k, v)
        out, lse = attention_ref(q, k, v, causal, softmax_scale, window_size=(window_size_left, window_size_right),
                                 softcap=softcap)
        out = self._padded(out.to(q.dtype))
        return (out, lse) if return_lse else out

    def mha_bwd(self, dout, q, k, v, out, lse, causal=False, softmax_scale=None, window_size_left=-1,
                window_size_right=-1, softcap=0.0, deterministic=NOT_PASSED):
        self._need("bwd", "mha_bwd", window_size_left, window_size_right, softcap)
        self.deterministic_kwargs.append(deterministic)
        self._check(q, k, v)
        return [self._padded(g) for g in reference_bwd(dout, q, k, v, out, lse, causal, softmax_scale,
                                                       window_size_left, window_size_right, softcap)]

    def _varlen_fwd(self, q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, causal=False,
                    softmax_scale=None, window_size_left=-1, window_size_right=-1, softcap=0.0):
        self._need("fwd", "mha_varlen_fwd", window_size_left, window_size_right, softcap)
        assert cu_seqlens_q.dtype == torch.int32 and cu_seqlens_k.dtype == torch.int32
        outs, lses = [], []
        for (q0, q1), (k0, k1) in zip(_spans(cu_seqlens_q), _spans(cu_seqlens_k)):
            assert q1 - q0 <= max_seqlen_q and k1 - k0 <= max_seqlen_k
            out, lse = attention_ref(q[None, q0:q1], k[None, k0:k1], v[None, k0:k1], causal, softmax_scale,
                                     window_size=(window_size_left, window_size_right), softcap=softcap)
            outs.append(out[0].to(q.dtype))
            lses.append(lse[0])
        return [torch.cat(outs), torch.cat(lses, dim=1)]

    def _varlen_bwd(self, dout, q, k, v, out, lse, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k,
                    causal=False, softmax_scale=None, window_size_left=-1, window_size_right=-1, softcap=0.0,
                    deterministic=NOT_PASSED):
        self._need("bwd", "mha_varlen_bwd", window_size_left, window_size_right, softcap)
        self.deterministic_kwargs.append(deterministic)
        grads = [[], [], []]
        for (q0, q1), (k0, k1) in zip(_spans(cu_seqlens_q), _spans(cu_seqlens_k)):
            one = reference_bwd(dout[None, q0:q1], q[None, q0:q1], k[None, k0:k1], v[None, k0:k1],
                                out[None, q0:q1], lse[None, :, q0:q1], causal, softmax_scale,
                                window_size_left, window_size_right, softcap)
            for acc, g in zip(grads, one):
                acc.append(g[0])
        return [torch.cat(g) for g in grads]

    def mha_fwd_kvcache(self, q, k_cache, v_cache, cache_seqlens=None, causal=False, softmax_scale=None,
                        num_splits=0, window_size_left=-1, window_size_right=-1, softcap=0.0, k=None, v=None,
                        rotary_cos=None, rotary_sin=None, cache_batch_idx=None, cache_leftpad=None, block_table=None,
                        rotary_interleaved=True):
        """The binding's KV-cache call: new keys and values are written into the caches in place."""
        self._need("splitkv", "mha_fwd_kvcache", window_size_left, window_size_right, softcap)
        self.kvcache_kwargs.append({name: value for name, value in (
            ("k", k), ("v", v), ("rotary_cos", rotary_cos), ("rotary_sin", rotary_sin),
            ("cache_batch_idx", cache_batch_idx), ("cache_leftpad", cache_leftpad), ("block_table", block_table),
            ("rotary_interleaved", rotary_interleaved)) if value is not None and value is not True})
        for t in (cache_seqlens, cache_batch_idx, cache_leftpad, block_table):
            assert t is None or (t.dtype == torch.int32 and t.is_contiguous())
        self._check(q, k_cache, v_cache)
        out, lse, new_k, new_v = kvcache_ref(
            q, k_cache, v_cache, k, v, rotary_cos, rotary_sin, cache_seqlens, cache_batch_idx, cache_leftpad,
            block_table, causal, softmax_scale, (window_size_left, window_size_right), softcap, rotary_interleaved)
        if k is not None:
            k_cache.copy_(new_k)
            v_cache.copy_(new_v)
        return [self._padded(out.to(q.dtype)), lse]


def _spans(cu_seqlens):
    bounds = cu_seqlens.tolist()
    return list(zip(bounds[:-1], bounds[1:]))


@pytest.fixture(scope="module")
def fake_ext():
    return FakeExtension("_flashbuild_test_shared")


@pytest.fixture(scope="module")
def m(fake_ext):
    return api.wrap(fake_ext)


def qkv(batch, seqlen_q, seqlen_k, nheads, nheads_k, head_dim, *, grad=False, dtype=torch.float32, seed=0):
    gen = torch.Generator().manual_seed(seed)
    tensors = (torch.randn(batch, seqlen_q, nheads, head_dim, generator=gen, dtype=dtype),
               torch.randn(batch, seqlen_k, nheads_k, head_dim, generator=gen, dtype=dtype),
               torch.randn(batch, seqlen_k, nheads_k, head_dim, generator=gen, dtype=dtype))
    return tuple(t.requires_grad_(grad) for t in tensors)


def ref_grads(q, k, v, dout, causal, softmax_scale=None, **features):
    """Gradients of the fp64 reference by torch autograd (independent of reference_bwd)."""
    leaves = [t.detach().double().requires_grad_() for t in (q, k, v)]
    out, _ = attention_ref(*leaves, causal, softmax_scale, **features)
    out.backward(dout.double())
    return [t.grad for t in leaves]


SHAPES = [  # batch, seqlen_q, seqlen_k, nheads, nheads_k, head_dim
    (2, 17, 17, 4, 4, 32),
    (2, 13, 29, 8, 2, 16),   # GQA 4:1, seqlen_k > seqlen_q
    (1, 29, 13, 4, 1, 16),   # MQA, seqlen_q > seqlen_k: causal rows that see no key
]


# ---------------------------------------------------------------- outputs and gradients

@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("shape", SHAPES)
def test_forward_and_gradients_match_the_reference(m, shape, causal):
    q, k, v = qkv(*shape, grad=True, seed=sum(shape) + causal)
    out, lse = m.flash_attn_func(q, k, v, causal=causal, return_lse=True)
    ref, ref_lse = attention_ref(q.detach(), k.detach(), v.detach(), causal)
    torch.testing.assert_close(out, ref)
    torch.testing.assert_close(lse, ref_lse)
    assert out.requires_grad and not lse.requires_grad  # lse carries no gradient, as in flash-attn

    dout = torch.randn_like(out)
    out.backward(dout)
    for name, got, want in zip("qkv", (q.grad, k.grad, v.grad), ref_grads(q, k, v, dout, causal)):
        assert got.shape == want.shape, name
        torch.testing.assert_close(got, want.float(), atol=1e-4, rtol=1e-4, msg=f"d{name}")


def test_softmax_scale_reaches_forward_and_backward(m):
    q, k, v = qkv(1, 9, 11, 2, 2, 8, grad=True, seed=3)
    out = m.flash_attn_func(q, k, v, softmax_scale=0.3, causal=True)
    torch.testing.assert_close(out, attention_ref(q.detach(), k.detach(), v.detach(), True, 0.3)[0])
    dout = torch.randn_like(out)
    out.backward(dout)
    torch.testing.assert_close(q.grad, ref_grads(q, k, v, dout, True, 0.3)[0].float(), atol=1e-4, rtol=1e-4)


def test_return_values_follow_flash_attn(m):
    q, k, v = qkv(1, 5, 5, 2, 2, 8)
    out = m.flash_attn_func(q, k, v)
    assert isinstance(out, torch.Tensor) and out.shape == q.shape
    out3 = m.flash_attn_func(q, k, v, return_attn_probs=True)
    assert len(out3) == 3 and out3[2] is None and out3[1].shape == (1, 2, 5)
    out2 = m.flash_attn_func(q, k, v, 0.0, None, True, return_lse=True)  # flash-attn's positional order
    torch.testing.assert_close(out2[0], attention_ref(q, k, v, True)[0])


def test_the_raw_call_style_of_test_and_bench_keeps_working(m, fake_ext):
    q, k, v = qkv(2, 7, 9, 4, 2, 8)
    out, lse = m.flash_attn_func(q, k, v, causal=True, return_lse=True)
    dout = torch.randn_like(out)
    dq, dk, dv = m.mha_bwd(dout, q, k, v, out, lse, causal=True)  # passthrough to the raw extension
    assert dq.shape == q.shape and dk.shape == k.shape and dv.shape == v.shape
    assert m.ext is fake_ext and m.variants() == fake_ext.variants() and m.build_key() == fake_ext.build_key()
    assert "mha_bwd" in dir(m)


def test_inputs_get_a_unit_stride_in_the_head_dim(m):
    q, k, v = (t.transpose(-1, -2).contiguous().transpose(-1, -2) for t in qkv(1, 6, 6, 2, 2, 8))
    assert q.stride(-1) != 1
    torch.testing.assert_close(m.flash_attn_func(q, k, v), attention_ref(q, k, v)[0])


def test_outputs_are_contiguous_as_the_fake_impls_declare():
    m = api.wrap(FakeExtension(pad_to=32))  # the binding returns a narrowed view for a padded head dim
    q, k, v = qkv(1, 6, 6, 2, 2, 24, grad=True)
    out = m.flash_attn_func(q, k, v)
    assert out.is_contiguous()
    out.sum().backward()
    assert q.grad.is_contiguous() and k.grad.is_contiguous()


def test_lse_alone_has_no_gradient(m):
    q, k, v = qkv(1, 6, 6, 2, 2, 8, grad=True)
    _, lse = m.flash_attn_func(q, k, v, return_lse=True)
    with pytest.raises(RuntimeError, match="does not require grad"):
        lse.sum().backward()


# ---------------------------------------------------------------- varlen and KV cache

def _packed(seqlens, nheads, head_dim, *, grad=False, seed=0):
    gen = torch.Generator().manual_seed(seed)
    t = torch.randn(sum(seqlens), nheads, head_dim, generator=gen).requires_grad_(grad)
    cu = torch.tensor([0, *itertools.accumulate(seqlens)], dtype=torch.int32)
    return t, cu


@pytest.mark.parametrize("causal", [False, True])
def test_varlen_matches_per_sequence_calls_forward_and_backward(m, causal):
    seqlens_q, seqlens_k = [5, 1, 12], [7, 3, 9]
    q, cu_q = _packed(seqlens_q, 4, 8, grad=True, seed=1)
    k, cu_k = _packed(seqlens_k, 2, 8, grad=True, seed=2)
    v, _ = _packed(seqlens_k, 2, 8, grad=True, seed=3)
    out, lse, probs = m.flash_attn_varlen_func(q, k, v, cu_q.long(), cu_k, max(seqlens_q), max(seqlens_k),
                                               causal=causal, return_attn_probs=True)
    assert probs is None and out.shape == q.shape and lse.shape == (4, q.shape[0]) and lse.dtype == torch.float32
    dout = torch.randn_like(out)
    out.backward(dout)
    for (q0, q1), (k0, k1) in zip(_spans(cu_q), _spans(cu_k)):
        one_q, one_k, one_v = (t.detach()[None, a:b] for t, (a, b) in ((q, (q0, q1)), (k, (k0, k1)), (v, (k0, k1))))
        ref, ref_lse = attention_ref(one_q, one_k, one_v, causal)
        torch.testing.assert_close(out[q0:q1], ref[0])
        torch.testing.assert_close(lse[:, q0:q1], ref_lse[0])
        dq, dk, dv = ref_grads(one_q, one_k, one_v, dout[None, q0:q1], causal)
        torch.testing.assert_close(q.grad[q0:q1], dq[0].float(), atol=1e-4, rtol=1e-4)
        torch.testing.assert_close(k.grad[k0:k1], dk[0].float(), atol=1e-4, rtol=1e-4)
        torch.testing.assert_close(v.grad[k0:k1], dv[0].float(), atol=1e-4, rtol=1e-4)


@pytest.mark.parametrize("cache_seqlens", [None, 9, "tensor"])
def test_kvcache_matches_attention_over_the_cache_prefix(m, cache_seqlens):
    q, _, _ = qkv(3, 2, 1, 4, 2, 8, seed=4)
    k_cache, v_cache = (torch.randn(3, 16, 2, 8) for _ in range(2))
    lens = {None: [16, 16, 16], 9: [9, 9, 9], "tensor": [16, 1, 7]}[cache_seqlens]
    arg = torch.tensor(lens) if cache_seqlens == "tensor" else cache_seqlens  # int64: converted to int32
    out, lse = m.flash_attn_with_kvcache(q, k_cache, v_cache, cache_seqlens=arg, causal=True, return_softmax_lse=True)
    assert out.shape == q.shape and lse.shape == (3, 4, 2)
    for b, n in enumerate(lens):
        ref, ref_lse = attention_ref(q[b:b + 1], k_cache[b:b + 1, :n], v_cache[b:b + 1, :n], True)
        torch.testing.assert_close(out[b:b + 1], ref)
        torch.testing.assert_close(lse[b:b + 1], ref_lse)
    assert isinstance(m.flash_attn_with_kvcache(q, k_cache, v_cache, cache_seqlens=arg), torch.Tensor)


def test_kvcache_is_forward_only_with_a_clear_error(m):
    q, _, _ = qkv(1, 1, 1, 2, 2, 8, grad=True)
    k_cache, v_cache = (torch.randn(1, 8, 2, 8) for _ in range(2))
    out = m.flash_attn_with_kvcache(q, k_cache, v_cache, cache_seqlens=5)
    with pytest.raises(api.UnsupportedFeatureError, match="backward through flash_attn_with_kvcache"):
        out.sum().backward()
    out, lse = m.flash_attn_with_kvcache(q, k_cache, v_cache, torch.randn(1, 1, 2, 8), torch.randn(1, 1, 2, 8),
                                         cache_seqlens=5, return_softmax_lse=True)  # the op that mutates the cache
    assert not lse.requires_grad
    with pytest.raises(api.UnsupportedFeatureError, match="backward through flash_attn_with_kvcache"):
        (out * 2).sum().backward()


# ---------------------------------------------------------------- builds that lack a direction or a function

def test_a_build_without_bwd_raises_variant_not_built_on_backward():
    m = api.wrap(FakeExtension(directions=("fwd",)))
    q, k, v = qkv(1, 6, 6, 2, 2, 8, grad=True)
    out = m.flash_attn_func(q, k, v)  # the forward works
    with pytest.raises(VariantNotBuiltError, match="bwd_hdim64.*flashbuild --direction bwd"):
        out.sum().backward()


def test_a_binding_without_varlen_names_the_build_and_the_fix():
    ext = FakeExtension(varlen=False)
    m = api.wrap(ext)
    q, cu = _packed([3, 4], 2, 8)
    with pytest.raises(VariantNotBuiltError) as info:
        m.flash_attn_varlen_func(q, q, q, cu, cu, 4, 4)
    message = str(info.value)
    assert "mha_varlen_fwd" in message and f"flashbuild clean {ext.build_key()}" in message


# ---------------------------------------------------------------- local windows and softcap

FEATURE_CALLS = [  # (causal, window_size, softcap)
    (False, (3, 2), 0.0), (True, (4, -1), 0.0), (False, (-1, 1), 0.0), (False, (0, 0), 0.0),
    (False, (-1, -1), 1.5), (True, (5, 0), 0.7),
]


@pytest.mark.parametrize("causal, window, softcap", FEATURE_CALLS)
@pytest.mark.parametrize("shape", SHAPES)
def test_window_and_softcap_forward_and_gradients_match_the_reference(m, shape, causal, window, softcap):
    q, k, v = qkv(*shape, grad=True, seed=sum(shape) + window[0])
    out, lse = m.flash_attn_func(q, k, v, causal=causal, window_size=window, softcap=softcap, return_lse=True)
    ref, ref_lse = attention_ref(q.detach(), k.detach(), v.detach(), causal, window_size=window, softcap=softcap)
    torch.testing.assert_close(out, ref)
    torch.testing.assert_close(lse, ref_lse)
    dout = torch.randn_like(out)
    out.backward(dout)  # the fake's closed-form backward vs autograd through the reference's tanh
    want = ref_grads(q, k, v, dout, causal, window_size=window, softcap=softcap)
    for name, got, grad in zip("qkv", (q.grad, k.grad, v.grad), want):
        torch.testing.assert_close(got, grad.float(), atol=1e-4, rtol=1e-4, msg=f"d{name}")


def test_window_and_softcap_reach_every_raw_function_as_keywords():
    ext = FakeExtension()
    m = api.wrap(ext)
    asked = dict(window_size_left=7, window_size_right=0, softcap=2.5)
    q, k, v = qkv(1, 6, 9, 4, 2, 8, grad=True)
    m.flash_attn_func(q, k, v, window_size=(7, 0), softcap=2.5).sum().backward()  # autograd passes them to bwd
    qp, cu = _packed([4, 5], 2, 8, grad=True)
    m.flash_attn_varlen_func(qp, qp, qp, cu, cu, 5, 5, window_size=[7, 0], softcap=2.5).sum().backward()
    cache = torch.randn(1, 16, 2, 8)
    m.flash_attn_with_kvcache(q[:1, :1].detach(), cache, cache, cache_seqlens=9, window_size=(7, 0), softcap=2.5)
    assert ext.calls == ["flash_attn_func", "mha_bwd", "mha_varlen_fwd", "mha_varlen_bwd", "mha_fwd_kvcache"]
    assert ext.feature_kwargs == [asked] * 5
    assert all(type(kw["softcap"]) is float and type(kw["window_size_left"]) is int for kw in ext.feature_kwargs)
    m.flash_attn_func(q, k, v, causal=True)
    assert ext.feature_kwargs[-1] == NO_FEATURES  # the defaults, passed explicitly


def test_a_feature_the_build_compiled_out_is_the_bindings_error_not_the_wrappers():
    ext = FakeExtension(features=("softcap",))  # built with --no-local
    m = api.wrap(ext)
    q, k, v = qkv(1, 4, 4, 2, 2, 8)
    with pytest.raises(VariantNotBuiltError, match="no local kernel.*without --no-local"):
        m.flash_attn_func(q, k, v, window_size=(2, 0))
    assert ext.calls == ["flash_attn_func"]  # the wrapper did not pre-empt the binding
    m.flash_attn_func(q, k, v, softcap=1.0)  # the feature it holds works


def test_window_and_softcap_are_no_longer_unsupported(m):
    q, k, v = qkv(1, 4, 4, 4, 4, 8)
    for kwargs in (dict(window_size=(128, 0)), dict(softcap=30.0), dict(window_size=(-1, 0), softcap=5.0)):
        m.flash_attn_func(q, k, v, **kwargs)
        m.flash_attn_with_kvcache(q[:, :1], k, v, cache_seqlens=4, **kwargs)


@pytest.mark.parametrize("kwargs, message", [
    (dict(softcap=-1.0), "softcap=-1.0: must be a finite number >= 0"),
    (dict(softcap=float("inf")), "softcap=inf: must be a finite number >= 0"),
    (dict(softcap="30"), "softcap='30': not a number"),
    (dict(window_size=(128,)), "window_size=(128,): not a pair (left, right)"),
    (dict(window_size=128), "window_size=128: not a pair (left, right)"),
    (dict(window_size=(1.5, 0)), "window_size=(1.5, 0): 1.5 is not an int"),
    (dict(window_size=(-2, 0)), "window_size=(-2, 0): -2 is below -1"),
])
def test_bad_window_or_softcap_is_a_clear_error_before_any_kernel(m, fake_ext, kwargs, message):
    q, k, v = qkv(1, 4, 4, 4, 4, 8)
    q_packed, cu = _packed([4], 4, 8)
    before = len(fake_ext.calls)
    for call in (lambda: m.flash_attn_func(q, k, v, **kwargs),
                 lambda: m.flash_attn_varlen_func(q_packed, q_packed, q_packed, cu, cu, 4, 4, **kwargs),
                 lambda: m.flash_attn_with_kvcache(q[:, :1], k, v, cache_seqlens=4, **kwargs)):
        with pytest.raises(api.InvalidArgumentError) as info:
            call()
        assert str(info.value).startswith(f"flashbuild: {message}")
        assert "pass " in str(info.value) and isinstance(info.value, ValueError)
        assert isinstance(info.value, flashbuild.FlashbuildError)
    assert len(fake_ext.calls) == before


# ---------------------------------------------------------------- unsupported features

UNSUPPORTED_DENSE = [
    (dict(dropout_p=0.1), "dropout", "dropout_p=0.1"),
    (dict(alibi_slopes=torch.ones(4)), "ALiBi", "alibi_slopes=tensor of shape (4,)"),
]


@pytest.mark.parametrize("kwargs, feature, asked", UNSUPPORTED_DENSE, ids=[f for _, f, _ in UNSUPPORTED_DENSE])
def test_unsupported_features_raise_a_clear_error(m, fake_ext, kwargs, feature, asked):
    q, k, v = qkv(1, 4, 4, 4, 4, 8)
    q_packed, cu = _packed([4], 4, 8)
    before = len(fake_ext.calls)
    for call in (lambda: m.flash_attn_func(q, k, v, window_size=(2, 0), softcap=1.0, **kwargs),
                 lambda: m.flash_attn_varlen_func(q_packed, q_packed, q_packed, cu, cu, 4, 4, **kwargs)):
        with pytest.raises(api.UnsupportedFeatureError) as info:
            call()
        assert str(info.value).startswith(f"flashbuild: {feature} is not supported by this build's kernels "
                                          f"(asked: {asked})")
        assert isinstance(info.value, NotImplementedError)
    assert len(fake_ext.calls) == before  # refused before any kernel ran


def test_alibi_is_unsupported_by_the_kvcache_too(m, fake_ext):
    q, cache = torch.randn(1, 1, 2, 8), torch.randn(1, 16, 2, 8)
    before = len(fake_ext.calls)
    with pytest.raises(api.UnsupportedFeatureError, match=r"^flashbuild: ALiBi is not supported by this build's "
                                                          r"kernels \(asked: alibi_slopes=tensor of shape \(2,\)\)"):
        m.flash_attn_with_kvcache(q, cache, cache, cache_seqlens=4, alibi_slopes=torch.ones(2))
    assert len(fake_ext.calls) == before


# ---------------------------------------------------------------- deterministic backward

def test_deterministic_reaches_both_backwards_as_a_keyword_and_nothing_else_changes():
    ext = FakeExtension()
    m = api.wrap(ext)
    q, k, v = qkv(1, 6, 9, 4, 2, 8, grad=True)
    out = m.flash_attn_func(q, k, v, causal=True, deterministic=True)  # autograd carries it to the backward
    dout = torch.randn_like(out)
    out.backward(dout)
    qp, cu = _packed([4, 5], 2, 8, grad=True)
    m.flash_attn_varlen_func(qp, qp, qp, cu, cu, 5, 5, deterministic=True).sum().backward()
    assert ext.calls == ["flash_attn_func", "mha_bwd", "mha_varlen_fwd", "mha_varlen_bwd"]
    assert ext.deterministic_kwargs == [True, True]
    for name, got, want in zip("qkv", (q.grad, k.grad, v.grad), ref_grads(q, k, v, dout, True)):
        torch.testing.assert_close(got, want.float(), atol=1e-4, rtol=1e-4, msg=f"d{name}")

    # A default call passes nothing: a binding from before the keyword serves it as before.
    m.flash_attn_func(q, k, v).sum().backward()
    m.flash_attn_varlen_func(qp, qp, qp, cu, cu, 5, 5, deterministic=False).sum().backward()
    assert ext.deterministic_kwargs[2:] == [NOT_PASSED, NOT_PASSED]
    assert ext.feature_kwargs == [NO_FEATURES] * 8


class BindingBeforeDeterministic(FakeExtension):
    """A build whose binding predates deterministic=: its backward takes no such keyword."""

    def mha_bwd(self, dout, q, k, v, out, lse, causal=False, softmax_scale=None, window_size_left=-1,
                window_size_right=-1, softcap=0.0):
        return super().mha_bwd(dout, q, k, v, out, lse, causal, softmax_scale, window_size_left, window_size_right,
                               softcap)


def test_a_binding_without_deterministic_names_the_build_and_the_fix():
    ext = BindingBeforeDeterministic()
    m = api.wrap(ext)
    q, k, v = qkv(1, 5, 5, 2, 2, 8, grad=True)
    m.flash_attn_func(q, k, v).sum().backward()  # the default still works
    out = m.flash_attn_func(q, k, v, deterministic=True)
    with pytest.raises(VariantNotBuiltError) as info:
        out.sum().backward()
    message = str(info.value)
    assert "no deterministic backward" in message and "mha_bwd() takes no deterministic=" in message
    assert f"flashbuild clean {ext.build_key()}" in message and "deterministic=False" in message


class PybindFunction:
    """A raw function as pybind11 makes it: no inspectable signature, the signature as its doc's first line."""

    def __init__(self, doc):
        self.__doc__ = doc

    @property
    def __signature__(self):
        raise ValueError("no signature found for builtin")

    def __call__(self, *args, **kwargs):
        raise AssertionError("not called")


def test_a_pybind_functions_keywords_are_read_from_its_signature_line():
    new = PybindFunction("mha_bwd(dout: torch.Tensor, q: torch.Tensor, softcap: float = 0.0, deterministic: bool = "
                         "False) -> list[torch.Tensor]\n\nGradients (dq, dk, dv) of flash_attn_func.")
    old = PybindFunction("mha_bwd(dout: torch.Tensor, q: torch.Tensor, softcap: float = 0.0) -> list[torch.Tensor]"
                         "\n\nGradients; deterministic: mentioned in the text only")
    assert api._takes_keyword(new, "deterministic") and not api._takes_keyword(old, "deterministic")
    assert api._takes_keyword(new, "softcap") and not api._takes_keyword(PybindFunction(None), "deterministic")


@pytest.mark.parametrize("value", [1, "yes", None, 0.0])
def test_deterministic_must_be_a_bool(m, fake_ext, value):
    q, k, v = qkv(1, 4, 4, 4, 4, 8)
    q_packed, cu = _packed([4], 4, 8)
    before = len(fake_ext.calls)
    for call in (lambda: m.flash_attn_func(q, k, v, deterministic=value),
                 lambda: m.flash_attn_varlen_func(q_packed, q_packed, q_packed, cu, cu, 4, 4, deterministic=value)):
        with pytest.raises(api.InvalidArgumentError, match=rf"^flashbuild: deterministic={value!r}: not a bool; "
                                                           r"pass deterministic=True"):
            call()
    assert len(fake_ext.calls) == before


def test_deterministic_through_torch_compile_fullgraph(fake_ext):
    m = api.wrap(fake_ext)
    q, k, v = qkv(1, 7, 7, 4, 2, 8, grad=True, seed=5)

    def loss(q, k, v):
        return m.flash_attn_func(q, k, v, causal=True, deterministic=True).square().sum()

    torch._dynamo.reset()
    before = len(fake_ext.deterministic_kwargs)
    torch.compile(loss, fullgraph=True, backend="aot_eager")(q, k, v).backward()
    assert fake_ext.deterministic_kwargs[before:] == [True]


# ---------------------------------------------------------------- KV cache: append, rotary, batch index, pages

def kv_inputs(batch=2, seqlen_q=3, nheads=4, nheads_k=2, head_dim=16, capacity=24, seqlen_new=3, rotary_dim=8,
              seed=0):
    gen = torch.Generator().manual_seed(seed)
    randn = lambda *size: torch.randn(*size, generator=gen)  # noqa: E731
    angles = torch.rand(capacity, rotary_dim // 2, generator=gen) * 6.3
    return dict(q=randn(batch, seqlen_q, nheads, head_dim), k_cache=randn(batch, capacity, nheads_k, head_dim),
                v_cache=randn(batch, capacity, nheads_k, head_dim), k=randn(batch, seqlen_new, nheads_k, head_dim),
                v=randn(batch, seqlen_new, nheads_k, head_dim), rotary_cos=angles.cos(), rotary_sin=angles.sin())


def paged(cache, page_size, seed=0):
    """A contiguous (batch, capacity, ...) cache as shuffled pages and the block table that finds them."""
    batch, capacity = cache.shape[:2]
    per_row = capacity // page_size
    table = torch.randperm(batch * per_row, generator=torch.Generator().manual_seed(seed)).view(batch, per_row)
    pages = torch.empty(batch * per_row, page_size, *cache.shape[2:], dtype=cache.dtype)
    pages[table.flatten()] = cache.reshape(batch * per_row, page_size, *cache.shape[2:])
    return pages, table.int()


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("interleaved", [True, False])
def test_kvcache_append_with_rotary_writes_the_cache_in_place(m, fake_ext, causal, interleaved):
    t = kv_inputs()
    lens = torch.tensor([5, 17])
    k_cache, v_cache = t["k_cache"].clone(), t["v_cache"].clone()
    out = m.flash_attn_with_kvcache(t["q"], k_cache, v_cache, t["k"], t["v"], t["rotary_cos"], t["rotary_sin"],
                                    cache_seqlens=lens, causal=causal, rotary_interleaved=interleaved)
    ref, _, ref_k, ref_v = kvcache_ref(t["q"], t["k_cache"], t["v_cache"], t["k"], t["v"], t["rotary_cos"],
                                       t["rotary_sin"], lens, causal=causal, rotary_interleaved=interleaved)
    torch.testing.assert_close(out, ref)
    torch.testing.assert_close(k_cache, ref_k)
    torch.testing.assert_close(v_cache, ref_v)
    assert not torch.equal(k_cache, t["k_cache"])  # written in place
    assert fake_ext.kvcache_kwargs[-1].keys() == ({"k", "v", "rotary_cos", "rotary_sin"} |
                                                  ({"rotary_interleaved"} if not interleaved else set()))
    assert fake_ext.kvcache_kwargs[-1]["k"].dtype == torch.float32


def test_kvcache_paged_and_batch_indexed_caches_match_the_contiguous_one(m):
    t = kv_inputs(capacity=32)
    lens = torch.tensor([9, 20])
    want, *_ = kvcache_ref(t["q"], t["k_cache"], t["v_cache"], t["k"], t["v"], t["rotary_cos"], t["rotary_sin"],
                           lens, causal=True)
    pages_k, table = paged(t["k_cache"], 8)
    pages_v, _ = paged(t["v_cache"], 8)
    got = m.flash_attn_with_kvcache(t["q"], pages_k, pages_v, t["k"], t["v"], t["rotary_cos"], t["rotary_sin"],
                                    cache_seqlens=lens, block_table=table.long(), causal=True)  # int64: converted
    torch.testing.assert_close(got, want)
    rows = torch.tensor([2, 0])  # q's rows 0, 1 use cache rows 2, 0 of a bigger cache
    big_k, big_v = torch.randn(3, 32, 2, 16), torch.randn(3, 32, 2, 16)
    big_k[rows], big_v[rows] = t["k_cache"], t["v_cache"]
    got = m.flash_attn_with_kvcache(t["q"], big_k, big_v, t["k"], t["v"], t["rotary_cos"], t["rotary_sin"],
                                    cache_seqlens=lens, cache_batch_idx=rows, causal=True)
    torch.testing.assert_close(got, want)


def test_kvcache_leftpad_skips_the_leading_rows(m):
    t = kv_inputs()
    lens, leftpad = torch.tensor([10, 6]), torch.tensor([4, 0])
    got = m.flash_attn_with_kvcache(t["q"], t["k_cache"].clone(), t["v_cache"].clone(), t["k"], t["v"],
                                    cache_seqlens=lens, cache_leftpad=leftpad, causal=True)
    # Row 0 attends to its keys 4..12 (10 cached from row 4 on, plus 3 new ones).
    k0 = torch.cat([t["k_cache"][:1, 4:10], t["k"][:1]], dim=1)
    v0 = torch.cat([t["v_cache"][:1, 4:10], t["v"][:1]], dim=1)
    torch.testing.assert_close(got[:1], attention_ref(t["q"][:1], k0, v0, True)[0])


KVCACHE_MISUSE = [
    (dict(k="k"), "k= was given without v="),
    (dict(v="v"), "v= was given without k="),
    (dict(rotary_cos="rotary_cos"), "rotary_cos= was given without rotary_sin="),
    (dict(rotary_cos="rotary_cos", rotary_sin="rotary_sin"), "rotary_cos/rotary_sin rotate the appended keys and q, "
                                                             "so they need k= and v="),
    (dict(k="k", v="v", cache_seqlens=None), "appending k and v needs cache_seqlens"),
    (dict(k="k", v="v", cache_seqlens=22), "cache_seqlens=22 plus 3 new keys does not fit the cache's 24 positions; "
                                           "pass 0 <= cache_seqlens <= 21"),
    (dict(block_table="table", cache_batch_idx="rows"), "a paged cache (block_table) does not take cache_batch_idx"),
    (dict(block_table="table", cache_leftpad="rows"), "a paged cache (block_table) does not take cache_leftpad"),
    (dict(k="k", v="v", rotary_cos="rotary_cos", rotary_sin="rotary_sin", rotary_interleaved=1),
     "rotary_interleaved=1: pass True"),
]


@pytest.mark.parametrize("kwargs, message", KVCACHE_MISUSE, ids=[msg.split(":")[0][:40] for _, msg in KVCACHE_MISUSE])
def test_kvcache_argument_combinations_flash_attn_refuses_are_clear_errors(m, fake_ext, kwargs, message):
    t = kv_inputs()
    named = {**t, "table": torch.zeros(2, 3, dtype=torch.int32), "rows": torch.zeros(2, dtype=torch.int32)}
    call = dict(cache_seqlens=4)
    call.update({key: named[value] if isinstance(value, str) else value for key, value in kwargs.items()})
    before = len(fake_ext.calls)
    with pytest.raises(api.InvalidArgumentError) as info:
        m.flash_attn_with_kvcache(t["q"], t["k_cache"], t["v_cache"], **call)
    assert str(info.value).startswith(f"flashbuild: flash_attn_with_kvcache: {message}"), str(info.value)
    assert "pass" in str(info.value)
    assert len(fake_ext.calls) == before  # refused before any kernel ran


def test_kvcache_append_refuses_a_cache_it_would_have_to_copy(m):
    t = kv_inputs()
    strided = torch.randn(2, 24, 2, 32)[..., ::2]  # head dim stride 2: the wrapper cannot append in place
    with pytest.raises(api.InvalidArgumentError, match="unit stride in the head dim to be appended to in place"):
        m.flash_attn_with_kvcache(t["q"], strided, strided, t["k"], t["v"], cache_seqlens=4)
    out = m.flash_attn_with_kvcache(t["q"], strided, strided, cache_seqlens=4)  # read only: a copy is fine
    torch.testing.assert_close(out, attention_ref(t["q"], strided[:, :4], strided[:, :4])[0])


# ---------------------------------------------------------------- fake implementations

def test_fake_impls_give_exact_shapes_and_dtypes(m):
    from torch._subclasses.fake_tensor import FakeTensorMode

    with FakeTensorMode():
        q = torch.empty(2, 5, 8, 24, dtype=torch.float16)
        k = torch.empty(2, 7, 2, 24, dtype=torch.float16)
        out, lse = m.ops.fwd(q, k, k, True, None, 16, 0, 30.0)
        assert (out.shape, out.dtype, lse.shape, lse.dtype) == ((2, 5, 8, 24), torch.float16, (2, 8, 5), torch.float32)
        assert out.is_contiguous()
        dq, dk, dv = m.ops.bwd(out, q, k, k, out, lse, True, None, 16, 0, 30.0)
        assert (dq.shape, dk.shape, dv.shape, dk.dtype) == ((2, 5, 8, 24), (2, 7, 2, 24), (2, 7, 2, 24), torch.float16)

        qp, kp = torch.empty(11, 8, 24, dtype=torch.bfloat16), torch.empty(13, 2, 24, dtype=torch.bfloat16)
        cu = torch.empty(3, dtype=torch.int32)
        out, lse = m.ops.varlen_fwd(qp, kp, kp, cu, cu, 6, 7, False, 0.5, -1, -1, 0.0)
        assert (out.shape, out.dtype, lse.shape, lse.dtype) == ((11, 8, 24), torch.bfloat16, (8, 11), torch.float32)
        grads = m.ops.varlen_bwd(out, qp, kp, kp, out, lse, cu, cu, 6, 7, False, 0.5, -1, 3, 0.0)
        assert [g.shape for g in grads] == [(11, 8, 24), (13, 2, 24), (13, 2, 24)]

        cache = torch.empty(2, 64, 2, 24, dtype=torch.float16)
        lens = torch.empty(2, dtype=torch.int32)
        out, lse = m.ops.fwd_kvcache(q[:, :1], cache, cache, None, None, None, None, lens, None, None, None, True,
                                     None, True, 0, 32, 0, 50.0)
        assert (out.shape, lse.shape, lse.dtype) == ((2, 1, 8, 24), (2, 8, 1), torch.float32)
        # Appending to a paged cache with rotary: the outputs follow q, whatever the cache's layout.
        pages, new = torch.empty(6, 256, 2, 24, dtype=torch.float16), torch.empty(2, 3, 2, 24, dtype=torch.float16)
        rotary, table = torch.empty(512, 8, dtype=torch.float16), torch.empty(2, 2, dtype=torch.int32)
        out, lse = m.ops.fwd_kvcache(q[:, :3], pages, pages, new, new, rotary, rotary, lens, None, None, table, True,
                                     None, False, 0, -1, -1, 0.0)
        assert (out.shape, lse.shape, lse.dtype) == ((2, 3, 8, 24), (2, 8, 3), torch.float32)


def test_meta_tensors_run_the_fake_impls(m, fake_ext):
    before = len(fake_ext.calls)
    q = torch.empty(1, 3, 4, 8, device="meta", dtype=torch.float16)
    out, lse = m.flash_attn_func(q, q, q, return_lse=True)
    assert out.device.type == "meta" and out.shape == q.shape and lse.shape == (1, 4, 3)
    assert len(fake_ext.calls) == before


@pytest.mark.parametrize("features", [(-1, -1, 0.0), (3, 1, 2.0)], ids=["plain", "window-softcap"])
@pytest.mark.parametrize("op", ["fwd", "varlen_fwd", "fwd_kvcache"])
def test_opcheck_passes(m, op, features):
    """torch.library.opcheck: schema, fake impl vs real outputs, autograd registration, AOT dispatch."""
    if op == "fwd":
        q, k, v = qkv(1, 5, 7, 4, 2, 8, grad=True)
        args = (q, k, v, True, None, *features)
    elif op == "varlen_fwd":
        q, cu_q = _packed([2, 3], 4, 8, grad=True)
        k, cu_k = _packed([4, 3], 2, 8, grad=True)
        args = (q, k, k.detach().clone().requires_grad_(), cu_q, cu_k, 3, 4, True, 0.5, *features)
    else:
        q, k, v = qkv(2, 1, 9, 4, 2, 8)
        args = (q, k, v, None, None, None, None, torch.tensor([9, 4], dtype=torch.int32), None, None, None, True,
                None, True, 0, *features)
    torch.library.opcheck(getattr(m.ops, op), args)


@pytest.mark.parametrize("op", ["fwd", "bwd", "varlen_fwd", "varlen_bwd"])
def test_opcheck_passes_with_deterministic(m, op):
    """The training ops' trailing deterministic argument: in the schema with default False, and
    through autograd (the forwards' backward formula passes it on)."""
    assert "bool deterministic=False" in str(getattr(m.ops, op)._schema)
    q, k, v = qkv(1, 5, 7, 4, 2, 8, grad=True)
    qp, cu_q = _packed([2, 3], 4, 8, grad=True)
    kp, cu_k = _packed([4, 3], 2, 8, grad=True)
    if op == "fwd":
        args = (q, k, v, True, None, -1, -1, 0.0, True)
    elif op == "bwd":
        out, lse = m.ops.fwd(q.detach(), k.detach(), v.detach(), True, None, -1, -1, 0.0)
        args = (torch.randn_like(out), q.detach(), k.detach(), v.detach(), out, lse, True, None, -1, -1, 0.0, True)
    elif op == "varlen_fwd":
        args = (qp, kp, kp.detach().clone().requires_grad_(), cu_q, cu_k, 3, 4, True, 0.5, -1, -1, 0.0, True)
    else:
        out, lse = m.ops.varlen_fwd(qp.detach(), kp.detach(), kp.detach(), cu_q, cu_k, 3, 4, True, 0.5, -1, -1, 0.0)
        args = (torch.randn_like(out), qp.detach(), kp.detach(), kp.detach(), out, lse, cu_q, cu_k, 3, 4, True, 0.5,
                -1, -1, 0.0, True)
    torch.library.opcheck(getattr(m.ops, op), args)


@pytest.mark.parametrize("layout", ["contiguous", "paged"])
def test_opcheck_passes_for_an_append_that_mutates_the_cache(m, layout):
    """The appending call writes k_cache and v_cache: the schema declares it (opcheck fails an op
    that mutates an argument it does not declare)."""
    t = kv_inputs(capacity=32)
    lens = torch.tensor([3, 11], dtype=torch.int32)
    k_cache, v_cache, table = t["k_cache"], t["v_cache"], None
    if layout == "paged":
        (k_cache, table), (v_cache, _) = paged(k_cache, 8), paged(v_cache, 8)
    args = (t["q"], k_cache, v_cache, t["k"], t["v"], t["rotary_cos"], t["rotary_sin"], lens, None, None, table,
            True, None, False, 0, -1, -1, 0.0)
    torch.library.opcheck(m.ops.fwd_kvcache, args)
    assert "Tensor(a1!) k_cache" in str(m.ops.fwd_kvcache._schema)


# ---------------------------------------------------------------- torch.compile

class TinyAttention(torch.nn.Module):
    def __init__(self, m, dim=32, nheads=4, nheads_k=2, window_size=(-1, -1), softcap=0.0):
        super().__init__()
        self.m, self.nheads, self.nheads_k, self.head_dim = m, nheads, nheads_k, dim // nheads
        self.window_size, self.softcap = window_size, softcap
        self.wq = torch.nn.Linear(dim, dim)
        self.wkv = torch.nn.Linear(dim, 2 * nheads_k * self.head_dim)
        self.wo = torch.nn.Linear(dim, dim)

    def forward(self, x):
        b, s, _ = x.shape
        q = self.wq(x).view(b, s, self.nheads, self.head_dim)
        k, v = self.wkv(x).view(b, s, 2, self.nheads_k, self.head_dim).unbind(2)
        out = self.m.flash_attn_func(q, k, v, causal=True, window_size=self.window_size, softcap=self.softcap)
        return self.wo(out.reshape(b, s, -1))


@pytest.mark.parametrize("features", [{}, dict(window_size=(4, 0), softcap=3.0)], ids=["plain", "window-softcap"])
def test_torch_compile_fullgraph_traces_forward_and_backward(m, fake_ext, features):
    torch.manual_seed(0)
    model = TinyAttention(m, **features)
    x = torch.randn(2, 9, 32)
    eager_out = model(x)
    eager_out.sum().backward()
    eager_grads = [p.grad.clone() for p in model.parameters()]
    model.zero_grad()

    torch._dynamo.reset()
    started = time.monotonic()
    compiled = torch.compile(model, fullgraph=True, backend="aot_eager")
    before = len(fake_ext.calls)
    out = compiled(x)
    out.sum().backward()
    print(f"\ntorch.compile(fullgraph=True, aot_eager) forward+backward: {time.monotonic() - started:.1f}s")
    assert fake_ext.calls[before:] == ["flash_attn_func", "mha_bwd"]  # our ops ran, as opaque ops
    assert fake_ext.feature_kwargs[-1] == {**NO_FEATURES, **({"window_size_left": 4, "window_size_right": 0,
                                                                "softcap": 3.0} if features else {})}
    torch.testing.assert_close(out, eager_out)
    for p, want in zip(model.parameters(), eager_grads):
        torch.testing.assert_close(p.grad, want)

    graphs = []
    torch._dynamo.reset()
    torch.compile(model, fullgraph=True, backend=lambda gm, _: graphs.append(gm) or gm)(x)
    assert len(graphs) == 1
    targets = {str(n.target) for n in graphs[0].graph.nodes if n.op == "call_function"}
    assert f"{m.namespace}.fwd.default" in targets


def test_torch_compile_fullgraph_keeps_the_appends_to_the_cache(m, fake_ext):
    """A compiled decoding step writes the caches exactly as the eager one does (the op declares the
    mutation, so functionalization writes it back)."""
    t = kv_inputs()
    lens = torch.tensor([4, 9], dtype=torch.int32)

    def step(q, k_cache, v_cache, k, v, cos, sin):
        return m.flash_attn_with_kvcache(q, k_cache, v_cache, k, v, cos, sin, cache_seqlens=lens, causal=True)

    caches = [(t["k_cache"].clone(), t["v_cache"].clone()) for _ in range(2)]
    eager = step(t["q"], *caches[0], t["k"], t["v"], t["rotary_cos"], t["rotary_sin"])
    torch._dynamo.reset()
    compiled = torch.compile(step, fullgraph=True, backend="aot_eager")(
        t["q"], *caches[1], t["k"], t["v"], t["rotary_cos"], t["rotary_sin"])
    torch.testing.assert_close(compiled, eager)
    for got, want in zip(caches[1], caches[0]):
        torch.testing.assert_close(got, want)
    assert not torch.equal(caches[1][0], t["k_cache"])


# ---------------------------------------------------------------- two builds in one process, and load()

def test_two_builds_register_apart_and_call_their_own_extension():
    a, b = FakeExtension(), FakeExtension(directions=("fwd",))
    ma, mb = api.wrap(a), api.wrap(b)
    assert ma.namespace == a.__name__ != mb.namespace == b.__name__
    assert ma.ops.fwd is not mb.ops.fwd
    q, k, v = qkv(1, 4, 4, 2, 2, 8, grad=True)
    ma.flash_attn_func(q, k, v).sum().backward()
    mb.flash_attn_func(q, k, v)
    assert a.calls == ["flash_attn_func", "mha_bwd"] and b.calls == ["flash_attn_func"]
    assert api.wrap(a) is ma and api.wrap(ma) is ma


def test_a_namespace_serves_one_extension():
    first = FakeExtension()
    api.wrap(first)
    with pytest.raises(flashbuild.FlashbuildError, match="already bound to another module"):
        api.wrap(FakeExtension(first.__name__))


def test_load_returns_the_wrapper_once_per_extension(monkeypatch):
    ext = FakeExtension()
    selection = builder.parse_request(hdim=64, dtype="fp16", arch="sm90")[0]
    monkeypatch.setattr(builder, "parse_request", lambda **kwargs: (selection, None))
    monkeypatch.setattr(builder, "load", lambda selection, options: ext)
    first = flashbuild.load(hdim=64, dtype="fp16", arch="sm90")
    assert isinstance(first, api.AttentionOps) and first.ext is ext
    assert flashbuild.load(hdim=64, dtype="fp16", arch="sm90") is first
