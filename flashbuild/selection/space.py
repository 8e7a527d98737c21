"""The variant space of our own kernels, written once: its axes, its feature names and bits, and the
rule that names a variant.

Everything else that spells the space comes from here: the Python side (selection/variants.py and
the parsers), the built-in profile's axes and TU names (configs/profiles/flashbuild.toml leaves them
out; sources/profile.py fills them in from here), the cache key's readable part and CI cell names
(`key_label`, `label`), and the C++ tables: kernels/common/variant_space.h (head dims, the Feature
bits, the feature names and the name rule as a C++ function; rendered from
templates/variant_space.h.j2 and checked in, because torch-free kernel headers include it outside
any build) and each build's flashbuild_table.h. As in CUTLASS's generator, one procedural name is
the TU's file name, the kernel's key in the compiled-in table, the filter key and the text in errors;
tests/test_variant_space.py fails when any two disagree.
"""

from __future__ import annotations

import re
import string
from typing import Iterable

# ---------------------------------------------------------------- axes

HEAD_DIMS = (32, 64, 96, 128, 192, 256)   # the kernel sizes; a head dim between two runs on the next up, padded
DTYPES = ("fp16", "bf16")
# The C++ enumerator of each dtype (kernels/common/params.h: DType), for the instantiation TUs.
DTYPE_ENUMS = {"fp16": "flashbuild::DType::kFp16", "bf16": "flashbuild::DType::kBf16"}
ARCH_PREFIX = "sm"                          # an arch's name is the prefix and its compute capability times ten
ARCH_NUMBERS = (80, 86, 89, 90)
ARCHS = tuple(f"{ARCH_PREFIX}{n}" for n in ARCH_NUMBERS)
ARCH_NUMBER = dict(zip(ARCHS, ARCH_NUMBERS))
NATIVE = "native"                           # --arch native: the arch of each GPU present


def cubin_runs_on(built: int, device: int) -> bool:
    """Whether machine code for compute capability `built` x 10 (86) runs on a device of `device` x 10 (89):
    the same major version, a minor no newer than the device's (a cubin only: no PTX to JIT)."""
    return built // 10 == device // 10 and built <= device

DIRECTIONS = ("fwd", "bwd", "splitkv")
CAUSAL_MODES = {"off": (False,), "on": (True,), "both": (False, True)}

# Features a build can compile out, in canonical order. Feature i is bit 1 << i of a variant's
# features_mask (the kernels' kFeatures template argument); a feature kernel switches each compiled
# feature on at runtime only when a call asks for it.
FEATURES = ("local", "softcap")
FEATURE_BITS = {name: 1 << i for i, name in enumerate(FEATURES)}
ALL_FEATURES_MASK = sum(FEATURE_BITS.values())

# ---------------------------------------------------------------- the name rule

# One variant's name: its TU's file name, its key in the compiled-in table, the filter key, the text
# in errors. Fields: direction, hdim, dtype, arch (names as above), causal (CAUSAL_PART or "") and
# features (FEATURE_PREFIX before each compiled-in feature, canonical order, or "").
NAME_RULE = "{direction}_hdim{hdim}_{dtype}{causal}_{arch}{features}"
CAUSAL_PART = "_causal"
FEATURE_PREFIX = "_"
NAME_FIELDS = ("direction", "hdim", "dtype", "causal", "arch", "features")


def causal_part(causal: bool) -> str:
    return CAUSAL_PART if causal else ""


def feature_suffix(features: Iterable[str]) -> str:
    """'_local_softcap', '_local', '_softcap' or '': what a feature variant's name ends in."""
    return "".join(FEATURE_PREFIX + f for f in features)


def features_mask(features: Iterable[str]) -> int:
    """The OR of the features' bits: 0 none, 1 local, 2 softcap, 3 both."""
    mask = 0
    for feature in features:
        mask |= FEATURE_BITS[feature]
    return mask


def variant_name(direction: str, hdim: int, dtype: str, causal: bool, arch: str,
                 features: Iterable[str] = ()) -> str:
    return NAME_RULE.format(direction=direction, hdim=hdim, dtype=dtype, causal=causal_part(causal), arch=arch,
                            features=feature_suffix(features))


def name_rule_parts() -> list[tuple[str, str | None]]:
    """NAME_RULE as (literal text, field or None) pairs, in order: what the C++ name function is
    rendered from (templates/variant_space.h.j2) and the name pattern is compiled from."""
    return [(literal, field) for literal, field, _, _ in string.Formatter().parse(NAME_RULE)]


def _alternatives(values: Iterable[str]) -> str:
    return "|".join(re.escape(v) for v in values)


_FIELD_PATTERNS = {
    "direction": f"(?P<direction>{_alternatives(DIRECTIONS)})",
    "hdim": r"(?P<hdim>[0-9]+)",
    "dtype": f"(?P<dtype>{_alternatives(DTYPES)})",
    "causal": f"(?P<causal>{re.escape(CAUSAL_PART)})?",
    "arch": f"(?P<arch>{_alternatives(ARCHS)})",
    "features": "(?P<features>" + "".join(f"(?:{re.escape(FEATURE_PREFIX + f)})?" for f in FEATURES) + ")",
}
NAME_PATTERN = re.compile("".join(re.escape(literal) + (_FIELD_PATTERNS[field] if field else "")
                                  for literal, field in name_rule_parts()))


def parse_name(name: str) -> dict | None:
    """The fields of a variant name (direction, hdim, dtype, causal, arch, features), or None."""
    match = NAME_PATTERN.fullmatch(name)
    if match is None:
        return None
    features = tuple(f for f in FEATURES if FEATURE_PREFIX + f in match["features"])
    if feature_suffix(features) != match["features"]:
        return None
    return dict(direction=match["direction"], hdim=int(match["hdim"]), dtype=match["dtype"],
                causal=bool(match["causal"]), arch=match["arch"], features=features)


# ---------------------------------------------------------------- short labels (cache keys, CI cells)

def label(axis: str, value) -> str:
    """How a cache key or a CI cell name spells one axis value: sm90, fp16, h64, fwd,
    causal/noncausal, fLS (the features' initials) or fnone."""
    if axis == "hdim":
        return f"h{value}"
    if axis == "causal":
        return "causal" if value else "noncausal"
    if axis == "features":
        return "f" + ("".join(f[0].upper() for f in value) or "none")
    return str(value)


def key_label(archs, dtypes, hdims, directions, causal, features) -> list[str]:
    """The readable parts of a build's cache key: sm90, fp16, h64+128, fwd+bwd, c01 (the causal
    values held), fLS."""
    return ["+".join(archs), "+".join(dtypes), "h" + "+".join(map(str, hdims)), "+".join(directions),
            "c" + "".join("1" if c else "0" for c in causal), label("features", tuple(features))]
