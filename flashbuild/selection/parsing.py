"""Parsing one axis of a selection: a CLI flag, a load()/build() keyword or a preset's key becomes
validated axis values (canonical order), or a SelectionError that says what was asked, what exists
and the fix, phrased for where the value came from (`--hdim 80`, `hdim=80`, `FILE: hdim 80`).
"""

from __future__ import annotations

import difflib
import re
import shlex
from typing import Any, Callable, Iterable

from .. import env
from ..errors import SelectionError
from .families import family_for, implemented_directions
from .space import ARCH_NUMBER, ARCHS, CAUSAL_MODES, DIRECTIONS, DTYPES, FEATURES, HEAD_DIMS, NATIVE

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


def parse_hdims(value: Any, source: str = "--hdim", kernel_sizes: tuple[int, ...] = HEAD_DIMS) -> tuple[int, ...]:
    """`kernel_sizes`: ours, or with an external tree's own (flash-attn 2.5-2.7's 160 and 224)."""
    sizes = ", ".join(map(str, kernel_sizes))
    hdims = []
    for item in _items(value, source, kernel_sizes, kind="a head dim (an integer)"):
        if not re.fullmatch(r"[+-]?[0-9]{1,1000}", item):  # ASCII digits, fewer than int()'s limit: not '²' or '٦٤'
            raise SelectionError(f"{_said(source, _shown(item))}: not an integer head dim (kernel sizes: {sizes}); "
                                 f"{_use(source, 64)}")
        hdim = int(item)
        if hdim <= 0:
            raise SelectionError(f"{_said(source, item)}: a head dim must be a positive integer (kernel sizes: {sizes}; "
                                 f"head dims 1-{kernel_sizes[-1]} run padded on the next size up); {_use(source, 64)}")
        if hdim not in kernel_sizes:
            bigger = [h for h in kernel_sizes if h > hdim]
            if not bigger:
                raise SelectionError(f"{_said(source, hdim)}: {hdim} is not a kernel head dim (kernel sizes: {sizes}); "
                                     f"head dims 1-{kernel_sizes[-1]} are supported: {_use(source, kernel_sizes[-1])}")
            raise SelectionError(
                f"{_said(source, hdim)}: {hdim} is not a kernel head dim (kernel sizes: {sizes}); calls with "
                f"head dim {hdim} run on the hdim-{bigger[0]} kernel, padded: {_use(source, bigger[0])}")
        hdims.append(hdim)
    return tuple(h for h in kernel_sizes if h in hdims)


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
