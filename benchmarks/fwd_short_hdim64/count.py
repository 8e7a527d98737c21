"""The causal Hopper forward at hdim 64, counted on the host (no GPU): per tile shape (fwd_traits.h's legal hdim-64
tiles) and bench shape (16k tokens, model dim 2048: 32 heads of 64), the query blocks a head, the key-block steps
each takes (masked ones: needs_mask of kernels/common/mask.h, on the bottom-aligned view of tile_scheduler.h's
SeqRange), the MMA work computed against the causal triangle's, the 64-row warpgroup slices of a masked step that
see no key of it (whole wasted products), and the persistent deal (PersistentTileScheduler<true>::make and
decode_at, pairs up to kPairMaxBlocks query blocks, mirrored below) in key-block steps: the busiest CTA against the
mean. fit.py turns these counts into times.

    python3 benchmarks/fwd_short_hdim64/count.py [--sms 132] [--seqlens 1024,2048,4096,16384]
"""
from __future__ import annotations

import argparse
import dataclasses

TOKENS, MODEL_DIM = 16384, 2048
ROWS_PER_WARPGROUP = 64
PAIR_MAX_BLOCKS = 32  # kPairMaxBlocks, kernels/hopper/fwd_pairs.h (FLASHBUILD_HOPPER_FWD_PAIRS=short)


@dataclasses.dataclass(frozen=True)
class Tile:
    """A query block's walk: steps over key blocks, of them `masked` with the element-wise mask, and
    `idle_slices` 64-row warpgroup slices of those steps whose rows see no key of the block."""
    steps: int
    masked: int
    idle_slices: int
    useful: int  # (row, key) pairs of real rows this tile may see


def tiles_of_head(seqlen: int, block_m: int, block_n: int, causal: bool = True) -> list[Tile]:
    """Query blocks 0 .. M-1 of one head, seqlen_q == seqlen_k; causal views start `skip` rows early
    (SeqRange::bottom_aligned), so the partial block is the first."""
    m_blocks = -(-seqlen // block_m)
    skip = (block_m - seqlen % block_m) % block_m if causal else 0
    sq = seqlen + skip  # the view's seqlen_q; last_key(row) = row + seqlen_k - sq

    def last_key(row):
        return row + seqlen - sq if causal else seqlen - 1

    out = []
    for m in range(m_blocks):
        last_row = min((m + 1) * block_m, sq) - 1
        n_max = -(-min(seqlen, last_key(last_row) + 1) // block_n)
        masked = idle = 0
        for n in range(n_max):
            first_col, last_col = n * block_n, n * block_n + block_n - 1
            if last_col >= seqlen or (causal and last_col > last_key(m * block_m)):  # needs_mask
                masked += 1
                for w in range(block_m // ROWS_PER_WARPGROUP):
                    wg_last_row = m * block_m + (w + 1) * ROWS_PER_WARPGROUP - 1
                    if last_key(wg_last_row) < first_col:
                        idle += 1
        rows = range(max(m * block_m, skip), min((m + 1) * block_m, sq))
        useful = sum(min(seqlen, last_key(r) + 1) for r in rows)
        out.append(Tile(n_max, masked, idle, useful))
    return out


def deal(m_blocks: int, hbs: int, grid: int, pair_max_blocks: int = PAIR_MAX_BLOCKS, tail_rounds: int = 1):
    """Each CTA's tiles (m, hb) in the order it takes them: PersistentTileScheduler<true>::make and decode_at
    (kernels/hopper/tile_scheduler.h) line by line."""
    pairs = m_blocks // 2
    pair_rounds = 0
    if grid > 0 and 2 <= m_blocks <= pair_max_blocks:
        rounds = pairs * hbs // grid
        pair_rounds = rounds - tail_rounds if rounds > tail_rounds else 0
    paired = pair_rounds * grid
    h0, j0 = (paired // pairs, paired % pairs) if pairs > 0 else (0, 0)
    rest = hbs - h0
    segs, q, top_levels = [], 0, 0  # (q0, m_top, hb0, heads)

    def add(levels, m_top, hb0, heads):
        nonlocal q, top_levels
        if levels <= 0 or heads <= 0:
            return
        if segs and segs[-1][2] == hb0 and segs[-1][3] == heads and segs[-1][1] - top_levels == m_top:
            top_levels += levels
        else:
            segs.append((q, m_top, hb0, heads))
            top_levels = levels
        q += levels * heads

    add(j0, m_blocks - 1, h0 + 1, rest - 1)
    add(pairs - j0, m_blocks - 1 - j0, h0, rest)
    add(m_blocks & 1, pairs, 0, hbs)
    add(pairs - j0, pairs - 1, h0, rest)
    add(j0, j0 - 1, h0 + 1, rest - 1)
    tail_tiles = q

    def tail_index(step, cta):
        r = step - 2 * pair_rounds
        return r * grid + (grid - 1 - cta if r & 1 else cta)

    out = []
    for cta in range(grid):
        tiles, step = [], 0
        while step < 2 * pair_rounds or tail_index(step, cta) < tail_tiles:
            if step < 2 * pair_rounds:
                hb, j = divmod((step >> 1) * grid + cta, pairs)
                m = j if step & 1 else m_blocks - 1 - j
            else:
                qi = tail_index(step, cta)
                seg = [s for s in segs if qi >= s[0]][-1]
                level, at = divmod(qi - seg[0], seg[3])
                m, hb = seg[1] - level, seg[2] + at
            tiles.append((m, hb))
            step += 1
        out.append(tiles)
    seen = sorted(t for tiles in out for t in tiles)
    assert seen == sorted((m, h) for m in range(m_blocks) for h in range(hbs)), "a tile missed or dealt twice"
    return out, pair_rounds


@dataclasses.dataclass(frozen=True)
class Count:
    block_m: int
    block_n: int
    seqlen: int
    m_blocks: int
    heads: int  # (batch, head)s
    grid: int
    pair_rounds: int
    steps: list  # a head's steps per query block
    masked: list
    work_ratio: float  # MMA work computed / the causal triangle's
    idle_share: float  # of the computed MMA work: warpgroup slices that see no key of their step
    mean_steps: float  # per CTA, in this tile's steps
    max_steps: int
    mean_tiles: float
    max_tiles: int
    mma_per_cta: float  # the busiest CTA's MMA work, in 192 x 128 step units


def count(seqlen: int, block_m: int, block_n: int, sms: int = 132, head_dim: int = 64, causal: bool = True,
          pair_max_blocks: int = PAIR_MAX_BLOCKS) -> Count:
    heads = (TOKENS // seqlen) * (MODEL_DIM // head_dim)
    tiles = tiles_of_head(seqlen, block_m, block_n, causal)
    m_blocks = len(tiles)
    grid = min(m_blocks * heads, sms)
    if causal:
        walk, pr = deal(m_blocks, heads, grid, pair_max_blocks)
    else:  # query blocks fastest, CTA i takes i, i + grid, ...
        walk = [[(t % m_blocks, t // m_blocks) for t in range(c, m_blocks * heads, grid)] for c in range(grid)]
        pr = 0
    per_cta = [sum(tiles[m].steps for m, _ in w) for w in walk]
    computed = sum(t.steps for t in tiles) * block_m * block_n
    useful = sum(t.useful for t in tiles)
    idle = sum(t.idle_slices for t in tiles) * ROWS_PER_WARPGROUP * block_n
    unit = 192 * 128
    return Count(block_m, block_n, seqlen, m_blocks, heads, grid, pr, [t.steps for t in tiles],
                 [t.masked for t in tiles], computed / useful, idle / computed, sum(per_cta) / grid, max(per_cta),
                 sum(len(w) for w in walk) / grid, max(len(w) for w in walk),
                 max(per_cta) * block_m * block_n / unit)


# hdim 64's legal tiles (fwd_traits.h: 64 rows a consumer warpgroup, 1-3 of them; block_n from CuTe's
# selector; shared memory for Q, O and `stages` K/V stages): the default and the ones worth counting.
TILES = ((192, 128), (128, 128), (192, 64), (128, 192), (64, 128))


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sms", type=int, default=132, help="CTAs of the persistent grid (the H200's SMs)")
    ap.add_argument("--seqlens", default="1024,2048,4096,16384", help="sequence lengths, comma-separated")
    a = ap.parse_args(argv)
    print(f"{'tile':>8} {'seqlen':>6} {'M':>3} {'heads':>5} {'pair rds':>8} {'steps a head (masked)':>34}"
          f" {'MMA/useful':>10} {'idle WG':>7} {'CTA steps mean/max':>18} {'max/mean':>8} {'tiles mean/max':>14}"
          f" {'busiest MMA':>11}")
    for seqlen in (int(s) for s in a.seqlens.split(",")):
        for bm, bn in TILES:
            c = count(seqlen, bm, bn, a.sms)
            walk = " ".join(f"{s}({k})" for s, k in zip(c.steps, c.masked)) if c.m_blocks <= 8 else \
                f"{sum(c.steps)} ({sum(c.masked)} masked)"
            print(f"{bm:>4}x{bn:<3} {seqlen:>6} {c.m_blocks:>3} {c.heads:>5} {c.pair_rounds:>8} {walk:>34}"
                  f" {c.work_ratio:>10.3f} {c.idle_share:>7.3f} {c.mean_steps:>9.1f}/{c.max_steps:<8}"
                  f" {c.max_steps / c.mean_steps:>8.3f} {c.mean_tiles:>7.1f}/{c.max_tiles:<6} {c.mma_per_cta:>11.1f}")


if __name__ == "__main__":
    main()
