"""The host count of the causal Hopper forward at hdim 64 (benchmarks/fwd_short_hdim64/count.py; no GPU): its
per-tile counts against a brute-force walk of the scores, its mirror of PersistentTileScheduler's deal against the
other mirror's published balance (benchmarks/fwd_tile_turnover/results/balance-132.txt), and the numbers the
study's README quotes. A count that drifts from the kernel's rules (mask.h's needs_mask, SeqRange::bottom_aligned,
the pairs bound) fails here before it misleads an A/B."""

from __future__ import annotations


import pytest

from helpers import REPO, load_script

STUDY = REPO / "benchmarks" / "fwd_short_hdim64"


count = load_script(STUDY / "count.py", "fwd_short_hdim64_count")


def _brute(seqlen, block_m, block_n):
    """Per query block: key blocks walked, masked ones, and (row, key) pairs seen, from the scores one by one."""
    skip = (block_m - seqlen % block_m) % block_m
    out = []
    for m in range(-(-seqlen // block_m)):
        rows = range(m * block_m - skip, (m + 1) * block_m - skip)  # sequence rows; negative: padding
        last = rows[-1]
        steps = -(-min(seqlen, last + 1) // block_n)
        masked = sum(any(key > row or key >= seqlen for row in rows for key in range(n * block_n, (n + 1) * block_n))
                     for n in range(steps))
        useful = sum(min(seqlen, row + 1) for row in rows if row >= 0)
        out.append((steps, masked, useful))
    return out


@pytest.mark.parametrize("seqlen", [64, 200, 384, 1000, 1024])
@pytest.mark.parametrize("tile", [(192, 128), (128, 128), (192, 64), (128, 192), (64, 128)])
def test_per_tile_counts_match_a_brute_force_walk_of_the_scores(seqlen, tile):
    got = [(t.steps, t.masked, t.useful) for t in count.tiles_of_head(seqlen, *tile)]
    assert got == _brute(seqlen, *tile)
    assert sum(u for *_, u in got) == seqlen * (seqlen + 1) // 2  # the causal triangle, each pair once


def test_the_1k_walks_the_readme_quotes():
    t192 = count.tiles_of_head(1024, 192, 128)
    assert [t.steps for t in t192] == [1, 2, 4, 5, 7, 8] and [t.masked for t in t192] == [1, 2, 2, 2, 2, 2]
    t128 = count.tiles_of_head(1024, 128, 128)
    assert [t.steps for t in t128] == list(range(1, 9)) and all(t.masked == 1 for t in t128)
    assert sum(t.idle_slices for t in t128) == 0  # a 128-row diagonal step: every warpgroup sees some key
    c192, c128 = count.count(1024, 192, 128), count.count(1024, 128, 128)
    assert (c192.max_steps, c192.mma_per_cta, c128.max_steps, c128.mma_per_cta) == (106, 106.0, 141, 94.0)


@pytest.mark.parametrize("m_blocks, heads, grid, max_blocks",
                         [(6, 512, 132, 32), (8, 512, 132, 32), (7, 5, 3, 32), (2, 1, 2, 32), (11, 256, 132, 32),
                          (22, 128, 132, 32), (86, 32, 132, 32), (5, 40, 17, 0), (9, 300, 132, 8), (33, 13, 132, 32)])
def test_the_deal_takes_every_tile_once(m_blocks, heads, grid, max_blocks):
    walk, _ = count.deal(m_blocks, heads, grid, max_blocks)  # asserts every tile once itself
    assert len(walk) == grid and sum(len(w) for w in walk) == m_blocks * heads


@pytest.mark.parametrize("seqlen, balance", [(1024, 1.012), (2048, 1.015), (4096, 1.011), (16384, 1.002)])
def test_the_busiest_cta_matches_the_other_mirror_of_the_deal(seqlen, balance):
    # balance-132.txt's hdim-64 rows: the kernel's column (pairs + tail up to 32 query blocks, longest first past)
    c = count.count(seqlen, 192, 128)
    assert round(c.max_steps / c.mean_steps, 3) == balance


def test_the_fit_holds_the_rows_the_readme_quotes(monkeypatch):
    # fit.py imports count.py by name, as it runs from its own folder
    monkeypatch.syspath_prepend(str(STUDY))
    fit = load_script(STUDY / "fit.py", "fwd_short_hdim64_fit")
    times = fit.measured()
    consts = {b: fit.fit(times[b], *tile) for b, tile in fit.TILE.items()}
    assert all(v >= 0 for k in consts.values() for v in k)

    def error(build, causal, seqlen):
        pred = fit.predict(consts[build], *fit.TILE[build], causal, seqlen)
        return pred / times[build][(causal, seqlen)] - 1

    for build, bound in (("m128", 0.017), ("m192", 0.020)):  # non-causal, fitted
        assert all(abs(error(build, False, n)) <= bound for n in fit.SEQLENS), build
    assert all(abs(error("m192", True, n)) <= 0.04 for n in (1024, 2048, 4096))  # held out
    assert 0.16 <= error("m128", True, 1024) <= 0.18  # the 128-row kernel at 1k: over-priced
