"""The causal Hopper forward on calls with few query blocks per head and many heads, where the persistent
scheduler deals pairs of query blocks (m, M - 1 - m) of one (batch, head) before a longest-first tail
(PersistentTileScheduler::pair_rounds, kernels/hopper/tile_scheduler.h): every query block must be computed
exactly once, in the pair phase or the tail, with an even and an odd number of blocks per head, the tail
starting inside a head's pairs, and the keys longer than the queries (the mask's bottom-right corner). Each
shape runs under every FLASHBUILD_HOPPER_FWD_PAIRS setting (read by the launcher at every launch,
kernels/hopper/fwd_launch.h): the default (empty: pairs at every length, one round of pairs left to the
longest-first tail up to 32 query blocks a head, two past it), short (pairs up to 32 query blocks a head), all (at
every length, one round left to the tail), off (longest first alone), all:2 and all:3 (two and three rounds left);
the shapes past 16 query blocks a head (MID) pair under short and the rest, those past 32 (LONG) under every
setting but short and off. The shapes are chosen so that the pair phase runs on this GPU where the setting pairs
(the test says so if it cannot). At hdim 192 and 256 the same calls walk many tiles whose O leaves through V's ring
(FwdTraits::kOAliasesV). Held to the fp32 reference as docs/correctness.md states it; the settings give the
same bits (they only reorder whole tiles); a setting the launcher does not know is a named error. Skipped
without a CUDA device.
"""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")

import flashbuild  # noqa: E402
from flashbuild.reference import attention_ref  # noqa: E402

BLOCK_M = {64: 192, 128: 128, 192: 128, 256: 128}  # fwd_tile() in kernels/hopper/fwd_traits.h
ENV = "FLASHBUILD_HOPPER_FWD_PAIRS"
# The most query blocks a head each setting pairs (fwd_pairs() in kernels/hopper/fwd_pairs.h; short:
# kPairMaxBlocks there); `NAME:N` leaves N rounds of pairs to the tail instead of 1; "" is the default (unset).
PAIR_MAX_BLOCKS = {"": 1 << 31, "short": 32, "all": 1 << 31, "off": 0}
SETTINGS = ["", "short", "all", "off", "all:2", "all:3"]


@pytest.fixture(scope="module")
def m():
    # One build of every head dim here, causal both (the selection `flashbuild test --causal both` builds).
    return flashbuild.load(hdim="64,128,192,256", dtype="fp16", arch="native", direction="fwd", causal="both",
                           features=[])


def pair_rounds(setting, seqlen_q, hdim, heads_batches):
    """The scheduler's rounds of pairs on this GPU under this setting (make() in tile_scheduler.h)."""
    name, _, tail = setting.partition(":")
    m_blocks = -(-seqlen_q // BLOCK_M[hdim])
    tail = int(tail or (2 if name == "" and m_blocks > PAIR_MAX_BLOCKS["short"] else 1))
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    grid = min(m_blocks * heads_batches, sms)
    units = (m_blocks // 2) * heads_batches
    return units // grid - tail if 2 <= m_blocks <= PAIR_MAX_BLOCKS[name] and units // grid > tail else 0


def check(name, out, lse, q, k, v):
    ref, ref_lse = attention_ref(q, k, v, causal=True)
    low, low_lse = attention_ref(q, k, v, causal=True, upcast=False)
    assert not torch.isnan(out).any(), f"{name}: NaN in the output (a tile not computed, or bad math)"
    err = (out.float() - ref).abs().max().item()
    ref_err = (low.float() - ref).abs().max().item()
    tol = 2 * ref_err + 1e-4
    mismatch = ((out.float() - ref).abs() > tol).float().mean().item() * 100
    print(f"{name}: max abs err {err:.3e}, torch fp16 err {ref_err:.3e}, tolerance {tol:.3e}, mismatch {mismatch:.3f}%")
    assert err <= tol, f"{name}: max abs err {err:.3e} > {tol:.3e}"
    lse_err = (lse - ref_lse).abs().max().item()
    assert lse_err <= 2 * (low_lse - ref_lse).abs().max().item() + 1e-3, f"{name}: lse err {lse_err:.3e}"


def run(m, hdim, batch, seqlen_q, seqlen_k, nheads, nheads_k):
    torch.manual_seed(hdim + seqlen_q + seqlen_k)
    q = torch.randn(batch, seqlen_q, nheads, hdim, device="cuda", dtype=torch.float16)
    k, v = (torch.randn(batch, seqlen_k, nheads_k, hdim, device="cuda", dtype=torch.float16) for _ in range(2))
    torch.full((256 << 20,), float("nan"), dtype=torch.float16, device="cuda")  # unwritten output reads NaN
    out, lse = m.flash_attn_func(q, k, v, causal=True, return_lse=True)
    return out, lse, q, k, v


SHAPES = [  # hdim, batch, seqlen_q, seqlen_k, nheads, nheads_k
    (128, 8, 1024, 1024, 40, 40),   # 8 blocks a head: pairs of whole heads, the tail inside one
    (128, 6, 1100, 1100, 48, 8),    # 9 blocks (odd: middles in the tail), the first partial; GQA
    (128, 5, 700, 1500, 64, 64),    # keys past the queries: every block sees more keys
    (64, 8, 1000, 1000, 48, 48),    # 192-row tiles, 6 blocks a head
    (256, 4, 1024, 1024, 80, 80),   # O through V's ring, many tiles per CTA
    (192, 4, 900, 900, 80, 16),     # the same at hdim 192 (ping-pong), 8 blocks, the first partial
]
MID = [  # 17-32 query blocks a head: pairs under every setting but off
    (128, 2, 2500, 2500, 32, 8),    # 20 blocks, the first partial; GQA
    (128, 2, 2300, 3100, 40, 40),   # 18 blocks, keys past the queries
    (64, 2, 3500, 3500, 32, 32),    # 19 blocks of 192 rows (odd: middles in the tail)
    (256, 2, 2200, 2200, 48, 48),   # 18 blocks, O through V's ring
]
LONG = [  # past kPairMaxBlocks (32) query blocks a head: pairs under every setting but short and off
    (128, 2, 4500, 4500, 32, 8),    # 36 blocks, the first partial; GQA
    (128, 1, 4300, 5000, 40, 40),   # 34 blocks, keys past the queries
    (64, 1, 6500, 6500, 32, 32),    # 34 blocks of 192 rows
    (256, 1, 4200, 4200, 48, 48),   # 33 blocks (odd: middles in the tail), O through V's ring
]


@pytest.mark.parametrize("setting", SETTINGS)
@pytest.mark.parametrize("hdim, batch, seqlen_q, seqlen_k, nheads, nheads_k", SHAPES + MID + LONG)
def test_causal_pairs_cover_every_block(m, monkeypatch, setting, hdim, batch, seqlen_q, seqlen_k, nheads, nheads_k):
    rounds = pair_rounds(setting, seqlen_q, hdim, batch * nheads)
    name = setting.partition(":")[0]
    pairs = name != "off" and (name != "short" or -(-seqlen_q // BLOCK_M[hdim]) <= PAIR_MAX_BLOCKS["short"])
    assert (rounds > 0) == pairs, (f"{setting}: b{batch} h{nheads} sq{seqlen_q}: {rounds} pair rounds on this GPU: "
                                   f"the shape misses its purpose")
    monkeypatch.setenv(ENV, setting)
    out, lse, q, k, v = run(m, hdim, batch, seqlen_q, seqlen_k, nheads, nheads_k)
    check(f"{ENV}={setting} hdim {hdim} b{batch} sq{seqlen_q} sk{seqlen_k} h{nheads}/{nheads_k} "
          f"({rounds} pair rounds)", out, lse, q, k, v)


@pytest.mark.parametrize("hdim, batch, seqlen_q, seqlen_k, nheads, nheads_k", [SHAPES[1], LONG[0]])
def test_every_setting_gives_the_same_bits(m, monkeypatch, hdim, batch, seqlen_q, seqlen_k, nheads, nheads_k):
    """The settings only reorder the tiles, each computed whole by one CTA: the same output bits under each, and
    unset is accepted (it is the default; which order ran is not visible in the output)."""
    outs = {}
    for setting in (None, *SETTINGS, "short:2"):
        if setting is None:
            monkeypatch.delenv(ENV, raising=False)
        else:
            monkeypatch.setenv(ENV, setting)
        outs[setting] = run(m, hdim, batch, seqlen_q, seqlen_k, nheads, nheads_k)[0]
    differ = [s for s, out in outs.items() if not torch.equal(out, outs["off"])]
    assert not differ, f"{ENV}={differ} give other bits than off (longest first alone)"


@pytest.mark.parametrize("value", ["SHORT", "long", "16", "all ", "all:0", "all:9", "off:2", "short:",
                                   "off\x1b[2J" + "x" * 200])
def test_an_unknown_setting_is_a_named_error(m, monkeypatch, value):
    monkeypatch.setenv(ENV, value)
    with pytest.raises(RuntimeError) as err:
        run(m, 128, 2, 1024, 1024, 8, 8)
    text = str(err.value)
    assert ENV in text and "short" in text and "all" in text and "off" in text, text
    assert "\x1b" not in text and len(text) < 600, "the value is shown printable and cut short"
