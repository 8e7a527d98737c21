"""The Hopper split-KV's one-launch decode, on an sm90 GPU (skipped elsewhere): a KV-cache call with nothing
appended is the attention kernel alone. It reads the caller's index tensors and clamps and records each value
where it reads it (no check kernel: CacheIndexCheck::at_read, kernels/common/params.h), and the CTA whose split
of a query block finishes last merges the splits (no combine kernel: FwdEpilogue::combine_if_last,
kernels/hopper/fwd_epilogue.h), counting arrivals in a buffer the kernel leaves zero for the next launch.

Checked here: the outputs of the merge tails (FLASHBUILD_SPLITKV_PATH=serial-merge, lane-merge and cluster-merge,
SplitMerge in kernels/common/params.h) equal the previous path's bit for bit (FLASHBUILD_SPLITKV_PATH=previous: the
check, attention and combine kernels) and meet the fp32 reference, over split counts 2-16, 40 and 128 (more than a
warp's 32 lanes: the lane tail's later chunks) and auto, packed and unpacked query rows, causal rows, several
query blocks a head, paged caches, empty splits and empty rows; a profile counts one kernel; graph replays with
new lengths, pages and queries equal eager calls bit for bit, many replays in a row (the counters go back to
zero), with either tail; calls on two streams at once stay right (each stream its own counters); bad indices
are the named error and the call after them is right; a call with more query blocks than the counter buffer
holds merges in the combine kernel and is right; an unknown FLASHBUILD_SPLITKV_PATH is a named error.
The programmatic dependent launch (kernels/hopper/splitkv_dependent_launch.h: the default, releasing the next launch
at its start; FLASHBUILD_SPLITKV_PATH=pdl-late, once its tiles are computed) gives the outputs of plain launches
(FLASHBUILD_SPLITKV_PATH=no-pdl) bit for bit, and so do chains of calls back to back, eager and replayed, in which
each call reads what the kernel before it wrote (its q, its cache, its cache_seqlens).
"""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.skipif(not torch.cuda.is_available() or torch.cuda.get_device_capability() < (9, 0),
                                reason="the one-launch decode is the Hopper split-KV's: needs an sm90 GPU")

import flashbuild  # noqa: E402
from flashbuild.debug.checking import compare, poison  # noqa: E402
from flashbuild.reference import kvcache_ref  # noqa: E402

from test_kvcache_gpu import SELECTION  # noqa: E402  (hdim 64,128 split-KV, causal both: one build for both files)
from test_kvcache_prefill_gpu import kernels_of  # noqa: E402

PAGE = 128
PATH_VAR = "FLASHBUILD_SPLITKV_PATH"
# the one-launch path's merge tails: cluster-merge (the default) clusters the decode tile's splits up to the CTAs its
# merge slots hold (2 at head dim 64, 4 at 128) and merges through L2 (lane-merge's tail) above; serial-merge and
# lane-merge always merge through L2
MERGES = ["serial-merge", "lane-merge", "cluster-merge"]
PLAIN = "no-pdl"  # the default path launched without the programmatic dependent launch
DEPENDENT = ["pdl-early", "pdl-late"]  # ... and as one: the default (pdl-early) spelled out, and a late release


@pytest.fixture(scope="module")
def m():
    return flashbuild.load(**SELECTION)


def randn(*shape):
    return torch.randn(*shape, device="cuda", dtype=torch.float16)


def ints(values):
    return torch.tensor(values, dtype=torch.int32, device="cuda")


def to_paged(k_cache, v_cache, spare=3):
    """The caches as shuffled pages of PAGE rows plus spare ones: (k_pages, v_pages, block_table)."""
    batch, capacity = k_cache.shape[:2]
    per_row = capacity // PAGE
    order = torch.randperm(batch * per_row + spare, device="cuda")
    table = order[:batch * per_row]
    pages = []
    for cache in (k_cache, v_cache):
        p = randn(batch * per_row + spare, PAGE, *cache.shape[2:])
        p[table] = cache.reshape(batch * per_row, PAGE, *cache.shape[2:])
        pages.append(p)
    return pages[0], pages[1], table.view(batch, per_row).int()


def captured(call):
    """call() captured in a CUDA graph after a warm-up on a side stream: (the graph, the outputs it writes)."""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        call()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        outs = call()
    return graph, outs


def check_reference(q, k_cache, v_cache, out, lse, **kwargs):
    ref = kvcache_ref(q, k_cache, v_cache, **kwargs)
    low = kvcache_ref(q, k_cache, v_cache, upcast=False, **kwargs)
    for name, got, r, lo in (("out", out, ref[0], low[0]), ("lse", lse, ref[1], low[1])):
        metric = compare(name, got, r, lo)
        assert metric.passed, metric


# (batch, seqlen_q, nheads, nheads_k, causal): one query packed (its heads are rows of one block), unpacked
# query rows, causal rows (bottom-aligned blocks), and 70 rows (two query blocks a head: two counters each).
SHAPES = [(1, 1, 32, 8, False), (3, 1, 16, 2, False), (2, 4, 8, 8, True), (2, 70, 4, 2, False)]


def shape_id(s):
    return "b{}-sq{}-h{}-hk{}-{}".format(*s[:4], "causal" if s[4] else "nc")


@pytest.mark.parametrize("paged", [False, True], ids=["dense", "paged"])
@pytest.mark.parametrize("num_splits", [0, 2, 3, 4, 5, 16, 40, 128])
@pytest.mark.parametrize("shape", SHAPES, ids=shape_id)
@pytest.mark.parametrize("head_dim", [64, 128])
def test_one_launch_equals_the_previous_path_and_the_reference(m, monkeypatch, head_dim, shape, num_splits, paged):
    batch, seqlen_q, nheads, nheads_k, causal = shape
    torch.manual_seed(head_dim + 7 * num_splits + 31 * seqlen_q + paged)
    capacity = 2048
    q = randn(batch, seqlen_q, nheads, head_dim)
    k_cache, v_cache = randn(batch, capacity, nheads_k, head_dim), randn(batch, capacity, nheads_k, head_dim)
    # a full row, a short one (most splits empty) and one of a few hundred keys; causal rows need seqlen_q keys
    lens = ints([capacity, max(seqlen_q, 3), 700][:batch])
    kwargs = dict(cache_seqlens=lens, causal=causal)
    if paged:
        k_cache, v_cache, kwargs["block_table"] = to_paged(k_cache, v_cache)

    def call():
        poison("cuda", [1 << 20] * 4)
        return m.flash_attn_with_kvcache(q, k_cache, v_cache, num_splits=num_splits, return_softmax_lse=True,
                                         **kwargs)

    out, lse = call()
    monkeypatch.setenv(PATH_VAR, "previous")
    out_prev, lse_prev = call()
    for merge in [*MERGES, PLAIN, *DEPENDENT]:
        monkeypatch.setenv(PATH_VAR, merge)
        out_m, lse_m = call()
        assert torch.equal(out_m, out_prev), f"{merge}: out differs: {(out_m - out_prev).abs().max()}"
        assert torch.equal(lse_m, lse_prev), f"{merge}: lse differs: {(lse_m - lse_prev).abs().max()}"
    monkeypatch.delenv(PATH_VAR)
    assert torch.equal(out, out_prev), f"out differs from the previous path: {(out - out_prev).abs().max()}"
    assert torch.equal(lse, lse_prev), f"lse differs from the previous path: {(lse - lse_prev).abs().max()}"
    check_reference(q, k_cache, v_cache, out, lse, **kwargs)
    m.check_errors()


def is_attention(name: str) -> bool:
    """The split-KV's attention kernel: the 64-row tile (fwd_kernel) or the decode tile (splitkv_decode_kernel)."""
    return "fwd_kernel" in name or "splitkv_decode_kernel" in name


def test_a_decoding_call_is_one_launch(m, monkeypatch):
    torch.manual_seed(1)
    q, k, v = randn(1, 1, 32, 128), randn(1, 8192, 8, 128), randn(1, 8192, 8, 128)
    lens = ints([8000])
    for splits in (0, 8):  # auto (several splits at batch 1) and forced
        names = kernels_of(lambda: m.flash_attn_with_kvcache(q, k, v, cache_seqlens=lens, num_splits=splits))
        assert len(names) == 1 and is_attention(names[0]), names
    for merge in MERGES:
        monkeypatch.setenv(PATH_VAR, merge)
        names = kernels_of(lambda: m.flash_attn_with_kvcache(q, k, v, cache_seqlens=lens, num_splits=8))
        assert len(names) == 1 and is_attention(names[0]), (merge, names)
    monkeypatch.setenv(PATH_VAR, "previous")
    names = kernels_of(lambda: m.flash_attn_with_kvcache(q, k, v, cache_seqlens=lens, num_splits=8))
    assert any("combine" in n for n in names) and any("index_check" in n for n in names), names


@pytest.mark.parametrize("splits", [12, 2, 4])
@pytest.mark.parametrize("merge", [None, *MERGES], ids=["default", *MERGES])
@pytest.mark.parametrize("paged", [False, True], ids=["dense", "paged"])
def test_replays_equal_eager_calls(m, monkeypatch, paged, merge, splits):
    """Many replays of one graph (with splits: the counters must be zero again after each; 2 and 4: the cluster
    merge's barriers change phase from tile to tile and call to call), new lengths, queries and pages between
    replays, each bit-identical to an eager call (on another stream's counters)."""
    if merge:
        monkeypatch.setenv(PATH_VAR, merge)  # read at capture and at each eager call
    torch.manual_seed(2 + paged)
    batch, nheads, nheads_k, d, capacity = 2, 16, 4, 128, 4096
    q = randn(batch, 1, nheads, d)
    k_cache, v_cache = randn(batch, capacity, nheads_k, d), randn(batch, capacity, nheads_k, d)
    table = None
    if paged:
        k_cache, v_cache, table = to_paged(k_cache, v_cache)
    lens = ints([capacity, 1000])

    def call():
        return m.flash_attn_with_kvcache(q, k_cache, v_cache, cache_seqlens=lens, block_table=table,
                                         num_splits=splits, return_softmax_lse=True)

    graph, (out, lse) = captured(call)
    for replay in range(12):
        q.copy_(randn(*q.shape))
        lengths = torch.randint(1, capacity + 1, (batch,), device="cuda", dtype=torch.int32)
        lengths[replay % batch] = [0, capacity, 1, 129][replay % 4]
        lens.copy_(lengths)
        if table is not None:
            table.copy_(table.flatten()[torch.randperm(table.numel(), device="cuda")].view_as(table))
        graph.replay()
        if replay % 3:  # also back to back: two replays, then the eager call
            graph.replay()
        eager_out, eager_lse = call()
        assert torch.equal(out, eager_out) and torch.equal(lse, eager_lse), f"replay {replay}: differs from eager"
        check_reference(q, k_cache, v_cache, out, lse, cache_seqlens=lens, block_table=table)
    m.check_errors()


@pytest.mark.parametrize("head_dim,splits", [(64, 2), (128, 2), (128, 3), (128, 4)])
def test_cluster_merge_with_many_tiles_a_cta(m, monkeypatch, head_dim, splits):
    """More clustered tiles than the GPU's slots for them (batch 48 x 8 K/V heads x splits: 3-6 times the 264 on an
    H200), so the clusters run in waves; rows of different lengths (empty splits, an empty row) among them. Equal bit for bit to the L2 tail and to the three-kernel path, eager and replayed."""
    torch.manual_seed(11 + head_dim + splits)
    batch, nheads, nheads_k, capacity = 48, 32, 8, 1024
    q = randn(batch, 1, nheads, head_dim)
    k_cache, v_cache = randn(batch, capacity, nheads_k, head_dim), randn(batch, capacity, nheads_k, head_dim)
    lens = torch.randint(1, capacity + 1, (batch,), device="cuda", dtype=torch.int32)
    lens[0], lens[1], lens[2] = 0, 1, capacity

    def call():
        return m.flash_attn_with_kvcache(q, k_cache, v_cache, cache_seqlens=lens, num_splits=splits,
                                         return_softmax_lse=True)

    got = {}
    for path in ("cluster-merge", "lane-merge", "previous"):
        monkeypatch.setenv(PATH_VAR, path)
        got[path] = [t.clone() for t in call()]
    for path in ("lane-merge", "previous"):
        assert torch.equal(got["cluster-merge"][0], got[path][0]), f"out differs from {path}"
        assert torch.equal(got["cluster-merge"][1], got[path][1]), f"lse differs from {path}"
    monkeypatch.delenv(PATH_VAR)
    graph, (out, lse) = captured(call)
    for replay in range(3):
        lens.copy_(torch.randint(0, capacity + 1, (batch,), device="cuda", dtype=torch.int32))
        graph.replay()
        eager_out, eager_lse = call()
        assert torch.equal(out, eager_out) and torch.equal(lse, eager_lse), f"replay {replay}: differs from eager"
    check_reference(q, k_cache, v_cache, out, lse, cache_seqlens=lens)
    m.check_errors()


def test_calls_on_two_streams_at_once(m):
    torch.manual_seed(3)
    d, capacity, calls = 64, 8192, 16
    inputs = [(randn(1, 1, 32, d), randn(1, capacity, 8, d), randn(1, capacity, 8, d), ints([capacity - 17 * i]))
              for i in range(calls)]
    streams = [torch.cuda.Stream(), torch.cuda.Stream()]
    outs = [None] * calls
    for s in streams:
        s.wait_stream(torch.cuda.current_stream())
    for i, (q, k, v, lens) in enumerate(inputs):
        with torch.cuda.stream(streams[i % 2]):
            outs[i] = m.flash_attn_with_kvcache(q, k, v, cache_seqlens=lens, num_splits=16)
    for s in streams:
        torch.cuda.current_stream().wait_stream(s)
    torch.cuda.synchronize()
    for (q, k, v, lens), out in zip(inputs, outs):
        assert torch.equal(out, m.flash_attn_with_kvcache(q, k, v, cache_seqlens=lens, num_splits=16))


def test_bad_indices_are_the_named_error_and_the_next_call_is_right(m):
    torch.manual_seed(4)
    batch, d, capacity = 3, 128, 1024
    q = randn(batch, 1, 16, d)
    k_cache, v_cache = randn(batch, capacity, 4, d), randn(batch, capacity, 4, d)
    k_pages, v_pages, table = to_paged(k_cache, v_cache)
    lens = ints([1000, 300, 700])
    past = table.clone()
    past[2, 3] = k_pages.shape[0] + 5
    cases = [
        (dict(cache_seqlens=ints([1000, capacity + 3, 700])), rf"cache_seqlens\[1\] = {capacity + 3}, outside"),
        (dict(cache_seqlens=ints([-1, 300, 700])), r"cache_seqlens\[0\] = -1, outside"),
        (dict(cache_seqlens=lens, cache_batch_idx=ints([0, 2, 9])), r"cache_batch_idx\[2\] = 9, outside 0\.\.2"),
        (dict(cache_seqlens=lens, cache_leftpad=ints([0, -5, 0])), r"cache_leftpad\[1\] = -5, outside"),
        (dict(cache_seqlens=lens, block_table=past), rf"block_table\[2, 3\] = {k_pages.shape[0] + 5}, outside"),
    ]
    for kwargs, message in cases:
        caches = (k_pages, v_pages) if "block_table" in kwargs else (k_cache, v_cache)
        m.flash_attn_with_kvcache(q, *caches, num_splits=6, **kwargs)
        with pytest.raises(flashbuild.InvalidIndexError, match=message):
            m.check_errors()
        poison("cuda", [1 << 20] * 4)
        out, lse = m.flash_attn_with_kvcache(q, k_pages, v_pages, cache_seqlens=lens, block_table=table, num_splits=6,
                                             return_softmax_lse=True)
        m.check_errors()
        check_reference(q, k_pages, v_pages, out, lse, cache_seqlens=lens, block_table=table)


def test_more_query_blocks_than_counters_merge_in_the_combine_kernel(m, monkeypatch):
    """1100 rows x 4 K/V heads = 4400 query blocks, over the 4096 counters (flash_api.cpp, kSplitCounterSlots): through
    L2 (lane-merge) the splits merge in the combine kernel; by default the decode tile's two splits merge in their
    cluster, which needs no counter, and no combine kernel runs after it (it once did, over partials no split wrote)."""
    torch.manual_seed(5)
    batch, d, capacity = 1100, 64, 256
    q = randn(batch, 1, 8, d)
    k_cache, v_cache = randn(batch, capacity, 4, d), randn(batch, capacity, 4, d)
    lens = torch.randint(1, capacity + 1, (batch,), device="cuda", dtype=torch.int32)
    for path, combine in (("lane-merge", True), (None, False)):
        if path:
            monkeypatch.setenv(PATH_VAR, path)
        poison("cuda", [1 << 20] * 4)
        out, lse = m.flash_attn_with_kvcache(q, k_cache, v_cache, cache_seqlens=lens, num_splits=2,
                                             return_softmax_lse=True)
        check_reference(q, k_cache, v_cache, out, lse, cache_seqlens=lens)
        names = kernels_of(lambda: m.flash_attn_with_kvcache(q, k_cache, v_cache, cache_seqlens=lens, num_splits=2))
        assert any("combine" in n for n in names) == combine and not any("index_check" in n for n in names), names
        monkeypatch.delenv(PATH_VAR, raising=False)


def test_an_unknown_path_is_a_named_error(m, monkeypatch):
    q, k, v = randn(1, 1, 8, 64), randn(1, 256, 8, 64), randn(1, 256, 8, 64)
    monkeypatch.setenv(PATH_VAR, "lanes")
    message = (r"FLASHBUILD_SPLITKV_PATH='lanes' is not a split-KV path; it takes previous, serial-merge, lane-merge, "
               r"cluster-merge, no-pdl, pdl-early, pdl-late, fresh-descriptors or no-pairs")
    with pytest.raises(RuntimeError, match=message):
        m.flash_attn_with_kvcache(q, k, v, num_splits=2)
    monkeypatch.setenv(PATH_VAR, "")  # empty: the default
    out = m.flash_attn_with_kvcache(q, k, v, num_splits=2)
    monkeypatch.delenv(PATH_VAR)
    assert torch.equal(out, m.flash_attn_with_kvcache(q, k, v, num_splits=2))


@pytest.mark.parametrize("path", [None, *DEPENDENT, "cluster-merge"], ids=["default", *DEPENDENT, "cluster-merge"])
@pytest.mark.parametrize("graph", [False, True], ids=["eager", "graph"])
@pytest.mark.parametrize("head_dim", [64, 128])
def test_back_to_back_calls_read_what_the_kernel_before_wrote(m, monkeypatch, head_dim, graph, path):
    """A chain of decoding calls in which each reads what the kernel just before it wrote: its q is the previous
    call's output (our kernel after our kernel, the programmatic launch's case: it may start while the one before
    drains), or that output scaled by a torch kernel; its cache holds a row a torch kernel wrote from that output,
    and its cache_seqlens a torch kernel advanced. Run with each programmatic launch (and the default) and with
    plain launches (no-pdl), eager and captured: every output equal bit for bit."""
    torch.manual_seed(6 + head_dim)
    batch, nheads, nheads_k, capacity, steps = 2, 32, 8, 4096, 24
    q0 = randn(batch, 1, nheads, head_dim)
    k0, v0 = randn(batch, capacity, nheads_k, head_dim), randn(batch, capacity, nheads_k, head_dim)
    lens0 = ints([capacity - 3 * steps, 1500])

    def chain(q, k_cache, v_cache, lens):
        outs = []
        for i in range(steps):
            out = m.flash_attn_with_kvcache(q, k_cache, v_cache, cache_seqlens=lens, num_splits=[0, 8, 3, 2][i % 4])
            outs.append(out)
            if i % 2:  # a torch kernel between: scale q, write a cache row from it, advance the lengths
                q = out * 16.0
                row = capacity - 3 * steps + (i - 1) // 2  # row 0's next key: lens[0] before the add below
                k_cache[:, row].copy_(q[:, 0, ::nheads // nheads_k])
                v_cache[:, row].copy_(out[:, 0, ::nheads // nheads_k])
                lens.add_(1)
            else:  # our kernel right after ours: q is its output as written
                q = out
        return torch.stack(outs)

    def run(path):
        if path:
            monkeypatch.setenv(PATH_VAR, path)
        else:
            monkeypatch.delenv(PATH_VAR, raising=False)
        q, k_cache, v_cache, lens = q0.clone(), k0.clone(), v0.clone(), lens0.clone()
        if not graph:
            return chain(q, k_cache, v_cache, lens)
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):  # warm-up on copies, so the captured chain starts from the same state
            chain(q.clone(), k_cache.clone(), v_cache.clone(), lens.clone())
        torch.cuda.current_stream().wait_stream(side)
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            outs = chain(q, k_cache, v_cache, lens)
        g.replay()
        return outs

    plain = run(PLAIN).clone()
    for _ in range(3):
        got = run(path)
        assert torch.equal(got, plain), f"differs from plain launches: {(got - plain).abs().max()}"
    assert torch.isfinite(plain).all()
    m.check_errors()
