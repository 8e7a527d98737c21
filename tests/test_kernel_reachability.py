"""Every kernel header is live (issue 47): derived from the family table, as test_layers.py derives the stages'
imports. The TUs of the whole variant space (every head dim, dtype, arch, direction, causal flag and feature set,
rendered as a build renders them) and the binding's TU reach, through their quoted #includes, every header under
kernels/ampere, kernels/hopper and kernels/common; a header no plan reaches is dead code and goes. And the family
table's reach is what the kernels assume: each family's launch, kernel and small-kernel headers are some plan's,
and the Ampere-path forward is built for sm80/86/89 alone (sm90's forwards are the Hopper family's), so no code
of it may be switched on for sm90 (as its persistent variant was, which no plan built)."""

from __future__ import annotations

import re

import pytest

from flashbuild.pipeline import render
from flashbuild.selection.variants import ARCHS, FAMILIES, select
from test_binding_includes import BINDING, KERNELS, include_closure
from test_hopper_includes import closure

FAMILY_DIRS = ("ampere", "hopper", "common")


@pytest.fixture(scope="module")
def space():
    """Every variant of our own kernels, its rendered TUs' texts and their include closures."""
    selection = select(hdim=None, dtype=None, arch=",".join(ARCHS), direction=None, causal="both", features=None)
    texts = {name[:-3]: text for name, text in render.render_texts(selection, build_key="k").items()
             if name.endswith(".cu")}
    return selection, texts, {name: closure(text) for name, text in texts.items()}


def test_every_kernel_header_is_reached_by_some_plan(space):
    _, _, tus = space
    reached = set().union(*tus.values()) | include_closure(BINDING)
    headers = {p.relative_to(KERNELS).as_posix() for d in FAMILY_DIRS for p in (KERNELS / d).glob("*.h")}
    assert sorted(headers - reached) == [], "no plan's TU includes these headers: delete them, or route a plan to them"


def test_every_header_the_family_table_names_is_some_plans(space):
    selection, _, tus = space
    used = {(v.family.name, v.direction) for v in selection.variants}
    reached = set().union(*tus.values())
    for family in FAMILIES.values():
        named = {*family.launch_headers.values(), *family.small_kernels.values(),
                 *(tu.header for tus_ in family.kernel_tus.values() for tu in tus_)}
        assert named <= reached, (family.name, sorted(named - reached))
        assert {d for (f, d) in used if f == family.name} == set(family.launch_headers), \
            f"{family.name}: a direction with a launch header no plan uses"


INSTANTIATION = re.compile(r"flashbuild::run_(fwd|bwd|splitkv)<(\d+),")


def test_the_ampere_forward_is_built_for_sm8x_alone(space):
    """Which archs each family's direction is compiled for, read from the rendered TUs' instantiations."""
    selection, texts, _ = space
    archs: dict[tuple[str, str], set[int]] = {}
    by_name = {v.name: v for v in selection.variants}
    for name, text in texts.items():
        variant = by_name.get(name)
        if variant is None:  # a device-only kernel TU: no run_* instantiation
            continue
        for direction, arch in INSTANTIATION.findall(text):
            archs.setdefault((variant.family.name, direction), set()).add(int(arch))
    assert archs[("ampere", "fwd")] == {80, 86, 89}, archs
    assert archs[("hopper", "fwd")] == {90}, archs


def test_no_ampere_forward_code_is_switched_on_for_sm90():
    """The Ampere forward's own headers (not its split-KV traits, which sm90's hdim 192/256 split-KV uses, nor the
    shared ampere/utils.h) test no arch of 90 or more: no plan would compile that code."""
    forward = ["ampere/fwd_traits.h", "ampere/fwd_kernel.h", "ampere/fwd_path.h", "ampere/fwd_launch.h",
               "ampere/fwd_softmax.h"]
    for header in forward:
        text = re.sub(r"//[^\n]*", "", (KERNELS / header).read_text())
        assert not re.search(r"\b(kArch|arch)\s*>=?\s*9\d\b", text), f"{header} has code for sm90, where no plan builds it"
