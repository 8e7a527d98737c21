"""Issue 45's decode table in one command: flash_attn_with_kvcache through the public API, eager and replayed
from a CUDA graph, beside PyTorch SDPA's flash and cuDNN backends (enable_gqa, eager and replayed), with the
HBM copy bandwidth measured in the same run.

Usage:
    python3 benchmarks/decode/decode_table.py [--hdim 128,64] [--batch 1,8,64] [--cache 4096,16384,65536]
                                              [--reps 20] [--sweep-splits 4,8,16,32] [--sweep-splits-large 1,2]
                                              [--paths previous,lane-merge]
                                              [--skip-no-idx] [--build-hdims 64,128] [--nvcc-flag=-D...]
                                              [--study-nvcc-flag=-D...] [--json out.json]

One query token per sequence, 32 query heads on 8 K/V heads, fp16, cache_seqlens = the cache length (an int32
tensor on the device: ours then runs its index check kernel, docs/serving.md); `ours no-idx` passes
cache_seqlens=None (the same keys, no index tensor, no check kernel): the check's cost is the difference;
`ours previous` runs with FLASHBUILD_SPLITKV_PATH=previous: the Hopper split-KV's path before its one-launch
decode (the index check kernel, the attention kernel, the combine kernel when it splits), an A/B in the same run;
--paths times other values of it beside (`ours serial-merge`, `ours lane-merge`: the one-launch path with that
merge tail, docs/serving.md), each a column `ours <path>` and a ratio `<path> / ours`; a path `tile=<tile>` sets
FLASHBUILD_SPLITKV_TILE=<tile> instead (`tile=rows64`: the 64-row tile, `tile=decode`: the decode tile, where each
serves the call); a path `deal=<deal>` sets FLASHBUILD_SPLITKV_DEAL=<deal> (`deal=streamk`: the stream-K deal of
the key blocks over the persistent CTAs, common/splitkv_streamk.h); `+` joins them (`deal=streamk+tile=rows64`).
The stream-K deal was taken out of main after run 14 (README.md, "A stream-K deal"): on a tree without
kernels/common/splitkv_streamk.h a `deal=` path is refused before anything is built (the variable is no longer read,
so the column would time the splits twice); rerun it from the commit that README names.
the path `main-host` is the
default with the host work it had before issue 45's host changes: TMA descriptors built for each call
(FLASHBUILD_SPLITKV_PATH=fresh-descriptors) and flash_attn_with_kvcache's full argument checks (no _plain_decode).
--study-nvcc-flag loads a second build of the same selection with those nvcc flags (a study form of the kernels) in
the same process and times it as one more column, `ours study`, in turns with the others (ratio `study / ours`).
--sweep-splits adds a graph-replayed sweep of forced num_splits for the rows of batch <= 8 (the one-launch path),
--sweep-splits-large one for the rows of larger batches (each forced count a column timed in turns with the others).
Every timed call reads another copy of the cache (as many copies as make 256 MB, at least two), so no call
reads it from L2. A row's time is the median over --reps of (events around one pass over the copies) / copies:
back-to-back calls, the host's time included where it is the longer (eager) and not (graph: one replay runs
the pass). The columns of a row are timed in turns (each rep one eager pass of each, one after the other; then
each rep one replay of each), so a slow spell of the machine falls on all of them, in an order shuffled each rep
(seeded: the same orders every run), so that no column is always first nor always after the same one: in run 7
(benchmarks/decode/README.md, "Small calls"), with a fixed order, the column timed first ran the same configuration as
a later one 1.01-1.39x slower eager and up to 1.05x slower replayed; in run 11, with the order rotated (each column
always after the same one), `main-host` (always timed right after `ours`) ran 0.97-1.00x ours' time replayed with the
same kernels. Bytes = K + V of the cache; TB/s = bytes / time. HBM copy: a 4 GiB device-to-device copy_,
read + write bytes / time, median of 10.
--flashinfer times FlashInfer's decode beside (`FlashInfer` and `FlashInfer tc`, its use_tensor_cores form), when
the package imports: BatchDecodeWithPagedKVCacheWrapper over the same caches seen as pages of --flashinfer-page
tokens (NHD, 16 by default, a sequence's pages in order), planned once per row outside the timing (its host work
per step is not counted), its kernels compiled on first use (JIT); each row records its output's largest
difference from ours. flashinfer-python
0.7.4 cannot be carried to the GPU host (a 101 MB wheel over the 64 MiB a call carries, with dependencies the host
lacks: apache-tvm-ffi, cuda-tile, nvidia-cutlass-dsl, nccl4py); 0.2.14.post1's sdist builds here into a 5.4 MB JIT
wheel (benchmarks/decode_flashinfer/README.md says how).
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import json
import math
import os
import random
import statistics

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

import flashbuild
from flashbuild import api, env

HEADS, KV_HEADS = 32, 8
PATH_VAR = "FLASHBUILD_SPLITKV_PATH"
TILE_VAR = "FLASHBUILD_SPLITKV_TILE"  # a path `tile=<value>` sets this instead (decode, rows64: splitkv_decode_launch.h)
DEAL_VAR = "FLASHBUILD_SPLITKV_DEAL"  # a path `deal=<value>` sets this (streamk, splits: common/splitkv_streamk.h)
SETTING_VARS = {"tile=": TILE_VAR, "deal=": DEAL_VAR}
MAIN_HOST = "main-host"  # the pseudo-path of the host work before the kept descriptors and _plain_decode
# The last commit with the stream-K deal (taken out of main after run 14: README.md, "A stream-K deal").
STREAMK_COMMIT = "3a46448"
ROTATE_BYTES = 256e6


def refuse_removed_deal(paths: list[str]) -> None:
    """A `deal=` path on a tree without the stream-K deal: a clear exit before any build, not a column that times
    the splits under the deal's name."""
    asked = [p for p in paths if any(part.startswith("deal=") for part in p.split("+"))]
    if asked and not (env.kernels_dir() / "common" / "splitkv_streamk.h").is_file():
        raise SystemExit(f"decode_table.py: --paths {','.join(asked)}: this tree ({env.kernels_dir()}) has no "
                         f"stream-K deal: it was taken out of main after issue 45's run 14, and "
                         f"FLASHBUILD_SPLITKV_DEAL is no longer read (benchmarks/decode/README.md, \"A stream-K "
                         f"deal\"). Rerun it from the last commit that has it: `git worktree add /tmp/streamk "
                         f"{STREAMK_COMMIT}`, then run this script there; or leave the deal= paths out.")


def timed_once(fn) -> float:
    """ms of one call of fn (which runs one pass and returns how many calls it made), per call."""
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    calls = fn()
    end.record()
    end.synchronize()
    return start.elapsed_time(end) / calls


def graphed(step, copies: int):
    """A graph of one pass over the copies (step(i) is one call on copy i), warmed on a side stream."""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for i in range(copies):
            step(i)
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for i in range(copies):
            step(i)
    return graph


class Contender:
    """One column of a row: a call on cache copy i (step), run with FLASHBUILD_SPLITKV_PATH=path when set (read by
    the binding at every eager call and at capture), eager and from a graph, or from a graph alone."""

    def __init__(self, key: str, step, copies: int, path: str | None = None, eager: bool = True):
        self.key, self.step, self.copies, self.path, self.eager = key, step, copies, path, eager
        self.eager_ms: list[float] = []
        self.graph_ms: list[float] = []
        self.graph = None
        self.failed = False
        try:
            with self.env():
                self.eager_pass()  # warm-up: a backend that refuses the shape fails here
        except RuntimeError:
            self.failed = True

    def settings(self) -> dict[str, str]:
        """The variables the path sets: FLASHBUILD_SPLITKV_PATH, or `tile=` / `deal=` settings joined by `+`."""
        if self.path is None:
            return {}
        if self.path == MAIN_HOST:
            return {PATH_VAR: "fresh-descriptors"}
        parts = self.path.split("+")
        if not any(part.startswith(prefix) for part in parts for prefix in SETTING_VARS):
            return {PATH_VAR: self.path}
        out = {}
        for part in parts:
            prefix = next((p for p in SETTING_VARS if part.startswith(p)), None)
            if prefix is None:
                raise SystemExit(f"decode_table.py: path {self.path!r}: {part!r} is not tile=<tile> nor deal=<deal>")
            out[SETTING_VARS[prefix]] = part[len(prefix):]
        return out

    @contextlib.contextmanager
    def env(self):
        settings = self.settings()
        os.environ.update(settings)
        api._DECODE_FAST_PATH = self.path != MAIN_HOST
        try:
            yield
        finally:
            api._DECODE_FAST_PATH = True
            for var in settings:
                del os.environ[var]

    def eager_pass(self) -> int:
        for i in range(self.copies):
            self.step(i)
        return self.copies

    def time_eager(self) -> None:
        if self.eager and not self.failed:
            with self.env():
                self.eager_ms.append(timed_once(self.eager_pass))

    def capture(self) -> None:
        if not self.failed:
            with self.env():
                try:
                    self.graph = graphed(self.step, self.copies)
                except RuntimeError:
                    self.graph = None

    def time_graph(self) -> None:
        if self.graph is not None:
            self.graph_ms.append(timed_once(lambda: (self.graph.replay(), self.copies)[1]))

    def result(self):
        med = lambda xs: statistics.median(xs) if xs else math.nan  # noqa: E731
        return (med(self.eager_ms), med(self.graph_ms)) if self.eager else med(self.graph_ms)


def hbm_copy_tbs() -> float:
    src = torch.empty(4 << 30, dtype=torch.uint8, device="cuda")
    dst = torch.empty_like(src)
    dst.copy_(src)
    ms = statistics.median(timed_once(lambda: (dst.copy_(src), 1)[1]) for _ in range(10))
    return 2 * src.numel() / ms / 1e9


STUDY = "study"  # the column of the --study-nvcc-flag build


def flashinfer_decode(flashinfer, q, cache: int, page: int, tensor_cores: bool = False):
    """FlashInfer's paged decode of q (batch, 1, heads, hdim) over caches of `cache` tokens a sequence, seen as NHD pages
    of `page` tokens (the same memory: a sequence's pages in order): (plan, run, paged). plan() plans the wrapper (done
    once here); paged(k, v) views caches (batch, cache, KV_HEADS, hdim) as its pages; run(pages) is one decode."""
    batch, _, heads, hdim = q.shape
    pages = cache // page
    wrapper = flashinfer.BatchDecodeWithPagedKVCacheWrapper(torch.empty(128 << 20, dtype=torch.uint8, device="cuda"),
                                                            "NHD", use_tensor_cores=tensor_cores)
    indptr = torch.arange(batch + 1, dtype=torch.int32, device="cuda") * pages
    indices = torch.arange(batch * pages, dtype=torch.int32, device="cuda")
    last = torch.full((batch,), cache - (pages - 1) * page, dtype=torch.int32, device="cuda")

    def plan():
        wrapper.plan(indptr, indices, last, heads, KV_HEADS, hdim, page, q_data_type=torch.float16)

    def paged(k, v):
        return k.view(batch * pages, page, KV_HEADS, hdim), v.view(batch * pages, page, KV_HEADS, hdim)

    plan()
    return plan, functools.partial(wrapper.run, q.view(batch, heads, hdim)), paged


def flashinfer_step(flashinfer, q, ks, vs, cache: int, tensor_cores: bool, page: int):
    """FlashInfer's decode of q over cache copy i (step(i)), planned once (flashinfer_decode); None (and why, printed)
    where it refuses the shape or does not compile."""
    try:
        _, run, paged = flashinfer_decode(flashinfer, q, cache, page, tensor_cores)
        copies = [paged(k, v) for k, v in zip(ks, vs)]
        step = lambda i: run(copies[i])  # noqa: E731
        step(0)
        return step
    except Exception as e:  # the column left out, and why
        batch, _, _, hdim = q.shape
        print(f"FlashInfer{' tc' if tensor_cores else ''}, hdim {hdim} batch {batch} cache {cache}: left out: "
              f"{type(e).__name__}: {str(e).strip().splitlines()[-1][:300] if str(e).strip() else ''}", flush=True)
        return None


def row(m, hdim: int, batch: int, cache: int, reps: int, sweep: list[int], paths: list[str], no_idx: bool,
        study=None, sweep_large: list[int] = (), flashinfer=None, flashinfer_page: int = 16) -> dict:
    """Every column of a row timed in turns: each rep times one eager pass of every contender, one after the other,
    then each rep one graph replay of every contender, so a slow spell of the machine falls on all of them (medians
    over the reps), each rep in another order (shuffled, seeded by the rep), so no column is always first nor always
    after the same column."""
    bytes_kv = 2 * batch * cache * KV_HEADS * hdim * 2
    copies = max(2, math.ceil(ROTATE_BYTES / bytes_kv))
    torch.manual_seed(0)
    q = torch.randn(batch, 1, HEADS, hdim, device="cuda", dtype=torch.float16)
    ks = [torch.randn(batch, cache, KV_HEADS, hdim, device="cuda", dtype=torch.float16) for _ in range(copies)]
    vs = [torch.randn_like(k) for k in ks]
    lens = torch.full((batch,), cache, dtype=torch.int32, device="cuda")
    q_sdpa = q.transpose(1, 2)  # (batch, heads, 1, hdim); the caches as (batch, kv_heads, cache, hdim) views
    out = {"hdim": hdim, "batch": batch, "cache": cache, "copies": copies, "bytes": bytes_kv}

    def ours(i, splits=0):
        return m.flash_attn_with_kvcache(q, ks[i], vs[i], cache_seqlens=lens, num_splits=splits)

    def sdpa(backend):
        def call(i):
            with sdpa_kernel(backend):
                return F.scaled_dot_product_attention(q_sdpa, ks[i].transpose(1, 2), vs[i].transpose(1, 2),
                                                      enable_gqa=True)
        return call

    contenders = [Contender("ours", ours, copies)]
    contenders += [Contender(f"ours_{path}", ours, copies, path=path) for path in paths if path != STUDY]
    if study is not None:
        def ours_study(i):
            return study.flash_attn_with_kvcache(q, ks[i], vs[i], cache_seqlens=lens)
        contenders.append(Contender(f"ours_{STUDY}", ours_study, copies))
        # not a test: the study build's output beside the default's on this row's first cache copy
        out[f"{STUDY}_max_abs_diff"] = (ours_study(0).float() - ours(0).float()).abs().max().item()
    contenders += [Contender(f"splits_{n}", lambda i, n=n: ours(i, n), copies, eager=False)
                   for n in (sweep if batch <= 8 else sweep_large)]
    if no_idx:
        contenders.append(Contender("ours_no_idx", lambda i: m.flash_attn_with_kvcache(q, ks[i], vs[i]), copies))
    contenders += [Contender("sdpa_flash", sdpa(SDPBackend.FLASH_ATTENTION), copies),
                   Contender("sdpa_cudnn", sdpa(SDPBackend.CUDNN_ATTENTION), copies)]
    for key, tensor_cores in (("flashinfer", False), ("flashinfer_tc", True)) if flashinfer is not None else ():
        step = flashinfer_step(flashinfer, q, ks, vs, cache, tensor_cores, flashinfer_page)
        if step is not None:
            contenders.append(Contender(key, step, copies))
            diff = step(0).float() - ours(0).float().view(batch, HEADS, hdim)
            out[f"{key}_max_abs_diff"] = diff.abs().max().item()
    # Eager first, then the graphs, each in turns: the graphs' memory pools (SDPA flash's expanded K/V at batch 64
    # is 69 GB a call) and an eager pass's cached blocks never held at once.
    def shuffled(rep):
        order = list(contenders)
        random.Random(rep).shuffle(order)
        return order

    for rep in range(reps):
        for c in shuffled(rep):
            c.time_eager()
    torch.cuda.empty_cache()
    for c in contenders:
        c.capture()
    for rep in range(reps):
        for c in shuffled(rep):
            c.time_graph()
    for c in contenders:
        out[c.key] = c.result()
    ks.clear(), vs.clear(), contenders.clear()  # the caches and the graphs' pools, before the next row's
    torch.cuda.empty_cache()
    return out


def print_flashinfer(rows: list[dict]) -> None:
    """FlashInfer's columns beside ours and the best of every peer (SDPA flash, cuDNN, FlashInfer's two forms)."""
    finite = lambda x: x if x == x else math.inf  # noqa: E731
    print("\n| hdim | batch | cache | ours µs (graph) | FlashInfer µs (graph) | FlashInfer tc µs (graph) | "
          "best of all / ours eager (graph) | FlashInfer / FlashInfer tc max abs diff from ours |")
    print("| --- " * 8 + "|")
    nan2 = (math.nan, math.nan)
    for r in rows:
        cols = [r.get(k, nan2) for k in ("sdpa_flash", "sdpa_cudnn", "flashinfer", "flashinfer_tc")]
        best_e, best_g = (min((c[j] for c in cols), key=finite) for j in (0, 1))
        oe, og = r["ours"]
        fi, tc = r.get("flashinfer", nan2), r.get("flashinfer_tc", nan2)
        diffs = " / ".join(f"{r[k]:.1e}" if k in r else "-" for k in ("flashinfer_max_abs_diff",
                                                                      "flashinfer_tc_max_abs_diff"))
        print(f"| {r['hdim']} | {r['batch']} | {r['cache'] // 1024}k | {oe * 1e3:.1f} ({og * 1e3:.1f}) | "
              f"{fi[0] * 1e3:.1f} ({fi[1] * 1e3:.1f}) | {tc[0] * 1e3:.1f} ({tc[1] * 1e3:.1f}) | "
              f"{best_e / oe:.3f} ({best_g / og:.3f}) | {diffs} |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--hdim", default="128,64", help="head dims, comma-separated")
    parser.add_argument("--batch", default="1,8,64", help="batch sizes, comma-separated")
    parser.add_argument("--cache", default="4096,16384,65536", help="cache lengths, comma-separated")
    parser.add_argument("--reps", type=int, default=20, help="timed passes per measurement (median)")
    parser.add_argument("--sweep-splits", default="",
                        help="forced num_splits to time (graph) at batch <= 8, comma-separated")
    parser.add_argument("--sweep-splits-large", default="",
                        help="forced num_splits to time (graph) at batch > 8, comma-separated")
    parser.add_argument("--paths", default="previous",
                        help="FLASHBUILD_SPLITKV_PATH values to time beside the default, comma-separated (main-host: "
                             "the default with the host work before the kept descriptors and the plain-call path; "
                             "tile=decode, tile=rows64: FLASHBUILD_SPLITKV_TILE set so instead; deal=streamk: "
                             "FLASHBUILD_SPLITKV_DEAL, on a tree that still has the stream-K deal (before its "
                             f"removal, {STREAMK_COMMIT}); joined by +, e.g. deal=streamk+tile=rows64)")
    parser.add_argument("--skip-no-idx", action="store_true", help="leave out the `ours no-idx` column")
    parser.add_argument("--build-hdims", help="head dims of the build to load (default: --hdim's)")
    parser.add_argument("--nvcc-flag", action="append", default=[],
                        help="an nvcc flag of the build to load (repeatable: a sweep's build, e.g. "
                             "-DFLASHBUILD_SPLITKV_STAGES_HDIM64=6)")
    parser.add_argument("--study-nvcc-flag", action="append", default=[],
                        help="time a second build with this nvcc flag (repeatable) beside, as the column `ours study` "
                             "(e.g. -DFLASHBUILD_HOPPER_FWD_OVERLAP=1)")
    parser.add_argument("--flashinfer", action="store_true",
                        help="time FlashInfer's decode beside, if the package imports (columns FlashInfer, "
                             "FlashInfer tc)")
    parser.add_argument("--flashinfer-page", type=int, default=16,
                        help="FlashInfer's page size: the caches seen as pages of this many tokens (a divisor of each "
                             "cache length; h200-1 of benchmarks/decode_flashinfer/ used the whole length)")
    parser.add_argument("--json", help="write the rows here")
    args = parser.parse_args()
    refuse_removed_deal([x for x in args.paths.split(",") if x])
    uneven = [c for c in map(int, args.cache.split(",")) if args.flashinfer_page < 1 or c % args.flashinfer_page]
    if args.flashinfer and uneven:
        parser.error(f"--flashinfer-page {args.flashinfer_page}: must divide every --cache length; "
                     f"{', '.join(map(str, uneven))} {'is' if len(uneven) == 1 else 'are'} not a multiple of it")
    hdims = [int(x) for x in args.hdim.split(",")]
    build_hdims = args.build_hdims or ",".join(map(str, sorted(hdims)))
    m = flashbuild.load(hdim=build_hdims, dtype="fp16", arch="native", direction="splitkv", causal="off",
                        features=[], **({"nvcc_flags": args.nvcc_flag} if args.nvcc_flag else {}))
    copy_tbs = hbm_copy_tbs()
    sweep = [int(x) for x in args.sweep_splits.split(",") if x]
    sweep_large = [int(x) for x in args.sweep_splits_large.split(",") if x]
    paths = [x for x in args.paths.split(",") if x]
    study = None
    if args.study_nvcc_flag:
        try:
            study = flashbuild.load(hdim=build_hdims, dtype="fp16", arch="native", direction="splitkv", causal="off",
                                    features=[], nvcc_flags=[*args.nvcc_flag, *args.study_nvcc_flag])
            paths.append(STUDY)
        except Exception as e:  # the table without the column, and why
            print(f"the study build did not load, no `ours study` column: {e}")
    flashinfer = None
    if args.flashinfer:
        try:
            import flashinfer
            print(f"FlashInfer {flashinfer.__version__}", flush=True)
        except Exception as e:  # the table without its columns, and why
            print(f"FlashInfer does not import, no FlashInfer columns: {type(e).__name__}: {e}")
            flashinfer = None
    rows = [row(m, h, b, c, args.reps, sweep, paths, not args.skip_no_idx, study, sweep_large, flashinfer,
                args.flashinfer_page)
            for h in hdims for b in map(int, args.batch.split(",")) for c in map(int, args.cache.split(","))]
    print(f"HBM copy: {copy_tbs:.2f} TB/s; {torch.cuda.get_device_name()}, torch {torch.__version__}"
          + (f"; build with {' '.join(args.nvcc_flag)}" if args.nvcc_flag else "")
          + (f"; study build with {' '.join(args.study_nvcc_flag)}" if args.study_nvcc_flag else ""))
    ours_cols = ["ours"] + (["ours_no_idx"] if not args.skip_no_idx else []) + [f"ours_{p}" for p in paths]
    print("| hdim | batch | cache | " + " | ".join(f"{c.replace('_', ' ')} µs (graph)" for c in ours_cols) +
          " | SDPA flash µs (graph) | SDPA cuDNN µs (graph) | best SDPA / ours eager (graph) | " +
          "".join(f"{p} / ours eager (graph) | " for p in paths) + "ours TB/s eager (graph) | of HBM copy (graph) |")
    print("| --- " * (8 + len(ours_cols) + len(paths)) + "|")
    for r in rows:
        def us(key):
            e, g = r[key]
            return f"{e * 1e3:.1f} ({g * 1e3:.1f})"
        best_e = min(r["sdpa_flash"][0], r["sdpa_cudnn"][0], key=lambda x: x if x == x else math.inf)
        best_g = min(r["sdpa_flash"][1], r["sdpa_cudnn"][1], key=lambda x: x if x == x else math.inf)
        oe, og = r["ours"]
        tb_e, tb_g = r["bytes"] / oe / 1e9, r["bytes"] / og / 1e9
        ratios = "".join(f"{r[f'ours_{p}'][0] / oe:.2f} ({r[f'ours_{p}'][1] / og:.2f}) | " for p in paths)
        print(f"| {r['hdim']} | {r['batch']} | {r['cache'] // 1024}k | " + " | ".join(us(c) for c in ours_cols) +
              f" | {us('sdpa_flash')} | {us('sdpa_cudnn')} | {best_e / oe:.3f} ({best_g / og:.3f}) | {ratios}"
              f"{tb_e:.2f} ({tb_g:.2f}) | {tb_e / copy_tbs:.0%} ({tb_g / copy_tbs:.0%}) |")
    if flashinfer is not None:
        print_flashinfer(rows)
    if study is not None:
        print("\nmax |study - ours| of each row's output: " +
              ", ".join(f"{r['hdim']}/{r['batch']}/{r['cache'] // 1024}k {r[f'{STUDY}_max_abs_diff']:.2e}" for r in rows))
    if sweep or sweep_large:
        print("\nGraph-replayed µs with num_splits forced (auto = ours above; each over auto's time in brackets):")
        for label, counts, picked in (("batch <= 8", sweep, [r for r in rows if r["batch"] <= 8]),
                                      ("batch > 8", sweep_large, [r for r in rows if r["batch"] > 8])):
            if not counts or not picked:
                continue
            print(f"\n{label}:\n| hdim | batch | cache | auto | " + " | ".join(f"{n} splits" for n in counts) + " |")
            print("| --- " * (4 + len(counts)) + "|")
            for r in picked:
                auto = r["ours"][1]
                forced = " | ".join(f"{r[f'splits_{n}'] * 1e3:.1f} ({r[f'splits_{n}'] / auto:.3f})" for n in counts)
                print(f"| {r['hdim']} | {r['batch']} | {r['cache'] // 1024}k | {auto * 1e3:.1f} | {forced} |")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"hbm_copy_tbs": copy_tbs, "device": torch.cuda.get_device_name(), "torch": torch.__version__,
                       "nvcc_flags": args.nvcc_flag, "study_nvcc_flags": args.study_nvcc_flag,
                       "rows": rows}, f, indent=1)


if __name__ == "__main__":
    main()
