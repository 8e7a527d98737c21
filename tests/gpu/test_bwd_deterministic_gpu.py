"""The deterministic backward (deterministic=True) on a GPU (skipped without a CUDA device): two runs
give the same bits for dq, dk and dv (torch.equal), and the gradients still meet the correctness rule (docs/correctness.md)
against the fp32 reference (max |ours - fp32 ref| <= 2 * max |PyTorch in the input dtype - fp32 ref| +
eps; NaN never passes). Head dims 64 and 128, fp16 and bf16, causal or not, seqlen_q != seqlen_k both
ways, odd seqlens, GQA 8:1, a local window, varlen.

Without the mode dQ's fp32 atomics land in whatever order the CTAs get there; the runs here are long
enough (up to 16 key blocks per query block) that the default mode's dq usually differs between runs:
each test prints whether it did, as a control, without asserting it.

On the Ampere path the mode is compiled into the feature kernel alone (the one that holds local and
softcap; the plain kernel keeps its speed), and the binding sends deterministic calls there, dense or
varlen. On sm90 the Hopper backward's plain kernel (head dims 64-256) holds the mode itself, so there
every test here but the window one runs the Hopper kernel (tests/gpu/test_hopper_bwd_gpu.py profiles it).
test_dense_and_one_sequence_varlen_give_the_same_bits checks that both entry points give the same bits,
and a build without features refuses the mode where its kernel would be the feature kernel (head dim 32),
with the command that builds it.
"""

from __future__ import annotations

import itertools

import pytest

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")

import flashbuild  # noqa: E402
from flashbuild.reference import attention_ref  # noqa: E402

from test_api_gpu import SELECTION as FEATURES_SELECTION  # noqa: E402
from test_api_gpu import check, grads_of, poison_allocator  # noqa: E402

# Both head dims and dtypes with the features compiled in (their kernel holds the mode); the window test
# uses test_api_gpu.py's build (hdim 64 fp16 with local and softcap), so the two files share it.
SELECTION = dict(hdim="64,128", dtype="fp16,bf16", arch="native", direction="fwd,bwd", causal="both",
                 features=["local", "softcap"])
# A build without features, of a head dim every family serves on the Ampere path (32): it has no kernel that
# holds the mode.
PLAIN_SELECTION = dict(hdim=32, dtype="fp16", arch="native", direction="fwd,bwd", causal="off", features=[])
RUNS = 3
DTYPES = {"fp16": torch.float16, "bf16": torch.bfloat16}


@pytest.fixture(scope="module")
def m():
    return flashbuild.load(**SELECTION)


@pytest.fixture(scope="module")
def m_features():
    return flashbuild.load(**FEATURES_SELECTION)


def randn(*shape, dtype, grad=False):
    return torch.randn(*shape, device="cuda", dtype=dtype).requires_grad_(grad)


def backward_runs(out, leaves, dout, runs=RUNS):
    """`runs` backward passes of one forward (its graph kept), each one's (dq, dk, dv)."""
    return [torch.autograd.grad(out, leaves, dout, retain_graph=True) for _ in range(runs)]


def assert_same_bits(runs, what):
    for i, grads in enumerate(runs[1:], start=1):
        for name, first, again in zip(("dq", "dk", "dv"), runs[0], grads):
            assert not torch.isnan(again).any(), f"{what}: {name} NaN in run {i}"
            assert torch.equal(first, again), \
                f"{what}: {name} of run {i} differs from run 0 in {(first != again).sum().item()} elements"


def default_mode_differs(fn, leaves, dout):
    """The control: whether two default-mode backward passes differed in any gradient bit."""
    out = fn(*leaves, deterministic=False)
    first, again = backward_runs(out, leaves, dout, runs=2)
    return any(not torch.equal(a, b) for a, b in zip(first, again))


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("dtype", ["fp16", "bf16"])
@pytest.mark.parametrize("head_dim", [64, 128])
@pytest.mark.parametrize("batch, seqlen_q, seqlen_k, nheads, nheads_k", [
    (2, 2048, 2048, 4, 4),       # 16 key blocks add into every query block (not causal)
    (2, 113, 1023, 8, 8),        # seqlen_k > seqlen_q: causal is bottom-right aligned
    (1, 1023, 113, 8, 8),        # seqlen_q > seqlen_k: causal rows that see no key
    (2, 1023, 1023, 16, 2),      # GQA 8:1 (dk/dv summed over the group), odd seqlen
    (3, 17, 4097, 4, 1),         # MQA, 33 key blocks per query block, one ragged
])
def test_two_deterministic_runs_give_identical_bits(m, batch, seqlen_q, seqlen_k, nheads, nheads_k, head_dim, dtype,
                                                    causal):
    torch.manual_seed(seqlen_q * 7919 + seqlen_k * 31 + nheads_k + head_dim + causal)
    t = DTYPES[dtype]
    q = randn(batch, seqlen_q, nheads, head_dim, dtype=t, grad=True)
    k = randn(batch, seqlen_k, nheads_k, head_dim, dtype=t, grad=True)
    v = randn(batch, seqlen_k, nheads_k, head_dim, dtype=t, grad=True)
    dout = randn(batch, seqlen_q, nheads, head_dim, dtype=t)
    poison_allocator()
    out = m.flash_attn_func(q, k, v, causal=causal, deterministic=True)
    runs = backward_runs(out, (q, k, v), dout)
    torch.cuda.synchronize()
    what = f"b{batch} sq{seqlen_q} sk{seqlen_k} h{nheads}/{nheads_k} d{head_dim} {dtype} causal={causal}"
    assert_same_bits(runs, what)

    ref_grads = grads_of(lambda *x: attention_ref(*x, causal)[0], [x.float() for x in (q, k, v)], dout.float())
    low_grads = grads_of(lambda *x: attention_ref(*x, causal, upcast=False)[0], (q, k, v), dout)
    differs = default_mode_differs(lambda *x, **kw: m.flash_attn_func(*x, causal=causal, **kw), (q, k, v), dout)
    print(f"\n{what}: {RUNS} deterministic runs identical; default mode differed between two runs: {differs}")
    for name, got, ref, low in zip(("dq", "dk", "dv"), runs[0], ref_grads, low_grads):
        assert got.shape == ref.shape and got.dtype == t
        check(name, got, ref, low, "grad")


@pytest.mark.parametrize("causal, window", [(True, (37, 0)), (False, (64, 32)), (False, (-1, 5)), (False, (200, -1))])
def test_a_local_window_is_deterministic_too(m_features, causal, window):
    torch.manual_seed(window[0] + 7 * window[1] + causal)
    q = randn(2, 1023, 8, 64, dtype=torch.float16, grad=True)
    k = randn(2, 1500, 2, 64, dtype=torch.float16, grad=True)
    v = randn(2, 1500, 2, 64, dtype=torch.float16, grad=True)
    dout = randn(2, 1023, 8, 64, dtype=torch.float16)
    poison_allocator()
    out = m_features.flash_attn_func(q, k, v, causal=causal, window_size=window, deterministic=True)
    runs = backward_runs(out, (q, k, v), dout)
    torch.cuda.synchronize()
    assert_same_bits(runs, f"window {window} causal={causal}")
    ref_grads = grads_of(lambda *x: attention_ref(*x, causal, window_size=window)[0], [x.float() for x in (q, k, v)],
                         dout.float())
    low_grads = grads_of(lambda *x: attention_ref(*x, causal, upcast=False, window_size=window)[0], (q, k, v), dout)
    print(f"\nwindow {window} causal={causal}: {RUNS} deterministic runs identical")
    for name, got, ref, low in zip(("dq", "dk", "dv"), runs[0], ref_grads, low_grads):
        check(name, got, ref, low, "grad")


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("head_dim", [64, 128])
def test_varlen_is_deterministic(m, head_dim, causal):
    # Sequences shorter than the longest: their counters past their own blocks stay unused.
    seqlens_q, seqlens_k = [1, 17, 1023, 300], [1, 1100, 113, 300]
    cu_q = torch.tensor([0, *itertools.accumulate(seqlens_q)], device="cuda", dtype=torch.int32)
    cu_k = torch.tensor([0, *itertools.accumulate(seqlens_k)], device="cuda", dtype=torch.int32)
    torch.manual_seed(head_dim + causal)
    q = randn(sum(seqlens_q), 16, head_dim, dtype=torch.float16, grad=True)
    k = randn(sum(seqlens_k), 2, head_dim, dtype=torch.float16, grad=True)
    v = randn(sum(seqlens_k), 2, head_dim, dtype=torch.float16, grad=True)
    dout = randn(sum(seqlens_q), 16, head_dim, dtype=torch.float16)
    poison_allocator()
    out = m.flash_attn_varlen_func(q, k, v, cu_q, cu_k, max(seqlens_q), max(seqlens_k), causal=causal,
                                   deterministic=True)
    runs = backward_runs(out, (q, k, v), dout)
    torch.cuda.synchronize()
    assert_same_bits(runs, f"varlen d{head_dim} causal={causal}")
    print(f"\nvarlen d{head_dim} causal={causal}: {RUNS} deterministic runs identical")
    bounds = zip(zip(cu_q.tolist()[:-1], cu_q.tolist()[1:]), zip(cu_k.tolist()[:-1], cu_k.tolist()[1:]))
    for i, ((q0, q1), (k0, k1)) in enumerate(bounds):
        one = [x.detach()[None, a:b] for x, (a, b) in ((q, (q0, q1)), (k, (k0, k1)), (v, (k0, k1)))]
        want = grads_of(lambda *x: attention_ref(*x, causal)[0], [x.float() for x in one], dout[None, q0:q1].float())
        low = grads_of(lambda *x: attention_ref(*x, causal, upcast=False)[0], one, dout[None, q0:q1])
        dq, dk, dv = runs[0]
        for name, got, w, lo in zip(("dq", "dk", "dv"), (dq[q0:q1], dk[k0:k1], dv[k0:k1]), want, low):
            check(f"seq {i} {name}", got, w[0], lo[0], "grad")


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("head_dim", [64, 128])
def test_dense_and_one_sequence_varlen_give_the_same_bits(m, head_dim, causal):
    """The same data through mha_bwd and mha_varlen_bwd (one sequence, the same out and lse): both
    deterministic calls run the same kernel (the Ampere path's feature kernel; on sm90 the Hopper kernel)
    with the same tile and order, so the bits match.
    No GQA here: its sum over the group is a torch reduction of differently shaped tensors in the two
    calls, which this test is not about."""
    torch.manual_seed(11 + head_dim + causal)
    seqlen_q, seqlen_k, nheads, nheads_k = 1023, 1500, 8, 8
    q = randn(1, seqlen_q, nheads, head_dim, dtype=torch.float16)
    k = randn(1, seqlen_k, nheads_k, head_dim, dtype=torch.float16)
    v = randn(1, seqlen_k, nheads_k, head_dim, dtype=torch.float16)
    dout = randn(1, seqlen_q, nheads, head_dim, dtype=torch.float16)
    out, lse = m.ext.flash_attn_func(q, k, v, causal=causal, return_lse=True)
    dense = m.ext.mha_bwd(dout, q, k, v, out, lse, causal=causal, deterministic=True)
    cu_q = torch.tensor([0, seqlen_q], device="cuda", dtype=torch.int32)
    cu_k = torch.tensor([0, seqlen_k], device="cuda", dtype=torch.int32)
    packed = m.ext.mha_varlen_bwd(dout[0], q[0], k[0], v[0], out[0], lse[0].contiguous(), cu_q, cu_k, seqlen_q,
                                  seqlen_k, causal=causal, deterministic=True)
    torch.cuda.synchronize()
    for name, a, b in zip(("dq", "dk", "dv"), dense, packed):
        assert torch.equal(a[0], b), f"{name}: dense and varlen differ in {(a[0] != b).sum().item()} elements"


def test_a_build_without_features_refuses_the_mode_and_names_the_build_that_has_it():
    m = flashbuild.load(**PLAIN_SELECTION)
    q, k, v, dout = (randn(1, 129, 2, 32, dtype=torch.float16) for _ in range(4))
    out, lse = m.flash_attn_func(q, k, v, return_lse=True)
    with pytest.raises(flashbuild.VariantNotBuiltError) as e:
        m.ext.mha_bwd(dout, q, k, v, out, lse, causal=False, deterministic=True)
    message = str(e.value)
    assert "no deterministic backward" in message and "deterministic=False" in message, message
    assert "flashbuild --hdim 32 --dtype fp16" in message and "--no-local" not in message, message
    dq, dk, dv = m.ext.mha_bwd(dout, q, k, v, out, lse, causal=False)  # the default mode still runs
    assert all(torch.isfinite(g).all() for g in (dq, dk, dv))
