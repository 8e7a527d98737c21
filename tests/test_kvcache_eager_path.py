"""flash_attn_with_kvcache's eager path (flashbuild/api.py, _plain_eager): a plain eager call on tensors that need
no gradient calls the binding itself, skipping its custom op's dispatch (tens of microseconds, more than a small
decode kernel); every other call (torch.compile, FakeTensorMode, a dispatch mode, inputs that need a gradient)
goes through the op as before. Both give the same outputs and cache writes; the eager path bumps the caches'
version counters as the op's mutates_args does. On CPU, with test_api's fake extension."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from flashbuild import api  # noqa: E402
from flashbuild.api import UnsupportedFeatureError  # noqa: E402

from test_api import FakeExtension, kv_inputs  # noqa: E402


class CountingOps:
    """Wraps the _Ops of a wrapper so a test sees whether the op ran."""

    def __init__(self, ops):
        self.inner, self.calls = ops, 0

    def __getattr__(self, name):
        return getattr(self.inner, name)

    @property
    def fwd_kvcache(self):
        self.calls += 1
        return self.inner.fwd_kvcache


@pytest.fixture(scope="module")
def wrapper():
    wrapper = api.wrap(FakeExtension("_flashbuild_test_eager_path"))
    wrapper.ops = CountingOps(wrapper.ops)
    return wrapper


@pytest.fixture()
def m(wrapper):
    wrapper.ops.calls = 0
    return wrapper


def test_a_plain_eager_call_skips_the_op_and_matches_it(m):
    t = kv_inputs()
    lens = torch.tensor([5, 17], dtype=torch.int32)
    caches = [(t["k_cache"].clone(), t["v_cache"].clone()) for _ in range(2)]
    versions = caches[0][0]._version, caches[0][1]._version
    eager = m.flash_attn_with_kvcache(t["q"], *caches[0], k=t["k"], v=t["v"], rotary_cos=t["rotary_cos"],
                                      rotary_sin=t["rotary_sin"], cache_seqlens=lens, return_softmax_lse=True)
    assert m.ops.calls == 0
    assert caches[0][0]._version > versions[0] and caches[0][1]._version > versions[1]
    through_op = m.ops.fwd_kvcache(t["q"], *caches[1], t["k"], t["v"], t["rotary_cos"], t["rotary_sin"], lens, None,
                                   None, None, False, None, True, 0, -1, -1, 0.0)
    for a, b in zip(eager, through_op):
        assert torch.equal(a, b)
    assert torch.equal(caches[0][0], caches[1][0]) and torch.equal(caches[0][1], caches[1][1])


def test_inputs_that_need_a_gradient_take_the_op_and_its_clear_error(m):
    t = kv_inputs()
    q = t["q"].requires_grad_()
    out = m.flash_attn_with_kvcache(q, t["k_cache"], t["v_cache"], cache_seqlens=torch.tensor([5, 17]))
    assert m.ops.calls == 1
    with pytest.raises(UnsupportedFeatureError, match="backward through flash_attn_with_kvcache"):
        out.sum().backward()


def test_fake_tensors_and_dispatch_modes_take_the_op(m):
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.utils._python_dispatch import TorchDispatchMode

    class Passthrough(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            return func(*args, **(kwargs or {}))

    t = kv_inputs()
    with Passthrough():
        m.flash_attn_with_kvcache(t["q"], t["k_cache"], t["v_cache"])
    assert m.ops.calls == 1
    with FakeTensorMode() as mode:
        q, k_cache, v_cache = (mode.from_tensor(t[name]) for name in ("q", "k_cache", "v_cache"))
        out = m.flash_attn_with_kvcache(q, k_cache, v_cache)
    assert m.ops.calls == 2 and out.shape == t["q"].shape


def test_torch_compile_records_the_op(m):
    t = kv_inputs()
    lens = torch.tensor([5, 17], dtype=torch.int32)
    compiled = torch.compile(lambda q, kc, vc: m.flash_attn_with_kvcache(q, kc, vc, cache_seqlens=lens),
                             fullgraph=True, backend="eager")
    out = compiled(t["q"], t["k_cache"], t["v_cache"])
    assert m.ops.calls >= 1
    assert torch.equal(out, m.flash_attn_with_kvcache(t["q"], t["k_cache"], t["v_cache"], cache_seqlens=lens))
