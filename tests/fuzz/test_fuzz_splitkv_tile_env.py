"""Fuzz FLASHBUILD_SPLITKV_TILE, which tile a Hopper split-KV call runs (kernels/hopper/splitkv_decode_switch.h), read
by the launcher at every call; compiled once with the host compiler (no CUDA) into a program that parses the variable
and prints what it got. The property: `decode`, `rows64`, `auto` are those choices (unset or empty: auto), anything
else the named error: printable, at most a few hundred characters, naming the variable and every value; never a
crash, never a hang, never another value accepted."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given, settings, strategies as st

from fuzzing import examples, program_fixture, run_with_env

ENV = "FLASHBUILD_SPLITKV_TILE"
PROGRAM = r'''
#include <cstdio>
#include "hopper/splitkv_decode_switch.h"
int main() {
  try {
    std::printf("ok %d\n", static_cast<int>(flashbuild::hopper::splitkv_tile_choice()));
  } catch (const std::runtime_error& e) {
    std::printf("error %s\n", e.what());
  }
  return 0;
}
'''
CHOICES = {"auto": 0, "decode": 1, "rows64": 2}  # SplitKVTile's order


parser = program_fixture("splitkv_tile", PROGRAM)


def check(binary: Path, value: str | None) -> None:
    out = run_with_env(binary, ENV, value)
    kind, _, rest = out.partition(" ")
    want = CHOICES["auto"] if not value else CHOICES.get(value)
    if kind == "ok":
        assert want == int(rest), (value, out)
        return
    assert kind == "error", (value, out)
    assert want is None, (value, "a tile refused", out)
    assert rest.startswith(f"flashbuild: {ENV}='") and "set decode" in rest and "rows64" in rest, (value, out)
    assert "auto" in rest and len(rest) < 600 and rest.isprintable(), (value, out)


VALUES = st.one_of(
    st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00"), max_size=80),
    st.builds(lambda pre, name, post: pre + name + post, st.sampled_from(["", " ", "=", "tile="]),
              st.sampled_from(["decode", "rows64", "auto", "Decode", "rows", "64", "DECODE"]),
              st.sampled_from(["", " ", "\n", ",rows64", "0"])),
)


@settings(max_examples=examples(200))
@given(VALUES)
def test_the_tile_is_one_of_the_choices_or_the_named_error(parser, value):
    check(parser, value)


@pytest.mark.parametrize("value", [None, "", "auto", "decode", "rows64", "Decode", "rows64 ", " decode", "rows",
                                   "decode\n", "\x1b[31mdecode", "é", "x" * 5000])
def test_the_choices_and_their_edges(parser, value):
    check(parser, value)
