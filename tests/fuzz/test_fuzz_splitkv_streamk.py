"""The Hopper split-KV's stream-K deal (kernels/common/splitkv_streamk.h) and FLASHBUILD_SPLITKV_DEAL, compiled with
the host compiler (no CUDA) into two programs.

The deal: for arbitrary (tiles, key blocks, slots, fewest blocks a CTA), the program walks every CTA's pieces the way
the kernels' loop does (SplitTileScheduler: first_tile, valid, next_tile, decode) and prints them; checked here
against a Python mirror of the arithmetic and against the deal's promises: every (tile, key block) item is covered
exactly once, a CTA's pieces are contiguous and in order, each tile's pieces are indexed 0 .. count - 1 in key order
with the same count, no tile has more pieces than max_pieces (the partial slots the binding allocates) nor more than
kStreamKMaxPieces, no CTA is idle, and the CTAs' ranges differ by at most one item.

The variable: `streamk`, `splits`, `auto` (unset or empty: auto, the splits) are those choices, anything else the
named error: printable, short, naming the variable and every value; never a crash, never another value accepted."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given, settings, strategies as st

from fuzzing import examples, host_program, run_with_env

MAX_PIECES = 32  # kStreamKMaxPieces, kernels/common/splitkv_streamk.h

DEAL = r'''
#include <cstdio>
#include <cstdlib>
#include "common/splitkv_streamk.h"
using namespace flashbuild;
int main(int argc, char** argv) {
  const long long tiles = std::atoll(argv[1]);
  const int key_blocks = std::atoi(argv[2]), slots = std::atoi(argv[3]), min_blocks = std::atoi(argv[4]);
  const StreamKDeal d = streamk_deal(tiles, key_blocks, slots, min_blocks, kStreamKMaxPieces);
  std::printf("deal %lld %d %d %d\n", (long long)d.items, d.key_blocks, d.grid, d.max_pieces);
  for (int cta = 0; cta < d.grid; ++cta) {  // as the kernels' loop: first_tile, valid, next_tile, decode
    for (long long t = streamk_start(d.items, d.grid, cta); t < streamk_start(d.items, d.grid, cta + 1);
         t = streamk_next(d.key_blocks, t)) {
      const StreamKPiece p = streamk_piece(d.items, d.key_blocks, d.grid, cta, t);
      std::printf("%d %d %d %d %d %d\n", cta, p.tile, p.first, p.end, p.index, p.count);
    }
  }
  return 0;
}
'''

ENV_PROGRAM = r'''
#include <cstdio>
#include "common/splitkv_streamk.h"
int main() {
  try {
    std::printf("ok %d\n", static_cast<int>(flashbuild::splitkv_deal_choice()));
  } catch (const std::runtime_error& e) {
    std::printf("error %s\n", e.what());
  }
  return 0;
}
'''
ENV = "FLASHBUILD_SPLITKV_DEAL"
CHOICES = {"auto": 0, "splits": 0, "streamk": 1}  # SplitKVDeal's values


@pytest.fixture(scope="module")
def deal_program(tmp_path_factory) -> Path:
    return host_program(tmp_path_factory.mktemp("streamk_deal"), DEAL)


@pytest.fixture(scope="module")
def env_program(tmp_path_factory) -> Path:
    return host_program(tmp_path_factory.mktemp("streamk_env"), ENV_PROGRAM)


def mirror_deal(tiles: int, key_blocks: int, slots: int, min_blocks: int) -> tuple[int, int, int]:
    """streamk_deal in Python: (items, grid, max_pieces)."""
    items = tiles * key_blocks

    def max_pieces(grid: int) -> int:
        if key_blocks <= 1 or grid <= 1:
            return 1
        return min(1 + ((key_blocks - 1) * grid + items - 1) // items, key_blocks)

    grid = max(1, min(slots, items // max(min_blocks, 1)))
    while grid > 1 and max_pieces(grid) > MAX_PIECES:
        grid -= 1
    return items, grid, max_pieces(grid)


def walk(binary: Path, tiles: int, key_blocks: int, slots: int, min_blocks: int) -> None:
    import subprocess

    out = subprocess.run([str(binary), str(tiles), str(key_blocks), str(slots), str(min_blocks)], capture_output=True,
                         text=True, timeout=60, check=True).stdout.splitlines()
    _, items, blocks, grid, max_pieces = out[0].split()
    items, blocks, grid, max_pieces = int(items), int(blocks), int(grid), int(max_pieces)
    assert (items, grid, max_pieces) == mirror_deal(tiles, key_blocks, slots, min_blocks)
    assert blocks == key_blocks and 1 <= grid <= max(slots, 1) and 1 <= max_pieces <= MAX_PIECES
    assert grid <= items, "a CTA with no item"
    pieces = [tuple(map(int, line.split())) for line in out[1:]]
    covered: dict[int, list[tuple[int, int, int, int]]] = {}
    ranges: dict[int, int] = {}
    last_end: dict[int, int] = {}
    for cta, tile, first, end, index, count in pieces:
        assert 0 <= tile < tiles and 0 <= first < end <= key_blocks, (cta, tile, first, end)
        start = tile * key_blocks + first
        assert last_end.get(cta, start) == start, "a CTA's pieces are contiguous"
        last_end[cta] = tile * key_blocks + end
        ranges[cta] = ranges.get(cta, 0) + end - first
        covered.setdefault(tile, []).append((first, end, index, count))
    assert sorted(ranges) == list(range(grid)), "every CTA has a piece"
    assert max(ranges.values()) - min(ranges.values()) <= 1, "the CTAs' ranges are even"
    assert sorted(covered) == list(range(tiles))
    for tile, parts in covered.items():
        parts.sort()
        assert parts[0][0] == 0 and parts[-1][1] == key_blocks, tile
        assert all(a[1] == b[0] for a, b in zip(parts, parts[1:])), ("exactly once", tile, parts)
        assert [p[2] for p in parts] == list(range(len(parts))), ("indices in key order", tile, parts)
        assert all(p[3] == len(parts) for p in parts) and len(parts) <= max_pieces, (tile, parts, max_pieces)


# Issue 45's rows at 132 SMs (264 slots): batch 1/8/64 x 8 KV heads, 4k-64k keys at 64 (hdim 128) and 128 (hdim 64)
# keys a block; one tile (all the query heads of one KV head in one block); more slots than items.
@pytest.mark.parametrize("tiles,key_blocks,slots,min_blocks", [
    (8, 64, 264, 2), (8, 32, 264, 1), (64, 32, 264, 1), (64, 256, 264, 2), (512, 32, 264, 1), (512, 1024, 264, 2),
    (512, 64, 264, 2), (1, 8192, 264, 1), (1, 1, 264, 1), (3, 1, 264, 1), (1, 5, 264, 2), (7, 3, 264, 2),
    (100, 1, 8, 1), (1, 1000, 7, 1)])
def test_issue_rows_and_edges(deal_program, tiles, key_blocks, slots, min_blocks):
    walk(deal_program, tiles, key_blocks, slots, min_blocks)


@settings(max_examples=examples(120), deadline=None)
@given(st.integers(1, 600), st.integers(1, 700), st.integers(1, 300), st.integers(1, 4))
def test_every_item_once_in_indexed_pieces(deal_program, tiles, key_blocks, slots, min_blocks):
    walk(deal_program, tiles, key_blocks, slots, min_blocks)


def check_env(binary: Path, value: str | None) -> None:
    out = run_with_env(binary, ENV, value)
    kind, _, rest = out.partition(" ")
    want = CHOICES["auto"] if not value else CHOICES.get(value)
    if kind == "ok":
        assert want == int(rest), (value, out)
        return
    assert kind == "error", (value, out)
    assert want is None, (value, "a deal refused", out)
    assert rest.startswith(f"flashbuild: {ENV}='") and "set streamk" in rest and "splits" in rest, (value, out)
    assert "auto" in rest and len(rest) < 600 and rest.isprintable(), (value, out)


VALUES = st.one_of(
    st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00"), max_size=80),
    st.builds(lambda pre, name, post: pre + name + post, st.sampled_from(["", " ", "=", "deal="]),
              st.sampled_from(["streamk", "splits", "auto", "StreamK", "stream-k", "split", "STREAMK"]),
              st.sampled_from(["", " ", "\n", ",splits", "0"])),
)


@settings(max_examples=examples(200))
@given(VALUES)
def test_the_deal_is_one_of_the_choices_or_the_named_error(env_program, value):
    check_env(env_program, value)


@pytest.mark.parametrize("value", [None, "", "auto", "splits", "streamk", "Streamk", "streamk ", " splits", "stream",
                                   "splits\n", "\x1b[31mstreamk", "é", "x" * 5000])
def test_the_choices_and_their_edges(env_program, value):
    check_env(env_program, value)
