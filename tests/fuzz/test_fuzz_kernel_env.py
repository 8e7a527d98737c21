"""Fuzz the setting the Hopper forward's launcher reads from the environment at every launch
(FLASHBUILD_HOPPER_FWD_PAIRS, kernels/hopper/fwd_pairs.h), compiled once with the host compiler (no CUDA) into a
program that parses the variable and prints what it got. The property: a setting of the grammar (short, all, off,
short:N / all:N with N 1-8, unset or empty the default: pairs at every length, one tail round up to the bound,
two past it) with the bound and tail rounds it names, or the named error:
printable, at most a few hundred characters, naming the variable and every setting; never a crash, never a hang,
never another value accepted."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from hypothesis import given, settings, strategies as st

from fuzzing import examples, program_fixture, run_with_env

ENV = "FLASHBUILD_HOPPER_FWD_PAIRS"
INT_MAX = 2**31 - 1
PROGRAM = r'''
#include <cstdio>
#include "hopper/fwd_pairs.h"
int main() {
  try {
    const auto p = flashbuild::hopper::fwd_pairs();
    std::printf("ok %d %d %d %d\n", p.max_blocks, p.tail_rounds, p.long_tail_rounds, flashbuild::hopper::kPairMaxBlocks);
  } catch (const std::runtime_error& e) {
    std::printf("error %s\n", e.what());
  }
  return 0;
}
'''


parser = program_fixture("pairs", PROGRAM)


def parse(binary: Path, value: str | None) -> str:
    return run_with_env(binary, ENV, value)


def expected(value: str | None, short: int) -> tuple[int, int, int] | None:
    """(max_blocks, tail rounds up to the short bound, tail rounds past it), or None for an error."""
    if not value:  # the default
        return (INT_MAX, 1, 2)
    m = re.fullmatch(r"(short|all)(?::([1-8]))?|off", value)
    if m is None:
        return None
    if value == "off":
        return (0, 1, 1)
    tail = int(m.group(2) or 1)
    return (short if m.group(1) == "short" else INT_MAX, tail, tail)


def check(binary: Path, value: str | None) -> None:
    out = parse(binary, value)
    kind, _, rest = out.partition(" ")
    if kind == "ok":
        max_blocks, tail, long_tail, short = map(int, rest.split())
        assert expected(value, short) == (max_blocks, tail, long_tail), (value, out)
        return
    assert kind == "error", (value, out)
    assert expected(value, 32) is None, (value, "a setting of the grammar refused", out)
    assert rest.startswith(f"flashbuild: {ENV}='") and "unset (the default), short, all, off" in rest, (value, out)
    assert len(rest) < 600 and rest.isprintable(), (value, out)


VALUES = st.one_of(
    st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00"), max_size=80),
    st.builds(lambda name, sep, tail: name + sep + tail,
              st.sampled_from(["short", "all", "off", "SHORT", "al", "shorter", "", " all"]),
              st.sampled_from(["", ":", "::", ": ", "=", ":-"]),
              st.sampled_from(["", "0", "1", "3", "8", "9", "10", "1x", "\u0663", " 2"])),
)


@settings(max_examples=examples(200))
@given(VALUES)
def test_the_pairs_setting_is_one_of_the_grammar_or_the_named_error(parser, value):
    check(parser, value)


@pytest.mark.parametrize("value", [None, "", "short", "all", "off", "short:1", "all:8", "short:3", "all:0", "all:9",
                                   "off:2", "short:", "Short", "all ", "\x1b[31mall", "x" * 5000])
def test_the_grammar_and_its_edges(parser, value):
    check(parser, value)
