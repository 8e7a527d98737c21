"""The Hopper backward's newer head dims (kernels/hopper/bwd_traits.h): 96 (BwdSplit::kKeys, the dQ halves
on our m64n48k16 atom and the 32-byte swizzle) and 192, 256 (BwdSplit::kHeadDim: 64 keys per CTA, P^T and
dS^T through shared memory). Gradients against autograd through the fp32 reference (the correctness rule (docs/correctness.md):
within twice the error of the same math in the input dtype), on gradient buffers poisoned with NaN, for
long and odd sequences, GQA and MQA, seqlen_q != seqlen_k and causal rows that see no key (their dQ
must be 0, not NaN); a profile shows the Hopper kernel ran, not an Ampere-path kernel. Deterministic
mode on the Hopper kernel (kFragment's consumer turns at 192/256, the dQ writer's at 96): three runs give
identical bits, and the gradients meet the same rule.
Features on the Hopper kernel (a build of its own, local + softcap, head dims 64-256, fp16 and bf16: both
BwdSplits, all three dQ orders): local windows, softcap (2.0 saturates tanh on standard-normal inputs, 30.0 barely) and
both, against the same reference with the same window and softcap; rows that see no key get dQ exactly 0
and keys no row sees dK, dV exactly 0; deterministic mode under a window gives identical bits; a profile
shows the Hopper kernel ran for a call with both features on.
`flashbuild test --shapes full` checks the same build on its own shapes. Skipped without an sm90 device.
"""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.skipif(not torch.cuda.is_available() or torch.cuda.get_device_capability() != (9, 0),
                                reason="needs an sm90 GPU (the Hopper family)")

import flashbuild  # noqa: E402
from flashbuild.debug.checking import poison  # noqa: E402
from flashbuild.reference import attention_ref, hidden_keys  # noqa: E402
from flashbuild.selection.variants import feature_kwargs  # noqa: E402
from helpers import check_close as check  # noqa: E402

HDIMS = (96, 192, 256)
SELECTION = dict(hdim=list(HDIMS), dtype=["fp16", "bf16"], arch="native", direction="bwd", causal="both",
                 features=[])
DTYPES = {"fp16": torch.float16, "bf16": torch.bfloat16}


@pytest.fixture(scope="module")
def m():
    return flashbuild.load(**SELECTION)


def backward(m, batch, seqlen_q, seqlen_k, nheads, nheads_k, head_dim, dtype, causal, seed, deterministic=False,
             runs=1, window=(-1, -1), softcap=0.0):
    """(kernel's grads, fp32 grads, input-dtype grads) of one mha_bwd call, given the reference's out/lse;
    with runs > 1 the kernel's grads of each run (the same inputs). window / softcap: the call's and the
    reference's (flashbuild test's feature checks build theirs the same way)."""
    torch.manual_seed(seed)
    q = torch.randn(batch, seqlen_q, nheads, head_dim, device="cuda", dtype=dtype)
    k = torch.randn(batch, seqlen_k, nheads_k, head_dim, device="cuda", dtype=dtype)
    v = torch.randn(batch, seqlen_k, nheads_k, head_dim, device="cuda", dtype=dtype)
    dout = torch.randn(batch, seqlen_q, nheads, head_dim, device="cuda", dtype=dtype)
    leaves32 = [t.float().requires_grad_() for t in (q, k, v)]
    features = dict(window_size=window, softcap=softcap)
    out32, lse32 = attention_ref(*leaves32, causal, **features)
    grads32 = torch.autograd.grad(out32, leaves32, dout.float())
    leaves_low = [t.clone().requires_grad_() for t in (q, k, v)]
    grads_low = torch.autograd.grad(attention_ref(*leaves_low, causal, upcast=False, **features)[0], leaves_low, dout)
    poison("cuda", [q.numel() * q.element_size(), batch * seqlen_k * nheads * head_dim * q.element_size()])
    out, lse = out32.detach().to(dtype), lse32.detach()
    got = [m.mha_bwd(dout, q, k, v, out, lse, causal=causal, deterministic=deterministic,
                     **feature_kwargs(window, softcap)) for _ in range(runs)]
    torch.cuda.synchronize()
    return (got[0] if runs == 1 else got), grads32, grads_low


CASES = [  # batch, seqlen_q, seqlen_k, nheads, nheads_k
    (1, 4097, 4097, 2, 2),   # many query and key blocks, one row past the last whole block
    (2, 1, 1, 4, 4),         # one query, one key
    (2, 113, 1023, 16, 2),   # GQA 8:1, seqlen_q < seqlen_k
    (1, 1023, 113, 8, 1),    # MQA, seqlen_q > seqlen_k: causal rows that see no key
    (3, 65, 64, 4, 4),       # one whole key block, a query row past a whole block
]


@pytest.mark.parametrize("causal", [False, True], ids=["noncausal", "causal"])
@pytest.mark.parametrize("dtype", list(DTYPES))
@pytest.mark.parametrize("head_dim", HDIMS)
@pytest.mark.parametrize("case", CASES, ids=lambda c: "b{}-sq{}-sk{}-h{}-{}".format(*c))
def test_gradients_match_the_fp32_reference(m, case, head_dim, dtype, causal):
    batch, seqlen_q, seqlen_k, nheads, nheads_k = case
    got, ref, low = backward(m, *case, head_dim, DTYPES[dtype], causal, seed=sum(case) + head_dim + causal)
    for name, g, r, lo in zip(("dq", "dk", "dv"), got, ref, low):
        assert g.shape == r.shape and g.dtype == DTYPES[dtype]
        check(f"{name} d{head_dim} {dtype} causal={causal} {case}", g, r, lo)
    if causal and seqlen_q > seqlen_k:
        # Bottom-right aligned: the first seqlen_q - seqlen_k query rows see no key.
        assert torch.count_nonzero(got[0][:, :seqlen_q - seqlen_k]) == 0, "rows that see no key got a nonzero dQ"


def backward_kernels(m, *args, **kwargs):
    """The main backward kernels a profiled (warm) call ran."""
    from torch.profiler import ProfilerActivity, profile

    backward(m, *args, **kwargs)  # warm
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        backward(m, *args, **kwargs)
        torch.cuda.synchronize()
    names = sorted({e.name for e in prof.events() if e.device_type.name == "CUDA" and "bwd" in e.name})
    print("\n".join(names))
    main = [n for n in names if "bwd_kernel" in n]
    assert main, f"no backward kernel in the profile: {names}"
    return main


@pytest.mark.parametrize("deterministic", [False, True], ids=["default", "deterministic"])
@pytest.mark.parametrize("head_dim", HDIMS)
def test_the_hopper_kernel_serves_the_backward(m, head_dim, deterministic):
    main = backward_kernels(m, 2, 300, 300, 4, 2, head_dim, torch.float16, True, 1, deterministic)
    assert all("hopper" in n for n in main), f"the call ran on another kernel: {main}"


@pytest.mark.parametrize("causal", [False, True], ids=["noncausal", "causal"])
@pytest.mark.parametrize("head_dim", HDIMS)
@pytest.mark.parametrize("case", [
    (2, 1023, 1023, 8, 2),   # GQA 4:1, 16 key blocks per query block, odd seqlen
    (1, 300, 2049, 4, 4),    # seqlen_q < seqlen_k: 33 key blocks, one ragged
    (1, 2049, 300, 4, 1),    # MQA, seqlen_q > seqlen_k: causal rows that see no key
], ids=lambda c: "b{}-sq{}-sk{}-h{}-{}".format(*c))
def test_deterministic_mode_gives_identical_bits(m, case, head_dim, causal):
    runs, ref, low = backward(m, *case, head_dim, torch.float16, causal, seed=sum(case) + head_dim + causal,
                              deterministic=True, runs=3)
    what = f"d{head_dim} causal={causal} {case}"
    for i, again in enumerate(runs[1:], start=1):
        for name, first, g in zip(("dq", "dk", "dv"), runs[0], again):
            assert torch.equal(first, g), f"{what}: {name} of run {i} differs in {(first != g).sum().item()} elements"
    for name, g, r, lo in zip(("dq", "dk", "dv"), runs[0], ref, low):
        check(f"{name} {what} deterministic", g, r, lo)


# ---------------------------------------------------------------- local windows and softcap

FEATURE_HDIMS = (64, 128, 192, 256)  # kKeys (kFragmentBulk), kHeadDim with kFragmentBulk (192) and kFragment (256)
FEATURE_SELECTION = dict(hdim=list(FEATURE_HDIMS), dtype=["fp16", "bf16"], arch="native", direction="bwd", causal="both",
                         features=["local", "softcap"])


@pytest.fixture(scope="module")
def mf():
    return flashbuild.load(**FEATURE_SELECTION)


# (window_size, softcap) of the calls: a causal call sets right = 0 (the binding) and keeps left.
FEATURE_CALLS = {
    False: [((64, 32), 0.0), ((-1, 5), 0.0), ((37, 0), 0.0), ((0, 0), 0.0), ((-1, -1), 2.0), ((-1, -1), 30.0),
            ((64, 32), 2.0)],
    True: [((37, 0), 0.0), ((-1, -1), 2.0), ((37, 0), 30.0)],
}
FEATURE_CASES = [  # batch, seqlen_q, seqlen_k, nheads, nheads_k
    (2, 17, 17, 4, 4),       # odd seqlen, one partial block
    (2, 113, 1023, 16, 2),   # GQA 8:1, seqlen_q < seqlen_k: keys before every row's window
    (1, 1023, 113, 8, 1),    # MQA, seqlen_q > seqlen_k: rows that see no key under a right edge
    (1, 1023, 1023, 4, 4),   # many blocks: windows that skip whole key and query blocks
]


def feature_call_id(call):
    (left, right), softcap = call
    return f"w{left},{right}" + (f"-cap{softcap:g}" if softcap else "")


@pytest.mark.parametrize("call", [(c, w) for c in (False, True) for w in FEATURE_CALLS[c]],
                         ids=lambda cw: ("causal-" if cw[0] else "") + feature_call_id(cw[1]))
@pytest.mark.parametrize("dtype", list(DTYPES))
@pytest.mark.parametrize("head_dim", FEATURE_HDIMS)
@pytest.mark.parametrize("case", FEATURE_CASES, ids=lambda c: "b{}-sq{}-sk{}-h{}-{}".format(*c))
def test_feature_gradients_match_the_fp32_reference(mf, case, head_dim, dtype, call):
    causal, (window, softcap) = call
    batch, seqlen_q, seqlen_k, nheads, nheads_k = case
    got, ref, low = backward(mf, *case, head_dim, DTYPES[dtype], causal, seed=sum(case) + head_dim + causal,
                             window=window, softcap=softcap)
    what = f"d{head_dim} {dtype} causal={causal} window={window} softcap={softcap:g} {case}"
    for name, g, r, lo in zip(("dq", "dk", "dv"), got, ref, low):
        assert g.shape == r.shape and g.dtype == DTYPES[dtype]
        check(f"{name} {what}", g, r, lo)
    hidden = hidden_keys(seqlen_q, seqlen_k, causal, window, device="cuda")
    if hidden is not None:
        blind_rows = hidden.all(dim=1)  # rows that see no key: LSE +inf, P = 0
        unseen_keys = hidden.all(dim=0)  # keys no row sees: a key block with no query block, or masked in all
        assert torch.count_nonzero(got[0][:, blind_rows]) == 0, f"{what}: rows that see no key got a nonzero dQ"
        for name, g in zip(("dk", "dv"), got[1:]):
            assert torch.count_nonzero(g[:, unseen_keys]) == 0, f"{what}: keys no row sees got a nonzero {name}"


@pytest.mark.parametrize("call", [(False, ((64, 32), 2.0)), (True, ((37, 0), 0.0)), (False, ((-1, 5), 30.0))],
                         ids=lambda cw: ("causal-" if cw[0] else "") + feature_call_id(cw[1]))
@pytest.mark.parametrize("head_dim", FEATURE_HDIMS)
@pytest.mark.parametrize("case", [
    (2, 1023, 1023, 8, 2),   # GQA 4:1, odd seqlen: a window spans several key blocks per query block
    (1, 300, 2049, 4, 4),    # seqlen_q < seqlen_k: key blocks no query block sees, one ragged
    (1, 2049, 300, 4, 1),    # MQA, seqlen_q > seqlen_k: query blocks no key block sees
], ids=lambda c: "b{}-sq{}-sk{}-h{}-{}".format(*c))
def test_deterministic_mode_with_features_gives_identical_bits(mf, case, head_dim, call):
    """The turns under a local mask: the key blocks of a window, descending (common/bwd_dq_order.h)."""
    causal, (window, softcap) = call
    runs, ref, low = backward(mf, *case, head_dim, torch.float16, causal, seed=sum(case) + head_dim + causal,
                              deterministic=True, runs=2, window=window, softcap=softcap)
    what = f"d{head_dim} causal={causal} window={window} softcap={softcap:g} {case}"
    for name, first, again in zip(("dq", "dk", "dv"), *runs):
        assert torch.equal(first, again), f"{what}: {name} of run 1 differs in {(first != again).sum().item()} elements"
    for name, g, r, lo in zip(("dq", "dk", "dv"), runs[0], ref, low):
        check(f"{name} {what} deterministic", g, r, lo)


@pytest.mark.parametrize("deterministic", [False, True], ids=["default", "deterministic"])
@pytest.mark.parametrize("head_dim", FEATURE_HDIMS)
def test_the_hopper_kernel_serves_a_feature_call(mf, head_dim, deterministic):
    main = backward_kernels(mf, 2, 300, 300, 4, 2, head_dim, torch.float16, False, 1, deterministic,
                            window=(64, 32), softcap=2.0)
    assert all("hopper" in n for n in main), f"the call ran on another kernel: {main}"
