"""The translation units of a build: which instantiation TUs a selection needs in a tree, named as
the tree names them, and (for trees whose dispatch still reaches them) the combinations left out,
which get stubs that fail with a clear error instead of an undefined symbol."""

from __future__ import annotations

import itertools
from dataclasses import dataclass

from ..selection.variants import Selection, Variant, feature_suffix
from .profile import CUTLASS_TYPES, Profile


@dataclass(frozen=True)
class Unit:
    """One instantiation TU: its file stem (the tree's name for it), the template that renders it,
    what it instantiates, and the archs it is compiled for (one -gencode each)."""

    name: str
    template: str
    direction: str
    hdim: int
    dtype: str
    causal: bool | None          # None: both causal values inside the TU (decided at runtime)
    archs: tuple[str, ...]
    features: tuple[str, ...] = ()
    variant: Variant | None = None  # the built-in profile's variant (its family, its template arguments)

    @property
    def cutlass_type(self) -> str:
        return CUTLASS_TYPES[self.dtype]

    def describe(self) -> str:
        if self.variant is not None:
            return self.variant.describe()
        causal = {None: "causal and not", True: "causal", False: "not causal"}[self.causal]
        return f"{self.direction}, hdim {self.hdim}, {self.dtype}, {causal}, {'+'.join(self.archs)}"


def _name(profile: Profile, direction: str, hdim: int, dtype: str, causal: bool | None, arch: str,
          features: tuple[str, ...]) -> str:
    return profile.instantiations[direction].name.format(
        direction=direction, hdim=hdim, dtype=dtype, causal="_causal" if causal else "", arch=arch,
        features=feature_suffix(features))


def units(selection: Selection, profile: Profile) -> tuple[Unit, ...]:
    """The TUs of `selection` in `profile`'s tree, in canonical order."""
    if profile.feature_mode == "variants":
        out = []
        for v in selection.variants:
            out.append(Unit(_name(profile, v.direction, v.hdim, v.dtype, v.causal, v.arch, v.features),
                            profile.instantiations[v.direction].template, v.direction, v.hdim, v.dtype, v.causal,
                            (v.arch,), v.features, v))
        return tuple(out)
    causal_values = selection.causal if profile.causal == "tu" else (None,)
    arch_groups = [(a,) for a in selection.archs] if profile.arch_in_name else [selection.archs]
    out = []
    for direction, hdim, dtype, causal, archs in itertools.product(
            selection.directions, selection.hdims, selection.dtypes, causal_values, arch_groups):
        out.append(Unit(_name(profile, direction, hdim, dtype, causal, archs[0], ()),
                        profile.instantiations[direction].template, direction, hdim, dtype, causal, archs))
    return tuple(out)


@dataclass(frozen=True)
class Missing:
    """A (direction, head dim, dtype, causal) that the tree's narrowed dispatch can still reach but
    the build does not hold: its stub raises an error naming it and the command that adds it."""

    direction: str
    hdim: int
    dtype: str
    causal: bool

    @property
    def cutlass_type(self) -> str:
        return CUTLASS_TYPES[self.dtype]


def missing(selection: Selection, profile: Profile) -> tuple[Missing, ...]:
    """Combinations the narrowed switches keep reachable (every direction and causal value of the
    selected head dims and dtypes: the tree's API references them all) that no unit instantiates."""
    if profile.missing_template is None:
        return ()
    built = {(u.direction, u.hdim, u.dtype, u.causal) for u in units(selection, profile)}
    causal_values = (False, True) if profile.causal == "tu" else (None,)
    return tuple(Missing(d, h, t, c) for d, h, t, c in itertools.product(
        profile.directions, selection.hdims, selection.dtypes, causal_values) if (d, h, t, c) not in built)
