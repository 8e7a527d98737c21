"""Fuzz FLASHBUILD_HOPPER_FWD_WIDE_FROM, the number of keys from which the plain non-causal hdim-128 Hopper forward
runs its 176-key tiles (kernels/hopper/fwd_wide_keys.h), read by the launcher at every launch; compiled once with the
host compiler (no CUDA) into a program that parses the variable and prints what it got. The property: a whole number
of ASCII digits from 0 to 2147483647 is that number (unset or empty: the default), anything else the named error:
printable, at most a few hundred characters, naming the variable and the range; never a crash, never a hang, never
another value accepted."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given, settings, strategies as st

from fuzzing import examples, program_fixture, run_with_env

ENV = "FLASHBUILD_HOPPER_FWD_WIDE_FROM"
INT_MAX = 2**31 - 1
PROGRAM = r'''
#include <cstdio>
#include "hopper/fwd_wide_keys.h"
int main() {
  try {
    std::printf("ok %d %d\n", flashbuild::hopper::wide_keys_from(), flashbuild::hopper::kWideKeysFrom);
  } catch (const std::runtime_error& e) {
    std::printf("error %s\n", e.what());
  }
  return 0;
}
'''


parser = program_fixture("wide_keys", PROGRAM)


def parse(binary: Path, value: str | None) -> str:
    return run_with_env(binary, ENV, value)


def expected(value: str | None, default: int) -> int | None:
    if not value:
        return default
    if not all("0" <= c <= "9" for c in value) or int(value[-40:]) > INT_MAX or value[:-40].strip("0"):
        return None
    return int(value)


def check(binary: Path, value: str | None) -> None:
    out = parse(binary, value)
    kind, _, rest = out.partition(" ")
    if kind == "ok":
        keys, default = map(int, rest.split())
        assert expected(value, default) == keys, (value, out)
        return
    assert kind == "error", (value, out)
    assert expected(value, 0) is None, (value, "a number of keys refused", out)
    assert rest.startswith(f"flashbuild: {ENV}='") and "from 0 (every unpaged call" in rest, (value, out)
    assert f"to {INT_MAX} (none)" in rest and len(rest) < 600 and rest.isprintable(), (value, out)


VALUES = st.one_of(
    st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00"), max_size=80),
    st.integers(min_value=-10, max_value=2**64).map(str),
    st.builds(lambda a, b: a + b, st.sampled_from(["", " ", "+", "-", "0x", "00"]),
              st.sampled_from(["0", "8192", "2147483647", "2147483648", "1e4", "\u0663", "12 "])),
)


@settings(max_examples=examples(200))
@given(VALUES)
def test_the_setting_is_a_number_of_keys_or_the_named_error(parser, value):
    check(parser, value)


@pytest.mark.parametrize("value", [None, "", "0", "1", "8192", "0008192", "2147483647", "2147483648", "99999999999",
                                   "-1", "+5", " 5", "5 ", "1e4", "0x10", "\u0663", "\x1b[31m5", "9" * 5000])
def test_the_numbers_and_their_edges(parser, value):
    check(parser, value)
