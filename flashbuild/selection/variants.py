"""Variants and the selection: a Variant is one kernel instantiation with one canonical name; a
Selection is the validated axis values a build holds, made by select() from a preset and CLI flags.

Listing the space never decides what is built: a Selection does, and every value is checked
(selection/parsing.py), so only known ints and enum names ever reach generated C++. The space itself
(axes, features, the name rule) is written once, in selection/space.py; the family table is
selection/families.py; presets are selection/presets.py. Their names are re-exported here, so
`from flashbuild.selection.variants import ...` keeps working for every caller.
"""

from __future__ import annotations

import dataclasses
import itertools
import shlex
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterable

from .. import env
from ..errors import SelectionError
from .families import (FAMILIES, FAMILY_NOTES, FAMILY_TABLE, HEAD_DIM_FAMILY, HEAD_DIM_NOTES,  # noqa: F401
                       Family, KernelTu, family_for, family_note, implemented_directions)
from .parsing import (ALIASES, _choices, _items, _said, _shown, _use, _use_features, closest,  # noqa: F401
                      native_archs, parse_archs, parse_causal, parse_directions, parse_dtypes, parse_features,
                      parse_hdims)
from .presets import (CONFIG_KEYS, find_config, is_matrix_config, load_config, matrix_names,  # noqa: F401
                      preset_names, tomllib)
from .space import (ARCH_NUMBER, ARCHS, CAUSAL_MODES, DIRECTIONS, DTYPES, FEATURE_BITS, FEATURES,  # noqa: F401
                    HEAD_DIMS, NATIVE, feature_suffix, features_mask, parse_name, variant_name)

BUILTIN_PROFILE = "flashbuild"  # our own kernels (configs/profiles/flashbuild.toml)


def feature_kwargs(window: tuple[int, int], softcap: float) -> dict[str, Any]:
    """The binding's keywords for a call with this window_size and softcap: none when the call asks
    for neither (so a plain build's functions are called exactly as before features existed)."""
    kwargs: dict[str, Any] = {}
    if tuple(window) != (-1, -1):
        kwargs.update(window_size_left=window[0], window_size_right=window[1])
    if softcap:
        kwargs["softcap"] = softcap
    return kwargs


@dataclass(frozen=True)
class Variant:
    """One kernel instantiation. Its name (space.NAME_RULE) is the TU file name, the object name, the
    key in the compiled-in table and the text in errors; the C++ binding builds the same names with
    variant_name of kernels/common/variant_space.h, rendered from the same rule.

    `features` (canonical order) are the features compiled into this kernel: () is the plain
    kernel, which serves calls that ask for none; a feature variant serves every call that needs
    a window and/or a softcap, switching each of its features on only when the call asks."""

    direction: str
    hdim: int
    dtype: str
    causal: bool
    arch: str
    features: tuple[str, ...] = ()

    def __post_init__(self):
        canonical = tuple(f for f in FEATURES if f in self.features)
        if self.features != canonical or len(set(self.features)) != len(self.features):
            raise ValueError(f"features {self.features!r}: expected distinct names of {', '.join(FEATURES)}, "
                             f"in that order")

    @property
    def name(self) -> str:
        """The name rule (space.NAME_RULE), e.g. fwd_hdim128_bf16_causal_sm90_local_softcap."""
        return variant_name(self.direction, self.hdim, self.dtype, self.causal, self.arch, self.features)

    @property
    def features_mask(self) -> int:
        return features_mask(self.features)

    @property
    def arch_number(self) -> int:
        return ARCH_NUMBER[self.arch]

    @property
    def family(self) -> Family:
        name, _ = HEAD_DIM_FAMILY.get((self.direction, self.arch, self.hdim), (None, None))
        return FAMILIES[name] if name else family_for(self.direction, self.arch)

    @property
    def family_note(self) -> str | None:
        return family_note(self.direction, self.arch, self.hdim)

    @property
    def kernel_tus(self) -> tuple[KernelTu, ...]:
        """The TUs that compile the family's main kernels of this variant device-only, each its own
        (<name>_kernel.cu, ...; nvcc -fatbin), which the variant's TU launches from the fatbins their
        objects embed (kernels/common/kernel_library.h): nvcc's host side (cudafe++, the host compiler)
        and the device sides of the kernels then run in jobs side by side, not one after the other."""
        return tuple(k for k in self.family.kernel_tus.get(self.direction, ()) if k.only is None or k.only(self))

    @property
    def kernel_tu(self) -> bool:
        return bool(self.kernel_tus)

    @property
    def small_kernels_header(self) -> str | None:
        """The header defining the launches of the small kernels this variant shares with every variant of its
        head dim, dtype and arch (Family.small_kernels), or None where its own TU compiles its small kernels."""
        return self.family.small_kernels.get(self.direction)

    @property
    def small_kernels_group(self) -> tuple[str, int, str, str]:
        """The variants that share one compile of their small kernels: direction, head dim, dtype, arch."""
        return (self.direction, self.hdim, self.dtype, self.arch)

    @property
    def deterministic_plain(self) -> bool:
        """Whether this backward variant's own (plain) kernel has the deterministic mode: the Hopper
        backward orders its dQ adds itself (hopper/bwd_epilogue.h), so a deterministic call that needs no
        feature runs there. The Ampere path compiles the mode into the feature kernel alone; its
        deterministic calls run the feature variant (the binding's use_deterministic_kernel)."""
        return self.direction == "bwd" and not self.features and self.kernel_tu

    @classmethod
    def from_name(cls, name: str) -> "Variant":
        """The variant of a canonical name, e.g. what a built extension's variants() returns."""
        fields = parse_name(name)
        if fields is None:
            raise ValueError(f"{name!r} is not a variant name (e.g. fwd_hdim64_fp16_causal_sm90, "
                             f"fwd_hdim64_fp16_causal_sm90_local_softcap)")
        return cls(**fields)

    def describe(self) -> str:
        with_features = f", with {'+'.join(self.features)}" if self.features else ""
        return (f"{self.direction}, hdim {self.hdim}, {self.dtype}, {'causal' if self.causal else 'not causal'}, "
                f"{self.arch}{with_features}")

    def sort_key(self) -> tuple:
        """Canonical order; a feature variant comes right after its plain variant."""
        return (DIRECTIONS.index(self.direction), self.hdim, DTYPES.index(self.dtype),
                self.causal, ARCHS.index(self.arch), self.features_mask)


@dataclass(frozen=True)
class Selection:
    """The validated axis values; the variants are their cross product (the plain variants), plus,
    when `features` is not empty, one feature variant per plain variant holding those features.
    Values are kept in the canonical axis order, so the same selection given in another order is
    equal. `profile` and `source` name the kernel tree (flashbuild/sources/profile.py): our own
    kernels by default; for an external tree its profile's features are its own (e.g. flash-attn 2's
    dropout), and its TUs come from the profile (sources/units.py), not from `variants`."""

    hdims: tuple[int, ...]
    dtypes: tuple[str, ...]
    causal: tuple[bool, ...]
    directions: tuple[str, ...]
    archs: tuple[str, ...]
    features: tuple[str, ...] = FEATURES
    profile: str = BUILTIN_PROFILE
    source: str | None = None    # the external tree's root (resolved); None for our own kernels

    @property
    def variants(self) -> tuple[Variant, ...]:
        product = itertools.product(self.directions, self.hdims, self.dtypes, self.causal, self.archs)
        plain = [Variant(*values) for values in product]
        features = tuple(f for f in self.features if f in FEATURES)
        with_features = [dataclasses.replace(v, features=features) for v in plain] if features else []
        return tuple(sorted(plain + with_features, key=Variant.sort_key))

    @property
    def builtin(self) -> bool:
        return self.profile == BUILTIN_PROFILE

    @property
    def causal_mode(self) -> str:
        return {(False,): "off", (True,): "on"}.get(self.causal, "both")

    @property
    def features_mask(self) -> int:
        return features_mask(f for f in self.features if f in FEATURES)

    @property
    def feature_suffix(self) -> str:
        return feature_suffix(f for f in self.features if f in FEATURES)

    def describe(self) -> str:
        name = Path(self.profile).stem if self.profile.endswith(".toml") else self.profile  # or flash-attn-2@2.6
        tree = "" if self.builtin else f"{name} at {self.source}: "
        return (f"{tree}{','.join(self.directions)} x hdim {','.join(map(str, self.hdims))} x "
                f"{','.join(self.dtypes)} x causal {self.causal_mode} x {','.join(self.archs)} x "
                f"features {','.join(self.features) or 'none'}")

    def as_kwargs(self) -> dict[str, Any]:
        """The arguments of flashbuild.load() that select exactly this (features only when not all on,
        the default)."""
        def one_or_list(values):
            return values[0] if len(values) == 1 else list(values)
        kwargs = {} if self.builtin else {"source": self.source, "profile": self.profile}
        kwargs.update({"hdim": one_or_list(self.hdims), "dtype": one_or_list(self.dtypes),
                       "arch": one_or_list(self.archs), "direction": one_or_list(self.directions),
                       "causal": self.causal_mode})
        if self.builtin and self.features != FEATURES or not self.builtin:
            kwargs["features"] = list(self.features)
        return kwargs

    def cli_args(self, **changes: Any) -> list[str]:
        """The CLI arguments that select this, with some axes replaced (e.g. hdim="64,128")."""
        def axis(name: str, values) -> str:
            return str(changes.get(name, ",".join(map(str, values))))
        args = [] if self.builtin else ["--source", str(self.source), "--profile", self.profile]
        args += ["--hdim", axis("hdim", self.hdims), "--dtype", axis("dtype", self.dtypes),
                 "--arch", axis("arch", self.archs), "--direction", axis("direction", self.directions),
                 "--causal", str(changes.get("causal", self.causal_mode))]
        if self.builtin:
            args += [f"--no-{f}" for f in FEATURES if f not in self.features]
        else:
            args += ["--features", axis("features", self.features) or "none"]
        return args

    def as_cli(self) -> str:
        return shlex.join(self.cli_args())


@dataclass(frozen=True)
class CompileFlags:
    """Flags that change the compiled code (and so the cache key)."""

    debug: bool = False      # -G -lineinfo, no -DNDEBUG
    lineinfo: bool = False   # -lineinfo
    nvcc_flags: tuple[str, ...] = ()  # extra flags appended to every nvcc command

    def __post_init__(self):
        if self.debug and self.lineinfo:
            raise SelectionError("--debug and --lineinfo contradict: --debug already adds -lineinfo "
                                 "(with -G); pass only one of them")

    def label(self) -> str:
        return "debug" if self.debug else "lineinfo" if self.lineinfo else ""


def _profile_name(profile: Any) -> str:
    """How a selection names its profile: by name when it is one of configs/profiles, else by path."""
    return profile.name if profile.path.parent == (env.configs_dir() / "profiles").resolve() else str(profile.path)


def _in_space(values: tuple, valid: tuple, source: str, what: str, tree: str) -> tuple:
    """An axis already checked against our kernels' values, checked against an external tree's."""
    outside = [v for v in values if v not in valid]
    if outside:
        raise SelectionError(f"{_said(source, ','.join(map(str, outside)))}: {tree} has no {what} {outside[0]} (it has: "
                             f"{', '.join(map(str, valid))}); {_use(source, valid[0])}")
    return values


def select(*, hdim: Any = None, dtype: Any = None, arch: Any = None, direction: Any = None,
           causal: Any = None, features: Any = None, without: Iterable[str] = (),
           config: str | Path | None = None, detect: Callable[[], list[str]] | None = None,
           profile: Any = None, source: str | None = None, keywords: bool = False) -> Selection:
    """The Selection from explicit values (CLI flags or load() arguments), over a preset's values,
    over the defaults: every head dim, fp16 and bf16, causal both, every implemented direction,
    the native arch, every feature. None means "not given". `features` replaces the preset's (or
    the default) features; `without` then removes some (the CLI's --no-local, --no-softcap).
    `profile` (a sources.profile.Profile; default: our own kernels) gives an external tree's axes and
    features, and `source` its root. `keywords`: the values are load()/build() arguments, and errors
    name them so (hdim=80, not --hdim 80)."""
    builtin = profile is None or profile.builtin
    names = FEATURES if builtin else profile.features
    said = (lambda key: key) if keywords else (lambda key: f"--{key}")
    values: dict[str, tuple[Any, str]] = {
        "hdim": (HEAD_DIMS, said("hdim")), "dtype": (DTYPES, said("dtype")), "arch": (NATIVE, said("arch")),
        "direction": (implemented_directions() if builtin else profile.directions, said("direction")),
        "causal": ("both", said("causal")), "features": (names, said("features")),
    }
    if not builtin:
        values["hdim"] = (profile.hdims, said("hdim"))
    if config is not None:
        values.update(load_config(config))
    given = {"hdim": hdim, "dtype": dtype, "arch": arch, "direction": direction, "causal": causal}
    values.update({key: (value, said(key)) for key, value in given.items() if value is not None})
    if features is not None:
        values["features"] = (features, said("features"))
    unknown = [f for f in without if f not in names]
    if unknown:
        raise SelectionError(f"--no-{unknown[0]}: no such feature (features: {', '.join(names)}); "
                             f"use {' or '.join(f'--no-{f}' for f in names)}")
    selection = Selection(
        hdims=parse_hdims(*values["hdim"], kernel_sizes=HEAD_DIMS if builtin else
                          tuple(sorted({*HEAD_DIMS, *profile.hdims}))),
        dtypes=parse_dtypes(*values["dtype"]),
        causal=parse_causal(*values["causal"]),
        directions=parse_directions(*values["direction"]) if builtin else
        _choices(values["direction"][0], values["direction"][1], DIRECTIONS),
        archs=parse_archs(*values["arch"], detect=detect),
        features=tuple(f for f in parse_features(*values["features"], names=names) if f not in without),
        profile=BUILTIN_PROFILE if builtin else _profile_name(profile),
        source=None if builtin else source,
    )
    if builtin:
        check_families(selection)
    else:
        tree = f"profile {profile.name}"
        _in_space(selection.hdims, profile.hdims, said("hdim"), "kernel head dim", tree)
        _in_space(selection.dtypes, profile.dtypes, said("dtype"), "dtype", tree)
        _in_space(selection.archs, profile.archs, said("arch"), "arch", tree)
        _in_space(selection.directions, profile.directions, said("direction"), "direction", tree)
    return selection


def check_families(selection: Selection) -> None:
    """Every variant has a family (raises the family error for the first that does not)."""
    for variant in selection.variants:
        variant.family  # noqa: B018 - raises SelectionError when no family serves it
