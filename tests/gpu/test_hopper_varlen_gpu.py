"""Packed sequences (cu_seqlens) on the Hopper forward (kernels/hopper: SeqRange in tile_scheduler.h,
the row copy of epilogue.h): every head dim the family serves, causal and not, GQA 8:1 and MQA,
sequence lengths that end inside a tile and tiles past a short sequence's end, held to the fp32
reference per sequence (the correctness rule (docs/correctness.md), as test_fwd_gpu.py holds dense calls) on outputs
poisoned with NaN. A profile of one call shows that the Hopper kernel served it, not an
Ampere-path kernel. Skipped without an sm90 device.
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
from helpers import check_close  # noqa: E402

HDIMS = (32, 64, 96, 128, 192, 256)
SELECTION = dict(hdim=list(HDIMS), dtype="fp16", arch="native", direction="fwd", causal="both", features=[])

# Lengths that end inside a tile (every tile here is 64-192 rows), a sequence of one row, one of a
# single key, and a long one, so the scheduler's tiles cover the longest and run past the others.
SEQLENS_Q = [1, 17, 113, 1023, 64, 300]
SEQLENS_K = [5, 1, 113, 700, 129, 1023]


@pytest.fixture(scope="module")
def m():
    return flashbuild.load(**SELECTION)


def packed(seqlens, nheads, head_dim, dtype=torch.float16):
    return torch.randn(sum(seqlens), nheads, head_dim, device="cuda", dtype=dtype)


def offsets(seqlens):
    return torch.tensor([0, *itertools.accumulate(seqlens)], device="cuda", dtype=torch.int32)


def check(name, out, lse, q, k, v, causal, rows=None):
    """One sequence's out (1, sq, h, d) and lse (1, h, sq) against the fp32 reference; `rows`: only
    those query rows are compared (the reference still sees every row of q)."""
    ref, ref_lse = attention_ref(q, k, v, causal)
    low, low_lse = attention_ref(q, k, v, causal, upcast=False)
    if rows is not None:
        out, ref, low = out[:, rows], ref[:, rows], low[:, rows]
        lse, ref_lse, low_lse = lse[:, :, rows], ref_lse[:, :, rows], low_lse[:, :, rows]
    check_close(f"{name} out", out, ref, low, "out")
    # Rows that see no key have LSE +inf in the reference, and must in ours (the comparator checks it).
    check_close(f"{name} lse", lse, ref_lse, low_lse, "lse")


def run_varlen(m, head_dim, causal, nheads, nheads_k, seed):
    torch.manual_seed(seed)
    q = packed(SEQLENS_Q, nheads, head_dim)
    k, v = packed(SEQLENS_K, nheads_k, head_dim), packed(SEQLENS_K, nheads_k, head_dim)
    cu_q, cu_k = offsets(SEQLENS_Q), offsets(SEQLENS_K)
    poison("cuda", [q.numel() * 2, q.shape[0] * nheads * 4])
    out, lse, _ = m.flash_attn_varlen_func(q, k, v, cu_q, cu_k, max(SEQLENS_Q), max(SEQLENS_K), causal=causal,
                                           return_attn_probs=True)
    return q, k, v, cu_q.tolist(), cu_k.tolist(), out, lse


@pytest.mark.parametrize("nheads, nheads_k", [(16, 2), (8, 1)], ids=["gqa8", "mqa"])
@pytest.mark.parametrize("causal", [False, True], ids=["noncausal", "causal"])
@pytest.mark.parametrize("head_dim", HDIMS)
def test_packed_sequences_match_the_reference(m, head_dim, causal, nheads, nheads_k):
    q, k, v, cu_q, cu_k, out, lse = run_varlen(m, head_dim, causal, nheads, nheads_k, seed=head_dim + causal)
    assert out.shape == q.shape and lse.shape == (nheads, q.shape[0])
    for i, (q0, q1, k0, k1) in enumerate(zip(cu_q, cu_q[1:], cu_k, cu_k[1:])):
        check(f"hdim {head_dim} seq {i} (sq {q1 - q0}, sk {k1 - k0})", out[None, q0:q1], lse[None, :, q0:q1],
              q[None, q0:q1], k[None, k0:k1], v[None, k0:k1], causal)


@pytest.mark.parametrize("head_dim", [64, 256])
def test_the_hopper_kernel_serves_packed_sequences(m, head_dim):
    from torch.profiler import ProfilerActivity, profile

    run_varlen(m, head_dim, False, 8, 2, seed=3)  # built and warm
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        run_varlen(m, head_dim, False, 8, 2, seed=3)
        torch.cuda.synchronize()
    names = [e.name for e in prof.events() if e.device_type.name == "CUDA"]
    attention = [n for n in names if "fwd_kernel" in n]
    print("\n".join(sorted(set(attention))))
    assert attention, f"no forward kernel in the profile: {sorted(set(names))}"
    assert all("hopper" in n for n in attention), f"a packed call ran on another kernel: {attention}"


@pytest.mark.parametrize("causal", [False, True], ids=["noncausal", "causal"])
@pytest.mark.parametrize("head_dim", [64, 128, 256])
def test_nan_and_inf_in_the_next_sequence_stay_there(m, head_dim, causal):
    """Sequence 0's keys end inside a key tile, so its last TMA box of K and V reads sequence 1's first
    rows; they hold NaN and inf. P is 0 there, but 0 * NaN is NaN: the kernel zeroes those V rows
    before P V (mainloop.h, zero_v_rows), so sequence 0 stays finite and right."""
    seqlens_q, seqlens_k = [100, 50], [70, 90]
    torch.manual_seed(head_dim)
    q = packed(seqlens_q, 8, head_dim)
    k, v = packed(seqlens_k, 2, head_dim), packed(seqlens_k, 2, head_dim)
    k[70:], v[70:] = float("nan"), float("inf")
    v[71::2] = float("nan")
    cu_q, cu_k = offsets(seqlens_q), offsets(seqlens_k)
    poison("cuda", [q.numel() * 2, q.shape[0] * 8 * 4])
    out, lse, _ = m.flash_attn_varlen_func(q, k, v, cu_q, cu_k, max(seqlens_q), max(seqlens_k), causal=causal,
                                           return_attn_probs=True)
    check(f"hdim {head_dim} sequence 0 beside NaN and inf", out[None, :100], lse[None, :, :100],
          q[None, :100], k[None, :70], v[None, :70], causal)


@pytest.mark.parametrize("head_dim", [64, 128])
def test_a_causal_first_tile_leaves_the_previous_sequence_alone(m, head_dim):
    """Causal query blocks end at a sequence's last row (SeqRange::bottom_aligned), so a sequence's
    first tile starts inside the previous sequence: sequence 1 (50 rows) takes rows 100 - (block_m - 50)
    .. 149 (22 .. 149 at hdim 128, all 150 rows and 42 before them at hdim 64). Those of sequence 0 are
    computed from its queries against sequence 1's keys and must not be stored. Sequence 0's tile sees 100
    keys and sequence 1's 4000, so a stray store of sequence 1's tile would land after sequence 0's own and
    show in its output; sequence 0's queries hold inf and NaN in one row each, which must stay in that row."""
    seqlens_q, seqlens_k = [100, 50], [100, 4000]
    torch.manual_seed(head_dim + 1)
    q = packed(seqlens_q, 8, head_dim)
    k, v = packed(seqlens_k, 2, head_dim), packed(seqlens_k, 2, head_dim)
    clean = q[:100].clone()
    q[30], q[40] = float("inf"), float("nan")
    cu_q, cu_k = offsets(seqlens_q), offsets(seqlens_k)
    poison("cuda", [q.numel() * 2, q.shape[0] * 8 * 4])
    out, lse, _ = m.flash_attn_varlen_func(q, k, v, cu_q, cu_k, max(seqlens_q), max(seqlens_k), causal=True,
                                           return_attn_probs=True)
    rows = [r for r in range(100) if r not in (30, 40)]
    check(f"hdim {head_dim} sequence 0 (rows without inf or NaN)", out[None, :100], lse[None, :, :100],
          clean[None], k[None, :100], v[None, :100], True, rows=rows)
    check(f"hdim {head_dim} sequence 1 after it", out[None, 100:], lse[None, :, 100:], q[None, 100:],
          k[None, 100:], v[None, 100:], True)
