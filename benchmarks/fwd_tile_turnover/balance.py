"""The causal Hopper forward's static deal on the H200's 132 SMs, counted in key blocks (no GPU): per bench shape
(16k tokens, model dim 2048), the largest CTA's work over the mean for the longest-first order alone and for
pairs of query blocks (m, M - 1 - m) of one (batch, head) followed by a longest-first tail
(PersistentTileScheduler in kernels/hopper/tile_scheduler.h; `--tail-rounds` pair rounds left to the tail), and
for FA3's L2 sections (heads whose K/V fit 32 MB, longest first within a section) dealt the same static way
(FA3 deals them dynamically). It also checks that the pair order covers every tile once. Tile shapes as
fwd_tile() in kernels/hopper/fwd_traits.h.

    python3 benchmarks/fwd_tile_turnover/balance.py [--sms 132] [--tail-rounds 1]
"""
import argparse
import math

parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
parser.add_argument("--sms", type=int, default=132, help="CTAs of the persistent grid (SMs)")
parser.add_argument("--tail-rounds", type=int, default=1, help="whole rounds of pairs given to the tail (make())")
args = parser.parse_args()

TILES = {64: (192, 128), 128: (128, 128), 192: (128, 96), 256: (128, 80)}  # hdim: (block_m, block_n)


def lengths(seqlen, block_m, block_n):
    """Key blocks of each query block, causal, seqlen_q == seqlen_k, blocks aligned to the last row."""
    m_blocks = -(-seqlen // block_m)
    skip = (block_m - seqlen % block_m) % block_m
    return [math.ceil(min(seqlen, (m + 1) * block_m - skip) / block_n) for m in range(m_blocks)]


def walk(m_blocks, hbs, grid, pair_rounds):
    """Each CTA's tiles (m, hb) in order: a mirror of PersistentTileScheduler<true>'s decode."""
    pairs, num_tiles = m_blocks // 2, m_blocks * hbs

    def tail_index(step, b):
        r = step - 2 * pair_rounds
        return r * grid + ((grid - 1 - b) if r & 1 else b)

    def decode(step, b):
        if step < 2 * pair_rounds:
            u = (step // 2) * grid + b
            j = u % pairs
            return (j if step & 1 else m_blocks - 1 - j), u // pairs
        units = pair_rounds * grid
        h0, j0 = units // max(pairs, 1), units % max(pairs, 1)
        rest = hbs - h0
        outer = max(rest - 1, 1)
        q = tail_index(step, b)
        if q < j0 * outer:
            return m_blocks - 1 - q // outer, h0 + 1 + q % outer
        q -= j0 * outer
        odd = m_blocks & 1
        above = m_blocks - 1 - j0 - pairs + (0 if odd else 1)
        if q < above * rest:
            return m_blocks - 1 - j0 - q // rest, h0 + q % rest
        q -= above * rest
        if odd:
            if q < hbs:
                return pairs, q
            q -= hbs
        below = pairs - j0
        if q < below * rest:
            return pairs - 1 - q // rest, h0 + q % rest
        q -= below * rest
        return j0 - 1 - q // outer, h0 + 1 + q % outer

    out = []
    for b in range(grid):
        tiles, step = [], 0
        while step < 2 * pair_rounds or tail_index(step, b) < num_tiles - 2 * pair_rounds * grid:
            tiles.append(decode(step, b))
            step += 1
        out.append(tiles)
    seen = sorted(t for tiles in out for t in tiles)
    assert seen == sorted((m, h) for m in range(m_blocks) for h in range(hbs)), "a tile missed or dealt twice"
    return out


def sections(ln, hbs, grid, kv_bytes):
    """max / mean of FA3's section order (tile_scheduler.hpp: a power-of-2 number of heads whose K and V fit
    32 MB, query blocks longest first within a section) dealt statically, rounds alternately forwards and backwards."""
    m_blocks = len(ln)
    per = min(1 << int(math.log2(max(1, (32 << 20) // kv_bytes))) if kv_bytes <= 32 << 20 else 1, hbs)
    order = [ln[m_blocks - 1 - t // min(per, hbs - s0)] for s0 in range(0, hbs, per)
             for t in range(m_blocks * min(per, hbs - s0))]
    work = [0] * grid
    for r, s0 in enumerate(range(0, len(order), grid)):
        for p, w in enumerate(order[s0:s0 + grid]):
            work[grid - 1 - p if r & 1 else p] += w
    return max(work) / (sum(work) / grid)


PAIR_MAX_BLOCKS = 32  # kPairMaxBlocks: the kernel pairs only up to this many query blocks a head
print(f"{'hdim':>4} {'seqlen':>6} {'M':>3} {'heads':>5} {'pairs in kernel':>15} {'pair rounds':>11}"
      f" {'longest first':>13}"
      f" {'pairs + tail':>12} {'FA3 sections':>12}")
for hdim, (block_m, block_n) in TILES.items():
    for seqlen in (1024, 2048, 4096, 16384):
        hbs = (16384 // seqlen) * (2048 // hdim)
        ln = lengths(seqlen, block_m, block_n)
        m_blocks, grid = len(ln), min(len(ln) * hbs, args.sms)
        units = (m_blocks // 2) * hbs
        rounds = max(units // grid - args.tail_rounds, 0) if m_blocks >= 2 else 0
        cells = []
        for pr in (0, rounds):
            work = [sum(ln[m] for m, _ in tiles) for tiles in walk(m_blocks, hbs, grid, pr)]
            cells.append(max(work) / (sum(work) / grid))
        cells.append(sections(ln, hbs, grid, seqlen * hdim * 2 * 2))
        used = "yes" if 2 <= m_blocks <= PAIR_MAX_BLOCKS and rounds > 0 else "no"
        print(f"{hdim:>4} {seqlen:>6} {m_blocks:>3} {hbs:>5} {used:>15} {rounds:>11}"
              + "".join(f" {c:>{w}.3f}" for c, w in zip(cells, (13, 12, 12))))
