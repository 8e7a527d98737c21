"""flash_attn_with_kvcache's cache arguments on a GPU (skipped without a CUDA device): appending new
keys and values in place, rotary embedding (both layouts, over part of the head dim), cache_batch_idx,
cache_leftpad and a paged cache, against flashbuild.reference.kvcache_ref in fp32 by the correctness rule (docs/correctness.md)
(max |ours - fp32 ref| <= 2 * max |PyTorch in fp16 - fp32 ref| + eps; NaN never passes).

Every call runs on poisoned memory: the allocator is filled with NaN first (so an output the kernels
do not write reads as NaN), and every cache row the call must not read (past each row's keys, before
its leftpad, the pages no row uses) holds NaN. After an append, the new cache rows are checked
against the rotated keys, and every other row must be bit-for-bit what it was.
"""

from __future__ import annotations

import math
import os

import pytest

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")

import flashbuild  # noqa: E402
from flashbuild.reference import apply_rotary, cache_slots, kvcache_ref  # noqa: E402

from test_api_gpu import check, poison_allocator, randn  # noqa: E402

# The split-KV kernels at head dims 64 and 128 (key blocks of 128 and 64 keys: hopper_splitkv_block_n), with the local and softcap
# variants (the default): the build `flashbuild test --hdim 64,128 --dtype fp16 --direction splitkv`
# and benchmarks/decode/decode_bandwidth.py use too.
# FLASHBUILD_TEST_NVCC_FLAGS (space-separated nvcc flags): these tests and the one-launch ones on a study build of the
# kernels (benchmarks/decode/two_ctas_run.sh ran them so on a build with a tile macro since made the default).
STUDY_FLAGS = os.environ.get("FLASHBUILD_TEST_NVCC_FLAGS", "").split()
SELECTION = dict(hdim="64,128", dtype="fp16", arch="native", direction="splitkv", causal="both",
                 **({"nvcc_flags": STUDY_FLAGS} if STUDY_FLAGS else {}))
NAN = float("nan")


@pytest.fixture(scope="module")
def m():
    return flashbuild.load(**SELECTION)


def rope(positions: int, rotary_dim: int):
    """cos, sin (positions, rotary_dim / 2) in fp16: angle i of position p is p * 10000^(-2i / rotary_dim)."""
    inv_freq = 10000.0 ** (-torch.arange(0, rotary_dim, 2, device="cuda", dtype=torch.float64) / rotary_dim)
    angles = torch.arange(positions, device="cuda", dtype=torch.float64).view(-1, 1) * inv_freq
    return angles.cos().half(), angles.sin().half()


def poison_unread(cache, lens, seqlen_new, leftpad=None, batch_idx=None):
    """NaN in every row of a contiguous (rows, capacity, ...) cache that the call must not read: past
    each batch row's keys, before its leftpad, and whole cache rows no batch row uses."""
    ends = torch.zeros(cache.shape[0], dtype=torch.long, device="cuda")  # unused cache rows: all unread
    starts = torch.zeros_like(ends)
    rows = torch.arange(len(lens), device="cuda") if batch_idx is None else batch_idx.long()
    ends[rows] = lens.long() + seqlen_new
    if leftpad is not None:
        starts[rows] = leftpad.long()
    positions = torch.arange(cache.shape[1], device="cuda").view(1, -1)
    cache[(positions >= ends.view(-1, 1)) | (positions < starts.view(-1, 1))] = NAN


def to_pages(cache, page_size, spare=3, seed=0):
    """A contiguous (batch, capacity, ...) cache as pages in shuffled order, plus `spare` pages of NaN
    that no row uses; returns (pages, block_table int32 (batch, capacity / page_size))."""
    batch, capacity = cache.shape[:2]
    per_row = capacity // page_size
    gen = torch.Generator(device="cuda").manual_seed(seed)
    order = torch.randperm(batch * per_row + spare, device="cuda", generator=gen)
    table = order[:batch * per_row]
    pages = torch.full((batch * per_row + spare, page_size, *cache.shape[2:]), NAN, dtype=cache.dtype, device="cuda")
    pages[table] = cache.reshape(batch * per_row, page_size, *cache.shape[2:])
    return pages, table.view(batch, per_row).int()


def check_lse(lse, ref_lse, low_lse):
    assert torch.equal(torch.isinf(lse), torch.isinf(ref_lse)), "+inf exactly where a row sees no key"
    seen = torch.isfinite(ref_lse)
    check("lse", lse[seen], ref_lse[seen], low_lse[seen], "lse")


def check_cache(name, got, before, new, rotary, positions, slots, interleaved):
    """The new rows hold `new` (rotated in fp32 and rounded, when rotary), every other row is unchanged."""
    touched = torch.zeros(got.shape[:2], dtype=torch.bool, device="cuda")
    touched[slots] = True
    assert torch.equal(got[~touched].nan_to_num(1234.5), before[~touched].nan_to_num(1234.5)), \
        f"{name}: a row the append must not touch changed"
    ref = new.float() if rotary is None else apply_rotary(new, *rotary, positions, interleaved, dtype=torch.float32)
    check(f"{name} new rows", got[slots], ref, ref.half(), "out")


def run_step(m, *, batch=3, seqlen_q, seqlen_new, nheads=8, nheads_k=2, head_dim=128, capacity=1024, lens,
             rotary_dim=0, interleaved=True, causal=False, window_size=(-1, -1), page_size=0, batch_idx=None,
             leftpad=None, num_splits=0, seed=0):
    """One decoding call on poisoned memory, checked against kvcache_ref: out, lse, the caches, and
    that q and cache_seqlens are left as they were."""
    torch.manual_seed(seed)
    lens = torch.tensor(lens, dtype=torch.int32, device="cuda")
    q = randn(batch, seqlen_q, nheads, head_dim)
    rows = batch if batch_idx is None else max(batch_idx) + 2  # a bigger cache: rows no call reads
    k_cache, v_cache = randn(rows, capacity, nheads_k, head_dim), randn(rows, capacity, nheads_k, head_dim)
    k = randn(batch, seqlen_new, nheads_k, head_dim) if seqlen_new else None
    v = randn(batch, seqlen_new, nheads_k, head_dim) if seqlen_new else None
    idx = None if batch_idx is None else torch.tensor(batch_idx, dtype=torch.int32, device="cuda")
    pad = None if leftpad is None else torch.tensor(leftpad, dtype=torch.int32, device="cuda")
    for cache in (k_cache, v_cache):
        poison_unread(cache, lens, seqlen_new, pad, idx)
    rotary = rope(capacity, rotary_dim) if rotary_dim else None
    table = None
    if page_size:
        (k_cache, table), (v_cache, _) = to_pages(k_cache, page_size), to_pages(v_cache, page_size)
    kwargs = dict(k=k, v=v, rotary_cos=rotary and rotary[0], rotary_sin=rotary and rotary[1], cache_seqlens=lens,
                  cache_batch_idx=idx, cache_leftpad=pad, block_table=table, causal=causal, window_size=window_size,
                  rotary_interleaved=interleaved)
    ref, ref_lse, _, _ = kvcache_ref(q, k_cache, v_cache, **kwargs)
    low, low_lse, _, _ = kvcache_ref(q, k_cache, v_cache, upcast=False, **kwargs)
    before_q, before_k, before_v, before_lens = q.clone(), k_cache.clone(), v_cache.clone(), lens.clone()

    poison_allocator()
    out, lse = m.flash_attn_with_kvcache(q, k_cache, v_cache, num_splits=num_splits, return_softmax_lse=True,
                                         **kwargs)
    torch.cuda.synchronize()
    print(f"\nb{batch} sq{seqlen_q} new{seqlen_new} h{nheads}/{nheads_k} d{head_dim} cache {capacity} lens "
          f"{lens.tolist()} rotary {rotary_dim}{' interleaved' if interleaved else ' halves'} causal={causal} "
          f"page {page_size} idx {batch_idx} leftpad {leftpad} splits {num_splits}")
    check("out", out, ref, low, "out")
    check_lse(lse, ref_lse, low_lse)
    assert torch.equal(q, before_q) and torch.equal(lens, before_lens)  # q is rotated into a copy
    if seqlen_new:
        positions = lens.long().view(-1, 1) + torch.arange(seqlen_new, device="cuda")
        slots = cache_slots(positions, idx, table, page_size)
        check_cache("k_cache", k_cache, before_k, k, rotary, positions, slots, interleaved)
        check_cache("v_cache", v_cache, before_v, v, None, positions, slots, interleaved)
    else:
        assert torch.equal(k_cache.nan_to_num(1.5), before_k.nan_to_num(1.5))
    return out


# ---------------------------------------------------------------- append, rotary

@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("interleaved", [True, False], ids=["gptj", "neox"])
@pytest.mark.parametrize("seqlen_new", [1, 3, 16])
def test_append_with_rotary(m, seqlen_new, interleaved, causal):
    # Rows: an empty cache, one ending mid-tile, one filled to the last position.
    run_step(m, seqlen_q=seqlen_new, seqlen_new=seqlen_new, lens=[0, 517, 1024 - seqlen_new], rotary_dim=64,
             interleaved=interleaved, causal=causal, seed=seqlen_new * 4 + 2 * interleaved + causal)


@pytest.mark.parametrize("head_dim, rotary_dim", [(64, 32), (64, 64), (128, 16)])
def test_append_with_rotary_at_other_dims_and_a_window(m, head_dim, rotary_dim):
    run_step(m, seqlen_q=5, seqlen_new=5, head_dim=head_dim, lens=[100, 700, 3], rotary_dim=rotary_dim,
             window_size=(200, 0), seed=head_dim + rotary_dim)


def test_append_without_rotary_and_queries_that_outnumber_the_new_keys(m):
    run_step(m, seqlen_q=7, seqlen_new=2, lens=[300, 0, 900], causal=True, num_splits=3)


@pytest.mark.parametrize("causal", [False, True])
def test_gqa_8_to_1_packed_decode_with_rotary(m, causal):
    # seqlen_q 1 with 16 query heads on 2 K/V heads: the binding packs each group into one CTA's rows,
    # after the append kernel rotated q (at cache_seqlens, for every head).
    for num_splits in (0, 1, 5):
        run_step(m, batch=4, seqlen_q=1, seqlen_new=1, nheads=16, nheads_k=2, lens=[0, 1, 640, 1023], rotary_dim=64,
                 interleaved=False, causal=causal, num_splits=num_splits, seed=num_splits + causal)


def test_a_padded_head_dim_appends_to_the_callers_cache(m):
    # Head dim 48 runs on the hdim-64 kernel over a zero-padded copy of the cache; the binding writes
    # the new rows back into the caller's (unpadded) cache.
    run_step(m, seqlen_q=3, seqlen_new=3, head_dim=48, lens=[10, 600, 1000], rotary_dim=32, causal=True)
    run_step(m, seqlen_q=1, seqlen_new=1, head_dim=48, lens=[0, 256, 1023], rotary_dim=16, page_size=256)


# ---------------------------------------------------------------- cache_batch_idx, cache_leftpad

def test_cache_batch_idx_picks_rows_of_a_bigger_cache(m):
    run_step(m, seqlen_q=1, seqlen_new=0, lens=[1024, 77, 513], batch_idx=[4, 0, 2])
    run_step(m, seqlen_q=3, seqlen_new=3, lens=[12, 700, 1000], batch_idx=[3, 1, 0], rotary_dim=32, causal=True)


def test_cache_leftpad_skips_leading_rows(m):
    run_step(m, seqlen_q=2, seqlen_new=2, lens=[300, 1000, 130], leftpad=[100, 0, 129], rotary_dim=64, causal=True,
             num_splits=4)


# ---------------------------------------------------------------- a paged cache

@pytest.mark.parametrize("head_dim", [64, 128])
@pytest.mark.parametrize("seqlen_new", [0, 3])
def test_paged_cache_with_a_shuffled_block_table(m, head_dim, seqlen_new):
    run_step(m, seqlen_q=max(seqlen_new, 1), seqlen_new=seqlen_new, head_dim=head_dim, capacity=2048,
             lens=[2048 - seqlen_new, 255, 1], page_size=256, rotary_dim=32 if seqlen_new else 0, causal=True,
             seed=head_dim + seqlen_new)


def test_paged_and_contiguous_caches_give_the_same_output_bit_for_bit(m):
    torch.manual_seed(7)
    q = randn(2, 1, 8, 128)
    k_cache, v_cache = randn(2, 1536, 2, 128), randn(2, 1536, 2, 128)
    lens = torch.tensor([1536, 900], dtype=torch.int32, device="cuda")
    contiguous = m.flash_attn_with_kvcache(q, k_cache, v_cache, cache_seqlens=lens, num_splits=3)
    for page_size in (128, 512):
        (k_pages, table), (v_pages, _) = to_pages(k_cache, page_size), to_pages(v_cache, page_size)
        paged = m.flash_attn_with_kvcache(q, k_pages, v_pages, cache_seqlens=lens, block_table=table, num_splits=3)
        assert torch.equal(paged, contiguous)  # the same tiles in the same order


def test_a_page_size_the_kernel_cannot_tile_is_a_clear_error(m):
    q, cache = randn(1, 1, 8, 128), randn(4, 64, 2, 128)
    table = torch.arange(4, dtype=torch.int32, device="cuda").view(1, 4)
    with pytest.raises(RuntimeError, match=r"page size \(k_cache.size\(1\)\) that is a multiple of 128, the split-KV "
                                           r"kernel's key block at head dim 128.*got k_cache \[4, 64, 2, 128\].*"
                                           r"Use a page size of 128, 256, 384"):
        m.flash_attn_with_kvcache(q, cache, cache, cache_seqlens=10, block_table=table)
    q64, cache64 = randn(1, 1, 8, 64), randn(4, 64, 2, 64)  # 64-key pages: hdim 64 has 128-key blocks too
    with pytest.raises(RuntimeError, match="multiple of 128"):
        m.flash_attn_with_kvcache(q64, cache64, cache64, cache_seqlens=10, block_table=table)


# ---------------------------------------------------------------- the binding's argument checks

def test_binding_errors_say_what_was_given_and_the_fix(m):
    q, cache = randn(2, 1, 8, 64), randn(2, 256, 2, 64)
    new = randn(2, 1, 2, 64)
    cos, sin = rope(256, 32)
    lens = torch.tensor([3, 4], dtype=torch.int32, device="cuda")
    raw = m.ext.mha_fwd_kvcache
    ints = dict(dtype=torch.int32, device="cuda")
    cases = [
        (dict(k=new, v=new, rotary_cos=cos.float(), rotary_sin=sin.float()), "rotary_cos must have q's dtype"),
        (dict(k=new, v=new, rotary_cos=cos[:100], rotary_sin=sin[:100]),
         "have 100 positions, fewer than the cache's 256"),
        (dict(k=new, v=new, rotary_cos=torch.cat([cos] * 3, 1), rotary_sin=torch.cat([sin] * 3, 1)),
         "0 < rotary_dim <= head_dim"),
        (dict(k=randn(2, 1, 2, 32), v=randn(2, 1, 2, 32)),
         r"k must have shape \(batch, seqlen_new, nheads_k, head_dim\)"),
        (dict(k=new, v=new.float()), r"v \(the new values\) must have q's dtype"),
        (dict(cache_batch_idx=torch.tensor([0, 1], device="cuda")), "cache_batch_idx must be int32, got Long"),
        (dict(cache_leftpad=torch.zeros(3, **ints)), r"cache_leftpad must have shape \(batch,\)"),
        (dict(block_table=torch.zeros(2, 1, dtype=torch.int32)), "block_table must be on q's device"),
        (dict(block_table=torch.zeros(2, 1, **ints), cache_leftpad=torch.zeros(2, **ints)),
         "a paged KV cache \\(block_table\\) does not take cache_leftpad"),
    ]
    for kwargs, message in cases:
        with pytest.raises(RuntimeError, match=message):
            raw(q, cache, cache, lens, **kwargs)
    with pytest.raises(RuntimeError, match="cache_seqlens must be int32"):
        raw(q, cache, cache, lens.long())
    # values outside the cache are found on the device and raised by check_errors() (docs/serving.md;
    # every argument: test_kvcache_index_checks_gpu.py)
    value_cases = [
        (dict(cache_batch_idx=torch.tensor([1, 2], **ints)), lens, r"cache_batch_idx\[1\] = 2, outside 0\.\.1"),
        (dict(cache_batch_idx=torch.tensor([-1, 0], **ints)), lens, r"cache_batch_idx\[0\] = -1, outside 0\.\.1"),
        ({}, torch.tensor([3, 257], **ints), r"cache_seqlens\[1\] = 257, outside 0\.\.256"),
        (dict(k=new, v=new), torch.tensor([3, 256], **ints), r"cache_seqlens\[1\] = 256, outside 0\.\.255"),
    ]
    for kwargs, seqlens, message in value_cases:
        raw(q, cache.clone(), cache.clone(), seqlens, **kwargs)
        with pytest.raises(ValueError, match=message):
            m.check_errors()
    assert not math.isnan(raw(q, cache, cache, lens)[0].float().sum().item())  # the same call, well formed


def test_the_op_declares_the_cache_mutation(m):
    torch.manual_seed(3)
    q, k_cache, v_cache = randn(2, 2, 8, 64), randn(2, 512, 2, 64), randn(2, 512, 2, 64)
    k, v = randn(2, 2, 2, 64), randn(2, 2, 2, 64)
    cos, sin = rope(512, 32)
    lens = torch.tensor([5, 300], dtype=torch.int32, device="cuda")
    torch.library.opcheck(m.ops.fwd_kvcache, (q, k_cache, v_cache, k, v, cos, sin, lens, None, None, None, True,
                                              None, True, 0, -1, -1, 0.0))
