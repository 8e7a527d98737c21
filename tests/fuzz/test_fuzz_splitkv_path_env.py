"""Fuzz FLASHBUILD_SPLITKV_PATH, the path a Hopper decoding call takes (kernels/common/splitkv_path.h), read by the
binding at every call; compiled once with the host compiler (no CUDA, no torch) into a program that parses the
variable and prints the fields it got. The property: each of the nine names is its own path (unset or empty: the
default), anything else the named error: printable, at most a few hundred characters, naming the variable and every
path; never a crash, never a hang, never another value accepted."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given, settings, strategies as st

from fuzzing import examples, program_fixture, run_with_env

ENV = "FLASHBUILD_SPLITKV_PATH"
PROGRAM = r'''
#include <cstdio>
#include "common/splitkv_path.h"
int main() {
  try {
    const flashbuild::SplitKVPath p = flashbuild::splitkv_path();
    std::printf("ok %d %d %d %d %d\n", int(p.previous), int(p.merge), int(p.dependent_launch),
                int(p.keep_descriptors), int(p.pairs));
  } catch (const std::runtime_error& e) {
    std::printf("error %s\n", e.what());
  }
  return 0;
}
'''
# previous, merge (kSerial 0, kLanes 1, kCluster 2), dependent launch (kNone 0, kEarly 1, kLate 2), descriptors kept,
# pairs: what each name changes from the default, and nothing else.
DEFAULT = (0, 2, 1, 1, 1)
PATHS = {
    "cluster-merge": DEFAULT,
    "pdl-early": DEFAULT,
    "previous": (1, 0, 0, 1, 1),
    "serial-merge": (0, 0, 1, 1, 1),
    "lane-merge": (0, 1, 1, 1, 1),
    "no-pdl": (0, 2, 0, 1, 1),
    "pdl-late": (0, 2, 2, 1, 1),
    "fresh-descriptors": (0, 2, 1, 0, 1),
    "no-pairs": (0, 2, 1, 1, 0),
}


parser = program_fixture("splitkv_path", PROGRAM)


def check(binary: Path, value: str | None) -> None:
    out = run_with_env(binary, ENV, value)
    kind, _, rest = out.partition(" ")
    want = DEFAULT if not value else PATHS.get(value)
    if kind == "ok":
        assert want == tuple(int(x) for x in rest.split()), (value, out)
        return
    assert kind == "error", (value, out)
    assert want is None, (value, "a path refused", out)
    assert rest.startswith(f"flashbuild: {ENV}='") and "is not a split-KV path" in rest, (value, out)
    assert all(name in rest for name in PATHS) and "unset it" in rest, (value, out)
    assert len(rest) < 600 and rest.isprintable(), (value, out)


VALUES = st.one_of(
    st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00"), max_size=80),
    st.builds(lambda pre, name, post: pre + name + post, st.sampled_from(["", " ", "=", "path=", "-"]),
              st.sampled_from([*PATHS, "Previous", "lanes", "pdl", "NO-PAIRS", "cluster"]),
              st.sampled_from(["", " ", "\n", ",no-pdl", "0", "-merge"])),
)


@settings(max_examples=examples(200))
@given(VALUES)
def test_the_path_is_one_of_the_names_or_the_named_error(parser, value):
    check(parser, value)


@pytest.mark.parametrize("value", [None, "", *PATHS, "Previous", "previous ", " no-pdl", "lanes", "no-pairs\n",
                                   "serial-merge,no-pdl", "\x1b[31mprevious", "é", "x" * 5000])
def test_the_paths_and_their_edges(parser, value):
    check(parser, value)
