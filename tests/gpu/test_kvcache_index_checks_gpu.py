"""Bad index values found on the device, and no host synchronisation in any call (docs/serving.md), on a
GPU (skipped without one), for both kernel families: the Hopper split-KV and forward (head dim 64 on
sm90) and the Ampere path's split-KV (head dim 192: the Ampere-path kernel compiled for sm_90a on an
H200; on an Ampere GPU both builds are the Ampere path).

Each bad value (cache_seqlens past the cache or negative, cache_batch_idx past the cache's rows,
cache_leftpad outside a row, block_table entries past the pages or negative, cu_seqlens that leave
the packed tensor) ends in flashbuild.InvalidIndexError naming the argument, its row and the value,
raised by check_errors() and by the next call; then a correct call on the same inputs (poisoned
outputs, fresh random inputs) meets the fp32 reference by flashbuild.debug.checking.compare. The
sanitizer test runs the bad calls under compute-sanitizer memcheck: no access outside the tensors.
The no-sync tests run every call path under torch.cuda.set_sync_debug_mode("error") and behind a
~1 s spin kernel, which must still be running when the call has returned.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")

import flashbuild  # noqa: E402
from flashbuild.debug.checking import compare, poison  # noqa: E402
from flashbuild.reference import attention_ref, kvcache_ref  # noqa: E402

# hopper: the Hopper split-KV (head dims 32-128) and forward; ampere: the Ampere-path split-KV (192).
BUILDS = {
    "hopper": dict(hdim="64", dtype="fp16", arch="native", direction="fwd,splitkv", causal="off", features=[]),
    "ampere": dict(hdim="192", dtype="fp16", arch="native", direction="splitkv", causal="off", features=[]),
}
HEAD_DIM = {"hopper": 64, "ampere": 192}
BATCH, NHEADS, NHEADS_K, CAPACITY, PAGE = 3, 8, 2, 384, 128  # 3 pages a row; 128 divides both key blocks


@pytest.fixture(scope="module", params=sorted(BUILDS))
def family(request):
    return request.param


@pytest.fixture(scope="module")
def m(family):
    return flashbuild.load(**BUILDS[family])


def randn(*shape):
    return torch.randn(*shape, device="cuda", dtype=torch.float16)


def ints(values):
    return torch.tensor(values, dtype=torch.int32, device="cuda")


def inputs(family, seed=0, seqlen_q=1, seqlen_new=0):
    torch.manual_seed(seed)
    d = HEAD_DIM[family]
    q = randn(BATCH, seqlen_q, NHEADS, d)
    k_cache, v_cache = randn(BATCH, CAPACITY, NHEADS_K, d), randn(BATCH, CAPACITY, NHEADS_K, d)
    new = dict(k=randn(BATCH, seqlen_new, NHEADS_K, d), v=randn(BATCH, seqlen_new, NHEADS_K, d)) if seqlen_new else {}
    return q, k_cache, v_cache, new


def paged(k_cache, v_cache, spare=2):
    """The contiguous caches as shuffled pages plus `spare` unused ones; (k_pages, v_pages, block_table)."""
    per_row = CAPACITY // PAGE
    order = torch.randperm(BATCH * per_row + spare, device="cuda")
    table = order[:BATCH * per_row]
    pages = []
    for cache in (k_cache, v_cache):
        p = torch.randn(BATCH * per_row + spare, PAGE, *cache.shape[2:], device="cuda").half()
        p[table] = cache.reshape(BATCH * per_row, PAGE, *cache.shape[2:])
        pages.append(p)
    return pages[0], pages[1], table.view(BATCH, per_row).int()


def check_against_reference(m, q, k_cache, v_cache, **kwargs):
    """A correct call: out and lse meet the fp32 reference (outputs poisoned first)."""
    poison("cuda", [1 << 20] * 4)
    before_k, before_v = k_cache.clone(), v_cache.clone()
    out, lse = m.flash_attn_with_kvcache(q, k_cache, v_cache, return_softmax_lse=True, **kwargs)
    ref = kvcache_ref(q, before_k, before_v, **kwargs)
    low = kvcache_ref(q, before_k, before_v, upcast=False, **kwargs)
    for name, got, r, lo in (("out", out, ref[0], low[0]), ("lse", lse, ref[1], low[1])):
        metric = compare(name, got, r, lo)
        assert metric.passed, metric
    m.check_errors()  # a correct call records nothing


# (label, call kwargs given (k_cache, v_cache, pages), the message's pattern). Values chosen per row so the
# message names which row broke.
def bad_cases(family, k_cache, v_cache):
    k_pages, v_pages, table = paged(k_cache, v_cache)
    num_pages = k_pages.shape[0]
    past = table.clone()
    past[1, 0] = num_pages + 7
    negative = table.clone()
    negative[2, 1] = -3
    return [
        ("seqlens past the cache", dict(cache_seqlens=ints([5, CAPACITY + 1, 7])),
         rf"cache_seqlens\[1\] = {CAPACITY + 1}, outside 0\.\.{CAPACITY}"),
        ("seqlens negative", dict(cache_seqlens=ints([-4, 5, 7])), r"cache_seqlens\[0\] = -4, outside"),
        ("seqlens without room for k", dict(cache_seqlens=ints([5, 6, CAPACITY - 1]), seqlen_new=2),
         rf"cache_seqlens\[2\] = {CAPACITY - 1}, outside 0\.\.{CAPACITY - 2}"),
        ("batch_idx past the rows", dict(cache_seqlens=ints([5, 6, 7]), cache_batch_idx=ints([0, 5, 1])),
         r"cache_batch_idx\[1\] = 5, outside 0\.\.2 \(the rows of k_cache\)"),
        ("batch_idx negative", dict(cache_seqlens=ints([5, 6, 7]), cache_batch_idx=ints([0, 1, -1])),
         r"cache_batch_idx\[2\] = -1"),
        ("leftpad negative", dict(cache_seqlens=ints([5, 60, 7]), cache_leftpad=ints([0, -2, 0])),
         r"cache_leftpad\[1\] = -2, outside"),
        ("leftpad past the row", dict(cache_seqlens=ints([5, 60, 7]), cache_leftpad=ints([CAPACITY + 3, 0, 0])),
         rf"cache_leftpad\[0\] = {CAPACITY + 3}, outside 0\.\.{CAPACITY}"),
        ("block_table past the pages", dict(cache_seqlens=ints([5, 200, 300]), block_table=past, paged=True),
         rf"block_table\[1, 0\] = {num_pages + 7}, outside 0\.\.{num_pages - 1}"),
        ("block_table negative", dict(cache_seqlens=ints([5, 200, 300]), block_table=negative, paged=True),
         r"block_table\[2, 1\] = -3, outside"),
    ], (k_pages, v_pages)


def call(m, q, caches, pages, kwargs):
    kwargs = dict(kwargs)
    seqlen_new = kwargs.pop("seqlen_new", 0)
    is_paged = kwargs.pop("paged", False)
    k_cache, v_cache = pages if is_paged else caches
    if seqlen_new:
        d = q.shape[-1]
        kwargs.update(k=randn(BATCH, seqlen_new, NHEADS_K, d), v=randn(BATCH, seqlen_new, NHEADS_K, d))
    return m.flash_attn_with_kvcache(q, k_cache, v_cache, **kwargs)


def test_each_bad_value_is_a_named_error_then_a_correct_call_works(m, family):
    m.check_errors()
    q, k_cache, v_cache, _ = inputs(family, seed=1)
    cases, pages = bad_cases(family, k_cache, v_cache)
    for label, kwargs, message in cases:
        call(m, q, (k_cache, v_cache), pages, kwargs)  # returns: the check runs on the device
        with pytest.raises(flashbuild.InvalidIndexError, match=message):
            m.check_errors()
        m.check_errors()  # raised once: the record is cleared
        # the context is intact: the same call with good values meets the reference
        good = {key: value for key, value in kwargs.items() if key not in ("seqlen_new", "paged")}
        good["cache_seqlens"] = ints([5, 77, 300])
        good.pop("cache_leftpad", None)
        if "cache_batch_idx" in good:
            good["cache_batch_idx"] = ints([2, 0, 1])
        if "block_table" in good:
            k_use, v_use = pages
            check_against_reference(m, q, k_use, v_use, block_table=paged_table_of(pages, good["block_table"]),
                                    cache_seqlens=good["cache_seqlens"])
        else:
            good.pop("block_table", None)
            check_against_reference(m, q, k_cache.clone(), v_cache.clone(), **good)
        print(f"  {family}: {label}: named error, then a correct call")


def paged_table_of(pages, bad_table):
    """A valid table of the same shape: every entry a page of `pages` (the bad entries replaced)."""
    num_pages = pages[0].shape[0]
    return torch.where((bad_table >= 0) & (bad_table < num_pages), bad_table, torch.zeros_like(bad_table))


def test_the_next_call_raises_the_error_and_the_one_after_runs(m, family):
    m.check_errors()
    q, k_cache, v_cache, _ = inputs(family, seed=2)
    m.flash_attn_with_kvcache(q, k_cache, v_cache, cache_seqlens=ints([3, CAPACITY + 50, 4]))
    torch.cuda.synchronize()  # the bad call's kernels are done: the next call sees the record
    with pytest.raises(flashbuild.InvalidIndexError, match=r"cache_seqlens\[1\] = .* This call did not run"):
        m.flash_attn_with_kvcache(q, k_cache, v_cache, cache_seqlens=ints([3, 9, 4]))
    check_against_reference(m, q, k_cache, v_cache, cache_seqlens=ints([3, 9, 4]))


def test_unused_block_table_entries_may_hold_anything(m, family):
    """Serving stacks pad a row's table with -1 or stale pages past its keys: no error, the right answer."""
    m.check_errors()
    q, k_cache, v_cache, _ = inputs(family, seed=3)
    k_pages, v_pages, table = paged(k_cache, v_cache)
    lens = ints([5, 130, 250])  # 1, 2, 2 pages used
    table[0, 1:] = -1
    table[1, 2] = 10_000
    table[2, 2] = -7
    poison("cuda", [1 << 20] * 4)
    out, lse = m.flash_attn_with_kvcache(q, k_pages, v_pages, cache_seqlens=lens, block_table=table,
                                         return_softmax_lse=True)
    m.check_errors()
    safe = torch.where((table >= 0) & (table < k_pages.shape[0]), table, torch.zeros_like(table))
    ref = kvcache_ref(q, k_pages, v_pages, cache_seqlens=lens, block_table=safe)
    low = kvcache_ref(q, k_pages, v_pages, cache_seqlens=lens, block_table=safe, upcast=False)
    for name, got, r, lo in (("out", out, ref[0], low[0]), ("lse", lse, ref[1], low[1])):
        assert compare(name, got, r, lo).passed


def test_bad_cu_seqlens_are_a_named_error_then_a_correct_call_works(m, family):
    if family != "hopper":
        pytest.skip("the varlen forward is in the hopper build")
    m.check_errors()
    torch.manual_seed(4)
    total_q, total_k = 40, 90
    q, k, v = randn(total_q, NHEADS, 64), randn(total_k, NHEADS_K, 64), randn(total_k, NHEADS_K, 64)
    good_q, good_k = ints([0, 17, 40]), ints([0, 61, 90])
    cases = [
        (ints([0, 17, 40]), ints([0, 61, 95]), r"cu_seqlens_k\[2\] = 95: .* end at most at the packed tensor's 90"),
        (ints([0, 17, 40]), ints([0, 61, 50]), r"cu_seqlens_k\[2\] = 50: .* never decrease"),
        (ints([3, 17, 40]), ints([0, 61, 90]), r"cu_seqlens_q\[0\] = 3: the offsets must start at 0"),
    ]
    for cu_q, cu_k, message in cases:
        m.flash_attn_varlen_func(q, k, v, cu_q, cu_k, 23, 61)
        with pytest.raises(flashbuild.InvalidIndexError, match=message):
            m.check_errors()
    m.flash_attn_varlen_func(q, k, v, good_q, good_k, 23, 40)  # sequence 0 holds 61 keys > max_seqlen_k 40
    with pytest.raises(flashbuild.InvalidIndexError, match=r"cu_seqlens_k\[1\] = 61: .* max_seqlen_k \(40\)"):
        m.check_errors()
    poison("cuda", [1 << 20] * 4)
    out = m.flash_attn_varlen_func(q, k, v, good_q, good_k, 23, 61)
    m.check_errors()
    for (q0, q1), (k0, k1) in (((0, 17), (0, 61)), ((17, 40), (61, 90))):
        ref, _ = attention_ref(q[None, q0:q1].float(), k[None, k0:k1].float(), v[None, k0:k1].float(), False, None)
        low, _ = attention_ref(q[None, q0:q1], k[None, k0:k1], v[None, k0:k1], False, None, upcast=False)
        assert compare("out", out[None, q0:q1], ref, low).passed


def call_paths(m, family):
    """One call of every path the build serves, as (label, zero-argument function)."""
    d = HEAD_DIM[family]
    q, k_cache, v_cache, new = inputs(family, seed=5, seqlen_new=2)
    lens = ints([5, 77, 300])
    k_pages, v_pages, table = paged(k_cache, v_cache)
    cos = torch.randn(CAPACITY, 16, device="cuda").half()
    sin = torch.randn(CAPACITY, 16, device="cuda").half()
    batch_idx, leftpad = ints([2, 0, 1]), ints([1, 0, 3])  # made here: a list to a tensor is a host copy
    paths = [
        ("kvcache dense", lambda: m.flash_attn_with_kvcache(q, k_cache, v_cache, cache_seqlens=lens)),
        ("kvcache no seqlens", lambda: m.flash_attn_with_kvcache(q, k_cache, v_cache)),
        ("kvcache paged", lambda: m.flash_attn_with_kvcache(q, k_pages, v_pages, cache_seqlens=lens,
                                                            block_table=table)),
        ("kvcache append", lambda: m.flash_attn_with_kvcache(q, k_cache, v_cache, cache_seqlens=lens, **new)),
        ("kvcache append rotary", lambda: m.flash_attn_with_kvcache(q, k_cache, v_cache, cache_seqlens=lens,
                                                                    rotary_cos=cos, rotary_sin=sin, **new)),
        ("kvcache paged append", lambda: m.flash_attn_with_kvcache(q, k_pages, v_pages, cache_seqlens=lens,
                                                                   block_table=table, **new)),
        ("kvcache batch_idx leftpad", lambda: m.flash_attn_with_kvcache(
            q, k_cache, v_cache, cache_seqlens=lens, cache_batch_idx=batch_idx, cache_leftpad=leftpad)),
        ("kvcache num_splits=3", lambda: m.flash_attn_with_kvcache(q, k_cache, v_cache, cache_seqlens=lens,
                                                                   num_splits=3)),
    ]
    if family == "hopper":
        qp = randn(BATCH, 130, NHEADS, d)  # a prefill chunk: the Hopper forward reads the checked indices
        qd, kd, vd = randn(2, 33, NHEADS, d), randn(2, 70, NHEADS_K, d), randn(2, 70, NHEADS_K, d)
        cu_q, cu_k = ints([0, 17, 40]), ints([0, 61, 90])
        qv, kv, vv = randn(40, NHEADS, d), randn(90, NHEADS_K, d), randn(90, NHEADS_K, d)
        paths += [
            ("kvcache prefill chunk", lambda: m.flash_attn_with_kvcache(qp, k_cache, v_cache, cache_seqlens=lens)),
            ("kvcache paged prefill chunk", lambda: m.flash_attn_with_kvcache(qp, k_pages, v_pages,
                                                                              cache_seqlens=lens, block_table=table)),
            ("dense fwd", lambda: m.flash_attn_func(qd, kd, vd)),
            ("dense fwd decode row", lambda: m.flash_attn_func(qd[:, :1], kd, vd)),
            ("varlen fwd", lambda: m.flash_attn_varlen_func(qv, kv, vv, cu_q, cu_k, 23, 61)),
        ]
    return paths


def test_no_call_synchronizes(m, family):
    """set_sync_debug_mode("error") around every call path, and each call returns while a ~1 s spin
    kernel queued before it still runs (a synchronisation anywhere in it would wait for the spin)."""
    paths = call_paths(m, family)
    for _, fn in paths:  # warm up: first-call work (kernel loading, the error record) is done once
        fn()
    torch.cuda.synchronize()
    m.check_errors()
    for label, fn in paths:
        torch.cuda.set_sync_debug_mode("error")
        try:
            fn()
        finally:
            torch.cuda.set_sync_debug_mode("default")
        torch.cuda._sleep(2_000_000_000)  # about a second of spinning at the H200's clock
        fn()
        assert not torch.cuda.current_stream().query(), f"{label}: the call waited for the GPU"
        torch.cuda.synchronize()
    m.check_errors()


SANITIZED = textwrap.dedent("""
    import sys, torch, flashbuild
    sys.path.insert(0, {tests!r})
    import test_kvcache_index_checks_gpu as t
    family = {family!r}
    m = flashbuild.load(**t.BUILDS[family])
    q, k_cache, v_cache, _ = t.inputs(family, seed=1)
    cases, pages = t.bad_cases(family, k_cache, v_cache)
    raised = 0
    for label, kwargs, message in cases:
        t.call(m, q, (k_cache, v_cache), pages, kwargs)
        try:
            m.check_errors()
        except flashbuild.InvalidIndexError:
            raised += 1
    print("RAISED", raised, len(cases))
""")


def test_bad_values_touch_no_memory_outside_the_tensors(m, family):
    """compute-sanitizer memcheck over every bad call: no invalid access, and each still raised."""
    from flashbuild import env
    found = env.find_cuda_tool("compute-sanitizer")
    if found is None:
        pytest.skip("no compute-sanitizer")
    script = SANITIZED.format(tests=os.path.dirname(__file__), family=family)
    run = subprocess.run([str(found.path), "--tool", "memcheck", "--error-exitcode", "3", sys.executable, "-c", script],
                         capture_output=True, text=True, timeout=500, env=os.environ.copy())
    tail = (run.stdout + run.stderr)[-4000:]
    print(tail)
    if "Device not supported" in tail:
        pytest.skip("compute-sanitizer does not support this device here (a gVisor host): " + tail[-300:])
    assert run.returncode == 0, tail
    assert "ERROR SUMMARY: 0 errors" in run.stdout + run.stderr, tail
    raised = [line for line in run.stdout.splitlines() if line.startswith("RAISED")]
    n_cases = len(bad_cases(family, *inputs(family)[1:3])[0])
    assert raised == [f"RAISED {n_cases} {n_cases}"], tail


def test_a_prefill_chunk_on_the_forward_kernel_reads_checked_indices(m, family):
    """130 queries against the cache run on the Hopper forward (flash_api.cpp, kPrefillRowsOnFwdKernel) after
    the split-KV launch's check alone: right answers for contiguous and paged caches, a named error for a bad
    length or page."""
    if family != "hopper":
        pytest.skip("the forward is in the hopper build")
    m.check_errors()
    q, k_cache, v_cache, _ = inputs(family, seed=6, seqlen_q=130)
    lens = ints([140, 300, 200])  # at least the queries: causal or not, every row sees keys
    check_against_reference(m, q, k_cache, v_cache, cache_seqlens=lens)
    k_pages, v_pages, table = paged(k_cache, v_cache)
    check_against_reference(m, q, k_pages, v_pages, cache_seqlens=lens, block_table=table)
    bad_table = table.clone()
    bad_table[2, 0] = k_pages.shape[0]
    m.flash_attn_with_kvcache(q, k_pages, v_pages, cache_seqlens=lens, block_table=bad_table)
    with pytest.raises(flashbuild.InvalidIndexError, match=rf"block_table\[2, 0\] = {k_pages.shape[0]}, outside"):
        m.check_errors()
    m.flash_attn_with_kvcache(q, k_cache, v_cache, cache_seqlens=ints([140, CAPACITY + 1, 200]))
    with pytest.raises(flashbuild.InvalidIndexError, match=rf"cache_seqlens\[1\] = {CAPACITY + 1}, outside"):
        m.check_errors()
