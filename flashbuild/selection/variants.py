"""The variant space and the selection: axes, the family table, validation, TOML presets.

Listing the space never decides what is built: a Selection does, from a preset and CLI flags,
and every value is checked here, so only known ints and enum names ever reach generated C++.
"""

from __future__ import annotations

import dataclasses
import difflib
import itertools
import os
import re
import shlex
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable

from .. import env
from ..errors import SelectionError

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib

# ---------------------------------------------------------------- axes

HEAD_DIMS = (32, 64, 96, 128, 192, 256)
DTYPES = ("fp16", "bf16")
ARCHS = ("sm80", "sm86", "sm89", "sm90")
NATIVE = "native"
DIRECTIONS = ("fwd", "bwd", "splitkv")
CAUSAL_MODES = {"off": (False,), "on": (True,), "both": (False, True)}
ARCH_NUMBER = {"sm80": 80, "sm86": 86, "sm89": 89, "sm90": 90}
# Features a build can compile out. Each is a bit of a variant's features_mask (the kernels' template
# argument); a feature kernel switches each compiled feature on at runtime only when a call asks for it.
FEATURES = ("local", "softcap")
FEATURE_BITS = {"local": 1, "softcap": 2}
BUILTIN_PROFILE = "flashbuild"  # our own kernels (configs/profiles/flashbuild.toml)
CONFIG_KEYS = ("hdim", "dtype", "arch", "direction", "causal", "features")


def feature_kwargs(window: tuple[int, int], softcap: float) -> dict[str, Any]:
    """The binding's keywords for a call with this window_size and softcap: none when the call asks
    for neither (so a plain build's functions are called exactly as before features existed)."""
    kwargs: dict[str, Any] = {}
    if tuple(window) != (-1, -1):
        kwargs.update(window_size_left=window[0], window_size_right=window[1])
    if softcap:
        kwargs["softcap"] = softcap
    return kwargs


# ---------------------------------------------------------------- families

@dataclass(frozen=True)
class KernelTu:
    """One TU of a variant that compiles one of its family's kernels alone, device-only (nvcc -fatbin):
    <variant>_<part>.cu, rendered from `template`, which includes `header` (the kernel's). `label` names the
    kernel in the plan ("the <label> of <variant> alone")."""

    part: str
    template: str
    header: str
    label: str = "kernel"


@dataclass(frozen=True)
class Family:
    """A kernel family: one implementation strategy, with a launch header per direction. `kernel_tus`
    names, per direction, the TUs that compile the family's main kernels, each alone and device-only
    (Variant.kernel_tu): the variant's own TU keeps the dispatch and the launch, which reaches them
    through their fatbins, and they all build side by side.
    `small_kernels` names, per direction, the header that defines the launches of the small kernels every
    variant of one head dim and dtype shares (a backward's dsum and dQ conversion, split-KV's append and
    combine): one launch TU of each such group of a build compiles them (Variant.small_kernels_header), and
    the others link to it."""

    name: str
    summary: str
    launch_headers: dict[str, str] = field(hash=False)  # direction -> header under kernels/
    kernel_tus: dict[str, tuple[KernelTu, ...]] = field(default_factory=dict, hash=False)
    small_kernels: dict[str, str] = field(default_factory=dict, hash=False)  # direction -> header under kernels/


FAMILIES = {
    "ampere": Family("ampere", "mma.sync, ldmatrix, cp.async; runs on sm80 and newer",
                     {"fwd": "ampere/fwd_launch.h", "bwd": "ampere/bwd_launch.h",
                      "splitkv": "ampere/splitkv_launch.h"},
                     # Split-KV's forward kernel (one split or several); the append and combine kernels stay in
                     # the launch TU.
                     {"splitkv": (KernelTu("kernel", "splitkv_kernel.cu.j2", "ampere/fwd_kernel.h",
                                           "split-KV kernel"),)}),
    "hopper": Family("hopper", "wgmma, TMA, a warp-specialized producer and consumer warpgroups (the forward: "
                               "ping-pong consumers, persistent scheduler); sm_90a",
                     {"fwd": "hopper/fwd_launch.h", "bwd": "hopper/bwd_launch.h",
                      "splitkv": "hopper/splitkv_launch.h"},
                     # The backward's main kernel and its deterministic (ordered) instantiation. Split-KV: the
                     # forward kernel compiled for decoding.
                     {"fwd": (KernelTu("kernel", "fwd_kernel.cu.j2", "hopper/fwd_kernel.h"),),
                      "splitkv": (KernelTu("kernel", "splitkv_kernel.cu.j2", "hopper/fwd_kernel.h",
                                           "split-KV kernel"),),
                      "bwd": (KernelTu("kernel", "bwd_kernel.cu.j2", "hopper/bwd_kernel.h"),
                              KernelTu("kernel_ordered", "bwd_kernel.cu.j2", "hopper/bwd_kernel.h",
                                       "deterministic (ordered) kernel"))},
                     # The backward's dsum (rowsum(dO * O)) and dQ conversion; split-KV's append and combine.
                     {"bwd": "hopper/bwd_small_kernels.h", "splitkv": "hopper/splitkv_small_kernels.h"}),
}

# Which family serves (direction, arch), and the head dims another family serves there (HEAD_DIM_FAMILY). The
# Hopper family has a forward, a backward and a split-KV (the forward kernel compiled for decoding) for sm_90a. A
# Hopper variant compiles no Ampere-path kernel: the binding copies tensors TMA cannot address into aligned ones and
# answers calls without queries or keys itself (kernels/binding/flash_api.cpp). FAMILY_NOTES says who serves what in
# the plan.
FAMILY_TABLE = {
    (direction, arch): "ampere" for direction in ("fwd", "bwd", "splitkv") for arch in ("sm80", "sm86", "sm89", "sm90")
} | {("fwd", "sm90"): "hopper", ("bwd", "sm90"): "hopper", ("splitkv", "sm90"): "hopper"}
FAMILY_NOTES = {
    ("bwd", "sm90"): "local windows and softcap (the feature TUs), packed (varlen) and deterministic calls run on "
                     "the Hopper kernel",
    ("splitkv", "sm90"): "the Hopper forward kernel compiled for decoding (64-row tiles, splits, the cache's "
                         "addressing); cache calls of 128 queries or more with nothing to append or rotate, "
                         "contiguous or paged at head dims 32-128, run on the forward variant's Hopper kernel when "
                         "the build holds it",
    ("fwd", "sm90"): "packed (varlen) calls and prefill-sized KV-cache chunks (paged at head dims 32-128) run on "
                     "the Hopper kernel; one-row GQA/MQA calls of more than one wave take one block per K/V head",
}
# (direction, arch, head dim) -> (the family that serves it, why), where that is not FAMILY_TABLE's: the variant is
# then that family's in every respect (its launch header, kernel TUs, small kernels), and the plan says why.
HEAD_DIM_FAMILY = {
    ("bwd", "sm90", hdim): ("ampere", f"head dim {hdim} has no Hopper backward tile: the Ampere-path kernel compiled "
                                      f"for sm_90a") for hdim in (32,)
} | {
    ("splitkv", "sm90", hdim): ("ampere", f"head dim {hdim}: the Ampere-path split-KV compiled for sm_90a (the Hopper "
                                          f"key block of this head dim, {block} rows, does not divide every page size the "
                                          f"binding accepts: multiples of 64 rows)") for hdim, block in ((192, 96), (256, 80))
}
HEAD_DIM_NOTES = {key: note for key, (_, note) in HEAD_DIM_FAMILY.items()}


def family_note(direction: str, arch: str, hdim: int) -> str | None:
    """What the plan and `list` say about who serves this variant, beyond its family's name."""
    return HEAD_DIM_NOTES.get((direction, arch, hdim)) or FAMILY_NOTES.get((direction, arch))


def implemented_directions() -> tuple[str, ...]:
    return tuple(d for d in DIRECTIONS if any(key[0] == d for key in FAMILY_TABLE))


def family_for(direction: str, arch: str) -> Family:
    name = FAMILY_TABLE.get((direction, arch))
    if name is None:
        archs = [a for (d, a) in FAMILY_TABLE if d == direction]
        if not archs:
            raise SelectionError(
                f"direction {direction}: no kernel family implements it yet "
                f"(implemented: {', '.join(implemented_directions())}); use --direction "
                f"{','.join(implemented_directions())}")
        raise SelectionError(
            f"direction {direction} on {arch}: no kernel family implements it "
            f"(implemented for: {', '.join(archs)}); use --arch {','.join(archs)}")
    return FAMILIES[name]


# ---------------------------------------------------------------- variants

def features_mask(features: Iterable[str]) -> int:
    """The OR of the features' bits: 0 none, 1 local, 2 softcap, 3 both."""
    mask = 0
    for feature in features:
        mask |= FEATURE_BITS[feature]
    return mask


def feature_suffix(features: Iterable[str]) -> str:
    """'_local_softcap', '_local', '_softcap' or '': what a feature variant's name ends in."""
    features = tuple(features)
    return "_" + "_".join(features) if features else ""


_VARIANT_NAME = re.compile(rf"({'|'.join(DIRECTIONS)})_hdim(\d+)_({'|'.join(DTYPES)})(_causal)?_({'|'.join(ARCHS)})"
                           + "".join(f"(_{feature})?" for feature in FEATURES))

@dataclass(frozen=True)
class Variant:
    """One kernel instantiation. Its name is the TU file name, the object name, the key in the
    compiled-in table and the text in errors; the C++ binding rebuilds the same names.

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
        causal = "_causal" if self.causal else ""
        return f"{self.direction}_hdim{self.hdim}_{self.dtype}{causal}_{self.arch}{feature_suffix(self.features)}"

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
        return self.family.kernel_tus.get(self.direction, ())

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
        match = _VARIANT_NAME.fullmatch(name)
        if match is None:
            raise ValueError(f"{name!r} is not a variant name (e.g. fwd_hdim64_fp16_causal_sm90, "
                             f"fwd_hdim64_fp16_causal_sm90_local_softcap)")
        direction, hdim, dtype, causal, arch, *features = match.groups()
        return cls(direction, int(hdim), dtype, bool(causal), arch, tuple(f[1:] for f in features if f))

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
        tree = "" if self.builtin else f"{Path(self.profile).stem} at {self.source}: "
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


# ---------------------------------------------------------------- parsing one axis

def _use(source: str, value: Any) -> str:
    """The fix, phrased for where the value came from: a flag (shell-quoted, so it can be pasted),
    a load()/build() keyword (a bare name: `hdim`), or a key in a preset file (`FILE: key`)."""
    if source.startswith("--"):
        return f"use {source} {shlex.quote(str(value))}"
    if ": " not in source:
        return f"pass {source}={value if isinstance(value, int) else repr(str(value))}"
    file, key = source.split(": ", 1)
    text = str(value) if str(value).replace(",", "").isdigit() else f'"{value}"'
    return f"set {key} = {text} in {file}"


def _said(source: str, shown: Any) -> str:
    """What was asked, as the user wrote it: `--hdim 80`, `hdim=80` (a keyword) or `FILE: hdim 80`."""
    return f"{source}={shown}" if not source.startswith("--") and ": " not in source else f"{source} {shown}"


def _shown(value: Any) -> str:
    """A value as an error shows it: as typed when it is plain printable text, else its repr (so a
    control character, an undecodable byte of argv or a non-string is unambiguous)."""
    if isinstance(value, str) and value and value.isprintable() and value.strip() == value:
        return value
    return repr(value)


def _items(value: Any, source: str, valid: tuple, kind: str = "a name") -> list[str]:
    """'64,128' / 64 / [64, '128'] -> ['64', '128'], or an error for an empty list or a value of
    the wrong type (a float, a bool, a table, a list inside the list)."""
    def scalar(item: Any) -> str:
        if isinstance(item, bool) or not isinstance(item, (str, int)):
            raise SelectionError(f"{_said(source, _shown(item))}: expected {kind} or a list of them, not "
                                 f"{type(item).__name__} (valid: {', '.join(map(str, valid))}); {_use(source, valid[0])}")
        return str(item)

    if isinstance(value, (str, int)) and not isinstance(value, bool):
        raw = scalar(value).split(",")
    elif isinstance(value, Iterable) and not isinstance(value, (bytes, dict)):
        raw = [scalar(v) for v in value]
    else:
        scalar(value)  # raises: a float, a bool, a dict, bytes, None
        raw = []
    items = [item.strip().lower() for item in raw if item.strip()]
    if not items:
        raise SelectionError(f"{source}: empty list; give one or more of {', '.join(map(str, valid))}: "
                             f"{_use(source, valid[0])}")
    return list(dict.fromkeys(items))


# Spellings that mean a valid name (suggested, not accepted): what an error's fix proposes.
ALIASES = {
    "float16": "fp16", "half": "fp16", "f16": "fp16", "fp16": "fp16", "torch.float16": "fp16",
    "bfloat16": "bf16", "bf16": "bf16", "torch.bfloat16": "bf16",
    "forward": "fwd", "backward": "bwd", "decode": "splitkv", "split-kv": "splitkv", "split_kv": "splitkv",
    "true": "on", "yes": "on", "1": "on", "false": "off", "no": "off", "0": "off",
}


def closest(item: str, valid: tuple[str, ...]) -> str:
    """The valid name `item` most likely meant: an alias (float16 -> fp16), an arch spelled another
    way (sm_90, SM90, 90, sm_90a, compute_90, 9.0 -> sm90; sm87 -> sm86, which runs on it), the
    nearest spelling, else the first valid name."""
    item = item.strip().lower()
    if ALIASES.get(item) in valid:
        return ALIASES[item]
    arch = re.fullmatch(r"(?:sm|compute|arch)?[_-]?(\d{1,2})\.?(\d)[a-z]?", item)
    if arch and any(v in ARCHS for v in valid):
        major, minor = int(arch.group(1)), int(arch.group(2))
        same_major = [a for a in ARCHS if ARCH_NUMBER[a] // 10 == major and ARCH_NUMBER[a] % 10 <= minor]
        if same_major:
            return same_major[-1]
    near = difflib.get_close_matches(item, valid, n=1, cutoff=0.6)
    return near[0] if near else valid[0]


def _choices(value: Any, source: str, valid: tuple[str, ...]) -> tuple[str, ...]:
    items = _items(value, source, valid)
    for item in items:
        if item not in valid:
            raise SelectionError(f"{_said(source, _shown(item))}: not a valid value (valid: {', '.join(valid)}); "
                                 f"{_use(source, closest(item, valid))}")
    return tuple(v for v in valid if v in items)


def parse_hdims(value: Any, source: str = "--hdim") -> tuple[int, ...]:
    sizes = ", ".join(map(str, HEAD_DIMS))
    hdims = []
    for item in _items(value, source, HEAD_DIMS, kind="a head dim (an integer)"):
        if not re.fullmatch(r"[+-]?[0-9]{1,1000}", item):  # ASCII digits, fewer than int()'s limit: not '²' or '٦٤'
            raise SelectionError(f"{_said(source, _shown(item))}: not an integer head dim (kernel sizes: {sizes}); "
                                 f"{_use(source, 64)}")
        hdim = int(item)
        if hdim <= 0:
            raise SelectionError(f"{_said(source, item)}: a head dim must be a positive integer (kernel sizes: {sizes}; "
                                 f"head dims 1-{HEAD_DIMS[-1]} run padded on the next size up); {_use(source, 64)}")
        if hdim not in HEAD_DIMS:
            bigger = [h for h in HEAD_DIMS if h > hdim]
            if not bigger:
                raise SelectionError(f"{_said(source, hdim)}: {hdim} is not a kernel head dim (kernel sizes: {sizes}); "
                                     f"head dims 1-{HEAD_DIMS[-1]} are supported: {_use(source, HEAD_DIMS[-1])}")
            raise SelectionError(
                f"{_said(source, hdim)}: {hdim} is not a kernel head dim (kernel sizes: {sizes}); calls with "
                f"head dim {hdim} run on the hdim-{bigger[0]} kernel, padded: {_use(source, bigger[0])}")
        hdims.append(hdim)
    return tuple(h for h in HEAD_DIMS if h in hdims)


def parse_dtypes(value: Any, source: str = "--dtype") -> tuple[str, ...]:
    return _choices(value, source, DTYPES)


def parse_directions(value: Any, source: str = "--direction") -> tuple[str, ...]:
    directions = _choices(value, source, DIRECTIONS)
    for direction in directions:
        if direction not in implemented_directions():
            family_for(direction, ARCHS[0])  # raises the "no family implements it yet" error
    return directions


def parse_causal(value: Any, source: str = "--causal") -> tuple[bool, ...]:
    if isinstance(value, bool):
        return (value,)
    valid = tuple(CAUSAL_MODES)
    if not isinstance(value, str):
        raise SelectionError(f"{_said(source, _shown(value))}: expected on, off or both (or a bool), not "
                             f"{type(value).__name__}; {_use(source, 'both')}")
    mode = value.strip().lower()
    if mode not in CAUSAL_MODES:
        raise SelectionError(f"{_said(source, _shown(mode) if mode else repr(value))}: not a valid value (valid: on, off, "
                             f"both); {_use(source, closest(mode, valid) if mode in ALIASES else 'both')}")
    return CAUSAL_MODES[mode]


def parse_archs(value: Any, source: str = "--arch",
                detect: Callable[[], list[str]] | None = None) -> tuple[str, ...]:
    """Arch names; `native` becomes the arch of each GPU nvidia-smi reports."""
    valid = ARCHS + (NATIVE,)
    archs = list(_choices(value, source, valid))
    if NATIVE in archs:
        archs.remove(NATIVE)
        archs += native_archs(detect or env.gpu_compute_caps, source)
    return tuple(a for a in ARCHS if a in archs)


def _use_features(source: str, names: tuple[str, ...] = FEATURES) -> str:
    """The fix for a bad features value: a flag, a load()/build() argument, or the key in a preset
    file; `names`: the tree's features."""
    every = ", ".join(f'"{f}"' for f in names)
    if source.startswith("--"):
        return f"use {source} {','.join(names)} (the default), a subset of them, or {source} none"
    if ": " not in source:
        return f"pass {source}=[{every}] (the default), a subset of them, or {source}=[] (none)"
    file, key = source.split(": ", 1)
    return f"set {key} = [{every}] (the default), a subset of them, or {key} = [] (none) in {file}"


def parse_features(value: Any, source: str = "features", names: tuple[str, ...] = FEATURES) -> tuple[str, ...]:
    """Feature names in canonical order (that of `names`, the tree's features): a list (empty:
    none), "local,softcap", or "none"."""
    valid = f"valid: {', '.join(names)}, or none"
    if isinstance(value, str):
        text = value.strip().lower()
        if not text:
            raise SelectionError(f"{source}: empty string ({valid}); {_use_features(source, names)}")
        raw = text.split(",")
    elif isinstance(value, Iterable) and not isinstance(value, (bytes, dict)):
        raw = list(value)
    else:
        raise SelectionError(f"{_said(source, repr(value))}: expected a list of feature names ({valid}); {_use_features(source, names)}")
    items = []
    for item in raw:
        if not isinstance(item, str):
            raise SelectionError(f"{_said(source, repr(item))}: not a feature name ({valid}); {_use_features(source, names)}")
        if item.strip():
            items.append(item.strip().lower())
    if items == ["none"]:
        return ()
    if "none" in items and "none" not in names:
        others = ",".join(i for i in items if i != "none")
        raise SelectionError(f"{_said(source, _shown(value if isinstance(value, str) else ','.join(items)))}: none (no "
                             f"feature) cannot be combined with {others}; {_use_features(source, names)}")
    for item in items:
        if item not in names:
            raise SelectionError(f"{_said(source, item)}: not a feature ({valid}); {_use_features(source, names)}")
    return tuple(f for f in names if f in items)


def native_archs(detect: Callable[[], list[str]], source: str = "--arch") -> list[str]:
    pass_arch = f"pass {source} {'|'.join(ARCHS)}" if source.startswith("--") else _use(source, ARCHS[0])
    caps = detect()
    if not caps:
        raise SelectionError(f"{_said(source, 'native')}: no GPU found (nvidia-smi reports none); {pass_arch}")
    archs = []
    for cap in caps:
        arch = "sm" + cap.replace(".", "")
        if arch not in ARCHS:
            raise SelectionError(f"{_said(source, 'native')}: this GPU has compute capability {cap} ({arch}), which has "
                                 f"no kernels (archs: {', '.join(ARCHS)}); {pass_arch}")
        archs.append(arch)
    return archs


# ---------------------------------------------------------------- presets and the whole selection

def is_matrix_config(path: Path) -> bool:
    """configs/ also holds CI matrices (a [matrix] or [[cells]] table: docs/ci.md), which are not presets.
    A file that does not parse counts as a preset, so that loading it reports the TOML error."""
    try:
        data = tomllib.loads(path.read_text())
    except (OSError, ValueError, RecursionError):  # TOMLDecodeError, a number past Python's digit limit, deep nesting
        return False
    return "matrix" in data or "cells" in data


def preset_names() -> list[str]:
    """The selection presets in configs/, by name (the CI matrices beside them left out)."""
    return sorted(p.stem for p in env.configs_dir().glob("*.toml") if not is_matrix_config(p))


def matrix_names() -> list[str]:
    """The CI matrices in configs/, by name."""
    return sorted(p.stem for p in env.configs_dir().glob("*.toml") if is_matrix_config(p))


def find_config(name_or_path: str | Path, *, flag: str = "--config", matrices: bool = False) -> Path:
    """A TOML file path, or a bare preset name that finds configs/<name>.toml. A name that looks
    like a path (it has a directory part or a suffix) is only ever a path. `flag` is how the user
    gave it (`--config`, or a command such as `flashbuild matrix`), `matrices` whether a CI matrix is
    wanted: an error lists those and proposes one, in the user's words."""
    text = str(name_or_path)
    shown = shlex.quote(text)
    names = matrix_names() if matrices else preset_names()
    what = "CI matrices" if matrices else "presets"
    listing = f"{what}: {', '.join(names) or 'none'} in {env.configs_dir()}"

    def use(value: str) -> str:
        return f"use {flag} {value}" if flag.startswith("--") else f"use `{flag} {value}`"

    kind = "a CI matrix name" if matrices else "a preset name"
    if not text.strip():
        raise SelectionError(f"{flag} {shown}: empty; give {kind} or a TOML file ({listing}); "
                             f"{use(names[0] if names else 'FILE.toml')}")
    path = Path(text).expanduser()
    if path.is_dir():
        raise SelectionError(f"{flag} {shown}: {path.absolute()} is a directory, not a TOML file ({listing}); "
                             f"{use(shlex.quote(str(path / 'FILE.toml')))} or {kind}")
    if path.is_file():
        return path
    if path.exists():
        raise SelectionError(f"{flag} {shown}: {path.absolute()} is not a regular file; give a TOML file or "
                             f"{kind} ({listing})")
    if path.is_symlink():
        raise SelectionError(f"{flag} {shown}: {path.absolute()} is a broken link (to {os.readlink(path)}); "
                             f"give an existing TOML file or {kind} ({listing})")
    looks_like_path = path.name != text or path.suffix != ""
    guess = difflib.get_close_matches(path.stem, names, n=1, cutoff=0.6) or names[:1]
    fix = use(shlex.quote(guess[0])) if guess else "give an existing TOML file"
    if looks_like_path:
        raise SelectionError(f"{flag} {shown}: no such file {path.absolute()} ({listing}); {fix}")
    preset = env.configs_dir() / f"{text}.toml"
    if preset.is_file():
        return preset
    raise SelectionError(f"{flag} {shown}: no {'CI matrix' if matrices else 'preset'} {text} and no file ./{text} "
                         f"({listing}); {fix}")


def load_config(name_or_path: str | Path) -> dict[str, Any]:
    """The [selection] table of a preset, with its keys and their types checked."""
    path = find_config(name_or_path)
    where = f"--config {shlex.quote(str(path))}"
    try:
        text = path.read_bytes().decode("utf-8")
    except OSError as exc:
        raise SelectionError(f"{where}: cannot read it ({exc.strerror or exc}); fix its permissions or "
                             f"give another file") from None
    except UnicodeDecodeError:
        raise SelectionError(f"{where}: not a text file (TOML is UTF-8 text); give a TOML preset such as "
                             f"{env.configs_dir() / 'ci-compile.toml'}") from None
    try:
        data = tomllib.loads(text)
    except (ValueError, RecursionError) as exc:  # TOMLDecodeError, too many digits, too deep
        raise SelectionError(f"{where}: not valid TOML ({exc}); fix the file") from None
    extra = sorted(set(data) - {"selection", "description"})
    if extra:
        raise SelectionError(f"{where}: unknown table or key {', '.join(extra)} "
                             f"(valid: [selection], description); remove it")
    if not isinstance(data.get("description", ""), str):
        raise SelectionError(f"{where}: description = {data['description']!r} is not a string; "
                             f'write description = "..." or remove it')
    table = data.get("selection", {})
    if not isinstance(table, dict):
        raise SelectionError(f"{where}: selection = {table!r} is not a table; write the keys under a "
                             f"[selection] header ({', '.join(CONFIG_KEYS)})")
    unknown = sorted(set(table) - set(CONFIG_KEYS))
    if unknown:
        raise SelectionError(f"{where}: unknown key {', '.join(unknown)} in [selection] "
                             f"(valid keys: {', '.join(CONFIG_KEYS)}); remove or rename it")
    return {key: (value, f"{path.name}: {key}") for key, value in table.items()}


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
        hdims=parse_hdims(*values["hdim"]),
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
