"""The translation units of a build: which instantiation TUs a selection needs in a tree, named as
the tree names them, and (for trees whose dispatch still reaches them) the combinations left out,
which get stubs that fail with a clear error instead of an undefined symbol."""

from __future__ import annotations

import itertools
import shlex
from dataclasses import dataclass

from ..selection.space import causal_part
from ..selection.variants import FAMILIES, KernelTu, Selection, Variant, feature_suffix
from .profile import CUTLASS_TYPES, Profile

# A variant whose family's kernels compile device-only (Variant.kernel_tus) has a TU per kernel, named after
# it with the KernelTu's part ("kernel", "kernel_ordered"): that kernel alone (nvcc -fatbin), its fatbin
# embedded in its object (pipeline/graph.py); the variant's own TU launches the kernels from those fatbins.
KERNEL_PART = "kernel"
KERNEL_SUFFIX = "_" + KERNEL_PART


def is_kernel_part(part: str) -> bool:
    return part == KERNEL_PART or part.startswith(KERNEL_PART + "_")  # "kernel", "kernel_ordered", ...


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
    source: str | None = None       # a support TU: the tree's file it compiles (profile key support.file)
    hdim_v: int | None = None       # a V head dim other than hdim (profile key axes.hdim_v)
    part: str = ""                  # "" (the variant's TU) or a KernelTu's part
    # A launch TU whose variant shares its small kernels with the build's other variants of its head dim, dtype and
    # arch (Variant.small_kernels_header): the TU that compiles them, the group's first (its own name there).
    small_kernels_host: str | None = None

    @property
    def kind(self) -> str:
        """What the TU compiles, for cost estimates: the direction; where a variant's kernels compile
        device-only, '<direction>/<part>' for each ('<direction>/kernel', 'bwd/kernel_ordered') and
        '<direction>/launch' (the variant's own TU: the launch, and the small kernels where it compiles them:
        small_kernels_host)."""
        if self.part:
            return f"{self.direction}/{self.part}"
        if self.variant is not None and self.variant.kernel_tu:
            return f"{self.direction}/launch"
        return self.direction

    @property
    def compiles_small_kernels(self) -> bool:
        """Whether this TU compiles its group's shared small kernels (its family's small_kernels header)."""
        return self.small_kernels_host == self.name

    @property
    def headers(self) -> tuple[str, ...]:
        """The built-in profile's header the TU includes: the kernel's header for a kernel TU, else its family's
        launch header (variants.HEAD_DIM_FAMILY: a head dim another family serves includes that family's)."""
        v = self.variant
        if v is None:
            return ()
        if is_kernel_part(self.part):
            return (self.kernel_spec.header,)
        return (v.family.launch_headers[v.direction],)

    @property
    def kernel_spec(self) -> KernelTu:
        """A kernel TU's KernelTu (its variant's, of this part)."""
        return next(k for k in self.variant.kernel_tus if k.part == self.part)

    @property
    def head_dim_v(self) -> int:
        return self.hdim_v or self.hdim

    def has(self, feature: str) -> bool:
        return feature in self.features

    @property
    def cutlass_type(self) -> str:
        return CUTLASS_TYPES[self.dtype]

    def describe(self) -> str:
        if self.variant is not None and is_kernel_part(self.part):
            family = self.variant.family.name
            return f"{self.variant.describe()}: its {family} {self.kernel_spec.label} alone, device-only"
        if self.variant is not None:
            return self.variant.describe()
        if self.source is not None:
            return f"the tree's {self.source}, {'+'.join(self.archs)}"
        causal = {None: "causal and not", True: "causal", False: "not causal"}[self.causal]
        with_features = f", with {'+'.join(self.features)}" if self.features else ""
        hdim = f"{self.hdim} (V head dim {self.hdim_v})" if self.hdim_v else str(self.hdim)
        return f"{self.direction}, hdim {hdim}, {self.dtype}, {causal}, {'+'.join(self.archs)}{with_features}"


def variant_name(tu_name: str) -> str:
    """The variant a TU (or its object's stem) belongs to: a kernel TU's variant is its name less its part's
    suffix; any other TU's name is its variant's."""
    parts = {k.part for family in FAMILIES.values() for tus in family.kernel_tus.values() for k in tus}
    for part in sorted(parts, key=len, reverse=True):
        if tu_name.endswith("_" + part):
            return tu_name[:-len(part) - 1]
    return tu_name


def _name(profile: Profile, direction: str, hdim: int | str, dtype: str, causal: bool | None, arch: str,
          features: tuple[str, ...]) -> str:
    return profile.instantiations[direction].name.format(
        direction=direction, hdim=hdim, dtype=dtype, causal=causal_part(bool(causal)), arch=arch,
        features=feature_suffix(features))


def units(selection: Selection, profile: Profile) -> tuple[Unit, ...]:
    """The TUs of `selection` in `profile`'s tree, in canonical order."""
    if profile.feature_mode == "variants":
        out = []
        hosts: dict[tuple, str] = {}  # small-kernel group -> the TU that compiles its small kernels: the first
        for v in selection.variants:
            name = _name(profile, v.direction, v.hdim, v.dtype, v.causal, v.arch, v.features)
            host = hosts.setdefault(v.small_kernels_group, name) if v.small_kernels_header else None
            out.append(Unit(name, profile.instantiations[v.direction].template, v.direction, v.hdim, v.dtype,
                            v.causal, (v.arch,), v.features, v, small_kernels_host=host))
            for k in v.kernel_tus:
                out.append(Unit(f"{name}_{k.part}", k.template, v.direction, v.hdim, v.dtype, v.causal, (v.arch,),
                                v.features, v, part=k.part))
        return tuple(out)
    if profile.feature_tus:
        return _combination_units(selection, profile)
    arch_groups = [(a,) for a in selection.archs] if profile.arch_in_name else [selection.archs]
    out = []
    for direction in selection.directions:
        causal_values = selection.causal if profile.causal_in_tu(direction) else (None,)
        for hdim, dtype, causal, archs in itertools.product(selection.hdims, selection.dtypes, causal_values,
                                                            arch_groups):
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
    if profile.feature_tus:
        return missing_kernels(selection, profile)
    built = {(u.direction, u.hdim, u.dtype, u.causal) for u in units(selection, profile)}
    return tuple(Missing(d, h, t, c) for d in profile.directions for h, t, c in itertools.product(
        selection.hdims, selection.dtypes, (False, True) if profile.causal_in_tu(d) else (None,))
        if (d, h, t, c) not in built)


# ---------------------------------------------------------------- features that make TUs (flash-attn 3)

def head_dims_v(profile: Profile, direction: str, hdim: int, features: tuple[str, ...]) -> list[int | None]:
    """The V head dims of `hdim`'s forward kernels: None (= hdim), then axes.hdim_v's when the build holds
    axes.hdim_v_feature."""
    if direction != "fwd" or profile.hdim_v_feature not in features:
        return [None]
    return [None, *profile.hdim_v.get(hdim, ())]


def feature_combinations(profile: Profile, direction: str, features: tuple[str, ...]) -> list[tuple[str, ...]]:
    """Every on/off combination of `features` that makes a TU of `direction` (the profile's
    features.tus), in the tree's order, without those features.exclude folds into another TU."""
    axis = [f for f in profile.feature_tus.get(direction, ()) if f in features]
    out = []
    for on in itertools.product((False, True), repeat=len(axis)):
        combination = tuple(f for f, flag in zip(axis, on) if flag)
        if not any(set(rule) <= set(combination) for rule in profile.feature_excludes):
            out.append(combination)
    return out


def head_dims(profile: Profile, direction: str, selection: Selection) -> list[int]:
    """The head dims of a direction's kernels: the selected ones, and for the backward with
    axes.hdim_v_feature, the larger ones a call with another V head dim runs on (axes.hdim_v_bwd)."""
    extra = set()
    if direction == "bwd" and profile.hdim_v_feature in selection.features:
        extra = {d for h in selection.hdims for d in profile.hdim_v_bwd.get(h, ())}
    return sorted(set(selection.hdims) | extra, key=lambda h: (h not in selection.hdims, h))


def _combination_units(selection: Selection, profile: Profile) -> tuple[Unit, ...]:
    """One TU per direction x head dim x dtype x arch x combination of the selected features (causal is
    decided inside each TU), then the tree's support TUs the selection needs."""
    out = []
    for direction in selection.directions:
        for hdim, dtype, arch in itertools.product(head_dims(profile, direction, selection), selection.dtypes,
                                                   selection.archs):
            out += _units_of(selection, profile, direction, hdim, dtype, arch)
    for support in profile.support:
        if set(support.needs) <= set(selection.features):
            out.append(Unit(support.name, support.template, "support", 0, selection.dtypes[0], None,
                            tuple(selection.archs), (), source=support.file))
    return tuple(out)


def _units_of(selection: Selection, profile: Profile, direction: str, hdim: int, dtype: str, arch: str) -> list[Unit]:
    """The TUs of one direction, head dim, dtype and arch: each V head dim x feature combination."""
    out = []
    # one causal value selected: the switch overlay (sources/switches.py) narrows the TU to it
    causal = selection.causal[0] if len(selection.causal) == 1 and profile.switches is not None else None
    for hdim_v, combination in itertools.product(head_dims_v(profile, direction, hdim, selection.features),
                                                 feature_combinations(profile, direction, selection.features)):
        out.append(Unit(_name(profile, direction, f"{hdim}_{hdim_v}" if hdim_v else hdim, dtype, None, arch,
                              combination),
                        profile.instantiations[direction].template, direction, hdim, dtype, causal, (arch,),
                        combination, hdim_v=hdim_v))
    return out


@dataclass(frozen=True)
class MissingKernel:
    """A kernel (direction, head dim, dtype, arch, feature combination) that the tree's API still
    references and this build leaves out, and why: its head dim, dtype or direction is not in the
    build. Its stub throws the error that names it and the command that adds it."""

    direction: str
    hdim: int
    dtype: str
    arch: str
    features: tuple[str, ...]
    reason: str                   # "hdim", "dtype", "direction" or "hdim_v"
    note: str = ""                # the error of a direction or V head dim left out (the others come from the plan)
    hdim_v: int | None = None
    causal: None = None           # decided at runtime inside the kernel (read by code shared with FA2)

    @property
    def cutlass_type(self) -> str:
        return CUTLASS_TYPES[self.dtype]

    @property
    def head_dim_v(self) -> int:
        return self.hdim_v or self.hdim

    def has(self, feature: str) -> bool:
        return feature in self.features


def missing_kernels(selection: Selection, profile: Profile) -> tuple[MissingKernel, ...]:
    """What the API of a tree whose features make TUs reaches and no unit instantiates: every direction, head
    dim and dtype of the profile (the tree's API keeps them all; the features this build compiles
    out are -D'd out of it too, so only the selected features' combinations are reached)."""
    built = {(u.direction, u.hdim, u.hdim_v, u.dtype, u.archs[0], u.features)
             for u in _combination_units(selection, profile) if u.source is None}
    every = tuple(profile.features)  # the API references every V head dim (none is -D'd out of it)
    out = []
    for direction, hdim, dtype, arch in itertools.product(profile.directions, profile.hdims, profile.dtypes,
                                                          selection.archs):
        for hdim_v in head_dims_v(profile, direction, hdim, every):
            reason = ("hdim" if hdim not in selection.hdims else "dtype" if dtype not in selection.dtypes
                      else "direction" if direction not in selection.directions else "hdim_v")
            note = ""
            if reason == "direction":
                what = {"fwd": "forward", "bwd": "backward"}.get(direction, direction)
                directions = ",".join(d for d in profile.directions if d in selection.directions or d == direction)
                note = (f"this flashbuild slice of {profile.name} holds no {what} kernels (it holds "
                        f"{', '.join(selection.directions)}); rebuild with: "
                        f"{rebuild_command(selection, direction=directions)}")
            elif reason == "hdim_v" and hdim_v is not None:
                features = ",".join(f for f in profile.features if f in selection.features or f == profile.hdim_v_feature)
                note = (f": the hdim-{hdim} kernels for a V head dim other than {hdim} (V head dims "
                        f"{', '.join(map(str, profile.hdim_v[hdim]))}) are feature {profile.hdim_v_feature}, which this "
                        f"flashbuild slice of {profile.name} leaves out; rebuild with: "
                        f"{rebuild_command(selection, features=features)}")
            for combination in feature_combinations(profile, direction, selection.features):
                if (direction, hdim, hdim_v, dtype, arch, combination) not in built:
                    out.append(MissingKernel(direction, hdim, dtype, arch, combination, reason, note, hdim_v))
    return tuple(out)


def rebuild_command(selection: Selection, **changes) -> str:
    """The command that builds this selection with some axes changed (the selection's axes only: a
    build's --nvcc-flag / --build-dir are not repeated), shell-quoted so it pastes."""
    return shlex.join(["flashbuild", *selection.cli_args(**changes)])
