"""Packed sequences (cu_seqlens) on the Hopper backward (kernels/hopper: SeqRange in tile_scheduler.h, the
row clearing of bwd_mainloop.h, dq_accum's per-sequence blocks in bwd_epilogue.h): every head dim the
family serves, causal and not, GQA 8:1 and MQA, sequence lengths that end inside a tile, key blocks past
a short sequence's end. Each sequence's dQ, dK, dV are held to autograd through the fp32 reference on
that sequence alone (the correctness rule (docs/correctness.md)), on gradient buffers poisoned with NaN; NaN and inf in the
neighbouring sequence must not reach a sequence's gradients; a profile shows the Hopper kernel ran, not
an Ampere-path kernel. The backward gets the reference's out and LSE, so the build is the bwd slice
alone. Skipped without an sm90 device.
"""

from __future__ import annotations

import itertools

import pytest

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.skipif(not torch.cuda.is_available() or torch.cuda.get_device_capability() != (9, 0),
                                reason="needs an sm90 GPU (the Hopper family)")

import flashbuild  # noqa: E402
from flashbuild.debug.checking import poison  # noqa: E402
from flashbuild.reference import attention_ref  # noqa: E402
from helpers import check_close as check  # noqa: E402

HDIMS = (64, 96, 128, 192, 256)
SELECTION = dict(hdim=list(HDIMS), dtype="fp16", arch="native", direction="bwd", causal="both", features=[])

# Lengths that end inside a tile (64-128 rows), one row, one key, and long ones, so that the grid's key
# blocks and query blocks run past the short sequences' ends.
SEQLENS_Q = [1, 17, 113, 1023, 64, 300]
SEQLENS_K = [5, 1, 113, 700, 129, 1023]


@pytest.fixture(scope="module")
def m():
    return flashbuild.load(**SELECTION)


def offsets(seqlens):
    return torch.tensor([0, *itertools.accumulate(seqlens)], device="cuda", dtype=torch.int32)


def references(q, k, v, dout, causal):
    """Per sequence: (out, lse, fp32 grads, fp16 grads) of the reference on that sequence alone."""
    leaves32 = [t.float().requires_grad_() for t in (q, k, v)]
    out32, lse32 = attention_ref(*leaves32, causal)
    grads32 = torch.autograd.grad(out32, leaves32, dout.float())
    leaves_low = [t.clone().requires_grad_() for t in (q, k, v)]
    grads_low = torch.autograd.grad(attention_ref(*leaves_low, causal, upcast=False)[0], leaves_low, dout)
    return out32.detach(), lse32.detach(), grads32, grads_low


def packed_backward(m, q, k, v, dout, seqlens_q, seqlens_k, causal):
    """The kernel's packed dq, dk, dv and each sequence's references."""
    cu_q, cu_k = offsets(seqlens_q), offsets(seqlens_k)
    refs, outs, lses = [], [], []
    for (q0, q1), (k0, k1) in zip(itertools.pairwise([0, *itertools.accumulate(seqlens_q)]),
                                  itertools.pairwise([0, *itertools.accumulate(seqlens_k)])):
        ref = references(q[None, q0:q1], k[None, k0:k1], v[None, k0:k1], dout[None, q0:q1], causal)
        refs.append(((q0, q1), (k0, k1), ref))
        outs.append(ref[0][0])
        lses.append(ref[1][0])
    out = torch.cat(outs).to(q.dtype)
    lse = torch.cat(lses, dim=1).contiguous()  # (nheads, total_q)
    poison("cuda", [q.numel() * q.element_size(), k.shape[0] * q.shape[1] * q.shape[2] * q.element_size()])
    dq, dk, dv = m.mha_varlen_bwd(dout, q, k, v, out, lse, cu_q, cu_k, max(seqlens_q), max(seqlens_k), causal=causal)
    torch.cuda.synchronize()
    return (dq, dk, dv), refs


def check_sequence(i, grads, span, causal, head_dim):
    (q0, q1), (k0, k1), (_, _, grads32, grads_low) = span
    dq, dk, dv = grads
    group = dq.shape[1] // dk.shape[1]
    for name, got, ref, low in zip(("dq", "dk", "dv"), (dq[q0:q1], dk[k0:k1], dv[k0:k1]), grads32, grads_low):
        check(f"hdim {head_dim} causal={causal} seq {i} (sq {q1 - q0}, sk {k1 - k0}, group {group}) {name}",
              got, ref[0], low[0])


@pytest.mark.parametrize("causal", [False, True], ids=["noncausal", "causal"])
@pytest.mark.parametrize("nheads, nheads_k", [(16, 2), (8, 1)], ids=["gqa8", "mqa"])
@pytest.mark.parametrize("head_dim", HDIMS)
def test_each_sequence_matches_the_fp32_reference(m, head_dim, nheads, nheads_k, causal):
    torch.manual_seed(head_dim * 10 + nheads_k + causal)
    tq, tk = sum(SEQLENS_Q), sum(SEQLENS_K)
    q = torch.randn(tq, nheads, head_dim, device="cuda", dtype=torch.float16)
    k, v = (torch.randn(tk, nheads_k, head_dim, device="cuda", dtype=torch.float16) for _ in range(2))
    dout = torch.randn(tq, nheads, head_dim, device="cuda", dtype=torch.float16)
    grads, refs = packed_backward(m, q, k, v, dout, SEQLENS_Q, SEQLENS_K, causal)
    for i, span in enumerate(refs):
        check_sequence(i, grads, span, causal, head_dim)


@pytest.mark.parametrize("causal", [False, True], ids=["noncausal", "causal"])
@pytest.mark.parametrize("head_dim", [64, 128, 256])
def test_nan_and_inf_in_the_next_sequence_stay_there(m, head_dim, causal):
    """Sequence 0 ends inside a query block and a key block, so its last boxes of Q, dO, K and V read
    sequence 1's first rows; they hold NaN and inf. Its P and dS are 0 there, but 0 * NaN is NaN: the
    kernel clears those rows before any product reads them (bwd_mainloop.h, clear_qdo_tail and
    clear_kv_tail), so sequence 0's gradients stay finite and right."""
    seqlens_q, seqlens_k = [100, 50], [70, 90]
    torch.manual_seed(head_dim + causal)
    q = torch.randn(sum(seqlens_q), 8, head_dim, device="cuda", dtype=torch.float16)
    k, v = (torch.randn(sum(seqlens_k), 2, head_dim, device="cuda", dtype=torch.float16) for _ in range(2))
    dout = torch.randn_like(q)
    q[100:], dout[100:] = float("nan"), float("inf")
    k[70:], v[70:] = float("inf"), float("nan")
    grads, refs = packed_backward(m, q, k, v, dout, seqlens_q, seqlens_k, causal)
    check_sequence(0, grads, refs[0], causal, head_dim)


@pytest.mark.parametrize("head_dim", [64, 256])
def test_the_hopper_kernel_serves_packed_sequences(m, head_dim):
    from torch.profiler import ProfilerActivity, profile

    q = torch.randn(sum(SEQLENS_Q), 8, head_dim, device="cuda", dtype=torch.float16)
    k, v = (torch.randn(sum(SEQLENS_K), 2, head_dim, device="cuda", dtype=torch.float16) for _ in range(2))
    dout = torch.randn_like(q)
    packed_backward(m, q, k, v, dout, SEQLENS_Q, SEQLENS_K, False)  # built and warm
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        packed_backward(m, q, k, v, dout, SEQLENS_Q, SEQLENS_K, False)
    names = sorted({e.name for e in prof.events() if e.device_type.name == "CUDA" and "bwd_kernel" in e.name})
    print("\n".join(names))
    assert names, "no backward kernel in the profile"
    assert all("hopper" in n for n in names), f"a packed call ran on another kernel: {names}"


@pytest.mark.parametrize("causal", [False, True], ids=["noncausal", "causal"])
@pytest.mark.parametrize("head_dim", [64, 256])
def test_empty_sequences_give_zero_gradients(m, head_dim, causal):
    """A sequence with no queries (its keys get dK = dV = 0) and one with no keys (its queries get dQ = 0, as
    the forward gives them out 0 and LSE +inf), between sequences that are checked against the reference."""
    seqlens_q, seqlens_k = [0, 37, 5, 90], [20, 0, 33, 90]
    torch.manual_seed(head_dim + causal)
    q = torch.randn(sum(seqlens_q), 8, head_dim, device="cuda", dtype=torch.float16)
    k, v = (torch.randn(sum(seqlens_k), 2, head_dim, device="cuda", dtype=torch.float16) for _ in range(2))
    dout = torch.randn_like(q)
    spans = list(zip(itertools.pairwise([0, *itertools.accumulate(seqlens_q)]),
                     itertools.pairwise([0, *itertools.accumulate(seqlens_k)])))
    outs, lses, refs = [], [], {}
    for i, ((q0, q1), (k0, k1)) in enumerate(spans):
        if q1 == q0:
            continue
        if k1 == k0:  # no keys: the forward's out 0 and LSE +inf
            outs.append(torch.zeros(q1 - q0, 8, head_dim, device="cuda"))
            lses.append(torch.full((8, q1 - q0), float("inf"), device="cuda"))
            continue
        ref = references(q[None, q0:q1], k[None, k0:k1], v[None, k0:k1], dout[None, q0:q1], causal)
        refs[i] = ((q0, q1), (k0, k1), ref)
        outs.append(ref[0][0])
        lses.append(ref[1][0])
    out, lse = torch.cat(outs).to(q.dtype), torch.cat(lses, dim=1).contiguous()
    poison("cuda", [q.numel() * q.element_size(), k.shape[0] * q.shape[1] * q.shape[2] * q.element_size()])
    dq, dk, dv = m.mha_varlen_bwd(dout, q, k, v, out, lse, offsets(seqlens_q), offsets(seqlens_k), max(seqlens_q),
                                  max(seqlens_k), causal=causal)
    torch.cuda.synchronize()
    assert torch.count_nonzero(dk[0:20]) == 0 and torch.count_nonzero(dv[0:20]) == 0, "keys that no query sees"
    assert torch.count_nonzero(dq[0:37]) == 0, "queries that see no key"
    for i, span in refs.items():
        check_sequence(i, (dq, dk, dv), span, causal, head_dim)
