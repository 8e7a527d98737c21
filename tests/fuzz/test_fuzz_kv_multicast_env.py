"""Fuzz FLASHBUILD_HOPPER_FWD_KV_MULTICAST, whether the Hopper forward launches its non-causal kernels of head dims from
128 in clusters that share each K and V box (kernels/hopper/fwd_kv_multicast.h), read by the launcher at every launch;
compiled once with the host compiler (no CUDA) into a program that parses the variable and prints what it got. The
property: unset, empty or `on` is on, `off` is off, anything else the named error: printable, at most a few hundred
characters, naming the variable and both settings; never a crash, never a hang, never another value accepted."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given, settings, strategies as st

from fuzzing import examples, program_fixture, run_with_env

ENV = "FLASHBUILD_HOPPER_FWD_KV_MULTICAST"
PROGRAM = r'''
#include <cstdio>
#include "hopper/fwd_kv_multicast.h"
int main() {
  try {
    std::printf("ok %d\n", int(flashbuild::hopper::fwd_kv_multicast()));
  } catch (const std::runtime_error& e) {
    std::printf("error %s\n", e.what());
  }
  return 0;
}
'''


parser = program_fixture("kv_multicast", PROGRAM)


def expected(value: str | None) -> bool | None:
    return {None: True, "": True, "on": True, "off": False}.get(value)


def check(binary: Path, value: str | None) -> None:
    out = run_with_env(binary, ENV, value)
    kind, _, rest = out.partition(" ")
    if kind == "ok":
        assert expected(value) is not None and int(rest) == int(expected(value)), (value, out)
        return
    assert kind == "error", (value, out)
    assert expected(value) is None, (value, "a setting refused", out)
    assert rest.startswith(f"flashbuild: {ENV}='") and "`on`" in rest and "`off`" in rest, (value, out)
    assert len(rest) < 600 and rest.isprintable(), (value, out)


VALUES = st.one_of(
    st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00"), max_size=80),
    st.builds(lambda a, b, c: a + b + c, st.sampled_from(["", " ", "\t"]), st.sampled_from(["on", "off", "ON", "Off"]),
              st.sampled_from(["", " ", "\n", "1"])),
)


@settings(max_examples=examples(200))
@given(VALUES)
def test_the_setting_is_on_off_or_the_named_error(parser, value):
    check(parser, value)


@pytest.mark.parametrize("value", [None, "", "on", "off", "ON", "Off", " on", "off ", "1", "0", "true", "\x1b[31mon",
                                   "o" * 5000])
def test_the_settings_and_their_neighbours(parser, value):
    check(parser, value)
