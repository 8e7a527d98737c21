"""The cost model of count.py against measured times (no GPU). Per tile shape, a call's time is
    c + the busiest CTA's sum over its tiles of (o + s x steps)         non-causal
    c + the busiest CTA's sum over its tiles of (o + s' x steps + x x masked steps)   causal
(c: launch and fill; o: a tile's own cost, Q's load and the epilogue; s, s': a key-block step, non-causal and causal;
x: a masked step's extra). o and s are fitted (least squares; c = 0: left free it traded against o, the tiles a CTA
takes hardly varying, and went below 0 at 192 rows; non-negative least squares put it at 0) on the non-causal rows of
benchmarks/fwd_tile_hdim64's H100 A/B (128 x 128 against 192 x 128, three runs each, 2026-11-25), s' and x on its
causal 8k and 16k rows (the deal then: longest first alone, which the fit walks); the causal 1k, 2k and 4k rows are
predicted, not fitted. Then the fitted constants price today's deal (pairs up to 32 query blocks) at 1k.

    python3 benchmarks/fwd_short_hdim64/fit.py
"""
from __future__ import annotations

import argparse
import json
import pathlib
import statistics

import count as cnt

RUNS = pathlib.Path(__file__).resolve().parents[1] / "fwd_tile_hdim64/results/h100-1/bench-runs.json"
TILE = {"m128": (128, 128), "m192": (192, 128)}
SEQLENS = (1024, 2048, 4096, 8192, 16384)
FIT_CAUSAL = (8192, 16384)


def measured(path=RUNS):
    """{build: {(causal, seqlen): median ms}} of flashbuild's rows."""
    out = {}
    for build, runs in json.loads(path.read_text()).items():
        rows = {}
        for run in runs:
            for r in run["results"]:
                if r["backend"] == "flashbuild":
                    rows.setdefault((r["causal"], r["seqlen"]), []).append(r["ms"])
        out[build] = {k: statistics.median(v) for k, v in rows.items()}
    return out


def busiest(seqlen, block_m, block_n, causal, pair_max_blocks=0, sms=132):
    """(tiles, steps, masked steps) of the CTA with the most steps."""
    c = cnt.count(seqlen, block_m, block_n, sms, causal=causal, pair_max_blocks=pair_max_blocks)
    tiles = cnt.tiles_of_head(seqlen, block_m, block_n, causal)
    if causal:
        walk, _ = cnt.deal(c.m_blocks, c.heads, c.grid, pair_max_blocks)
    else:
        walk = [[(t % c.m_blocks, 0) for t in range(i, c.m_blocks * c.heads, c.grid)] for i in range(c.grid)]
    rows = [(len(w), sum(tiles[m].steps for m, _ in w), sum(tiles[m].masked for m, _ in w)) for w in walk]
    return max(rows, key=lambda r: r[1])


def solve2(rows, values):
    """Least squares of values ~ a x + b y over rows (a, b): the 2 x 2 normal equations, in plain Python."""
    saa = sum(a * a for a, _ in rows)
    sab = sum(a * b for a, b in rows)
    sbb = sum(b * b for _, b in rows)
    sav = sum(a * v for (a, _), v in zip(rows, values))
    sbv = sum(b * v for (_, b), v in zip(rows, values))
    det = saa * sbb - sab * sab
    return (sav * sbb - sbv * sab) / det, (saa * sbv - sab * sav) / det


def fit(times, block_m, block_n):
    """(c, o, s, s', x) in ms."""
    plain = sorted(s for c, s in times if not c)
    o, s = solve2([busiest(n, block_m, block_n, False)[:2] for n in plain], [times[(False, n)] for n in plain])
    rows = [busiest(n, block_m, block_n, True) for n in FIT_CAUSAL]
    s_causal, x = solve2([(r[1], r[2]) for r in rows], [times[(True, n)] - o * r[0] for n, r in zip(FIT_CAUSAL, rows)])
    return 0.0, o, s, s_causal, x


def predict(k, block_m, block_n, causal, seqlen, pair_max_blocks=0):
    c, o, s, s_causal, x = k
    tiles, steps, masked = busiest(seqlen, block_m, block_n, causal, pair_max_blocks)
    return c + o * tiles + (s_causal * steps + x * masked if causal else s * steps)


def main(argv=None):
    argparse.ArgumentParser(description=__doc__.split("\n\n")[0]).parse_args(argv)
    times = measured()
    k = {b: fit(times[b], *t) for b, t in TILE.items()}
    print(f"constants (us): {'tile':>8} {'c':>6} {'o':>6} {'s':>6} {'s_causal':>8} {'x':>6}")
    for b, (bm, bn) in TILE.items():
        print(f"{'':>16}{bm:>4}x{bn:<3} " + " ".join(f"{1000 * v:>{w}.2f}" for v, w in zip(k[b], (6, 6, 6, 8, 6))))
    print(f"\n{'causal':>6} {'seqlen':>6} {'128 ms':>7} {'model':>7} {'192 ms':>7} {'model':>7} {'192/128':>7}"
          f" {'model':>7}  (192/128: speed of 192 rows over 128)")
    for causal in (False, True):
        for n in SEQLENS:
            row = []
            for b, (bm, bn) in TILE.items():
                row += [times[b][(causal, n)], predict(k[b], bm, bn, causal, n)]
            tag = "fitted" if not causal or n in FIT_CAUSAL else "predicted"
            print(f"{str(causal):>6} {n:>6} {row[0]:>7.4f} {row[1]:>7.4f} {row[2]:>7.4f} {row[3]:>7.4f}"
                  f" {row[0] / row[2]:>7.3f} {row[1] / row[3]:>7.3f}  {tag}")
    print("\ncausal 1k, today's deal (pairs up to 32 query blocks a head) priced with the H100 constants:")
    for b, (bm, bn) in TILE.items():
        old, new = predict(k[b], bm, bn, True, 1024), predict(k[b], bm, bn, True, 1024, cnt.PAIR_MAX_BLOCKS)
        tiles, steps, masked = busiest(1024, bm, bn, True, cnt.PAIR_MAX_BLOCKS)
        share = k[b][4] * masked / (new - k[b][0])
        print(f"  {bm}x{bn}: busiest CTA {tiles} tiles, {steps} steps, {masked} masked ({share:.0%} of its time the"
              f" masks' extra); longest first / pairs {old / new:.3f} (balance alone)")


if __name__ == "__main__":
    main()
