"""Kernels an upstream launcher picks by the device it runs on, left out of a slice whose archs never
reach that device ([[switches.device]] in a profile; docs/switches.md).

flash-attn 2's launchers choose a tile at run time from the GPU: `if (is_sm8x)` (compute capability
8.6-8.9) in the hdim-96/128 forwards, the opt-in shared memory per block in every backward. That is an
`if`, not a switch macro, so both kernels are instantiated in every TU: the hdim-128 causal forward TU
holds the sm8x 64 x 64 kernel beside the 128 x 64 one an sm80 or sm90 device runs. A slice built for
sm90 alone (a cubin runs only on devices of its major version and at least its minor) can never take
the sm8x branch.

Each entry names one such kernel as the tree spells its launch (`call<traits, Is_dropout, Is_causal>`
inside `launcher`) and the compute capabilities whose run picks it. When no arch of the selection reaches
any of them, the build's device header (rendered from the profile's template after the launch template)
declares an explicit specialization of that launch for the TU's types: its body throws the slice's
error, and the kernel template is never instantiated. A device the data got wrong therefore raises the
named error; it never runs another kernel.

Nothing here reads a tree or writes anywhere.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterable

from ..errors import SelectionError
from ..selection.space import cubin_runs_on

_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_CAPABILITY = re.compile(r"([1-9][0-9]?)\.([0-9])")
_TRAITS = re.compile(r"[A-Za-z_][A-Za-z0-9_]*<[A-Za-z0-9_{}, ]+>")
_ARCH = re.compile(r"sm_?([1-9][0-9]?)([0-9])a?")
PARAMS = {"run_flash_fwd": "Flash_fwd_params", "run_flash_bwd": "Flash_bwd_params"}  # the launch's first argument


@dataclass(frozen=True)
class DeviceKernel:
    launcher: str                   # the tree's function that decides (run_mha_fwd_hdim128)
    call: str                       # the launch it calls (run_flash_fwd), specialised when left out
    traits: str                     # its first template argument, {hdim} and {T} for the TU's head dim and type
    hdim: int
    devices: tuple[str, ...]        # the compute capabilities ("8.6") whose run picks this kernel
    dropout: tuple[bool, ...]       # the Is_dropout values it is launched with there
    causal: tuple[bool, ...]        # the Is_causal values
    args: tuple[str, ...] = ("dropout", "causal")   # the launch's template arguments after the traits

    @property
    def params(self) -> str:
        return PARAMS[self.call]

    @property
    def direction(self) -> str:
        return "bwd" if self.call == "run_flash_bwd" else "fwd"

    def tree_spelling(self) -> str:
        """The launch as the tree writes it: `run_flash_fwd<Flash_fwd_kernel_traits<Headdim, 64, ...`."""
        return f"{self.call}<{self.traits.replace('{hdim}', 'Headdim').replace('{T}', 'T')}"


def header(direction: str) -> str:
    """The generated header a TU of `direction` includes for its specializations (the profile renders it)."""
    return f"flashbuild_devices_{direction}.h"


def _error(path: Path, key: str, expected: str, found: Any) -> SelectionError:
    return SelectionError(f"profile {path}: key switches.{key}: expected {expected}, found {found!r}; fix the "
                          f"profile (docs/switches.md describes the format)")


def parse(path: Path, raw: Any, hdims: Iterable[int]) -> tuple[DeviceKernel, ...]:
    """The [[switches.device]] entries of profile `path`, checked."""
    if raw is None:
        return ()
    if not isinstance(raw, list):
        raise _error(path, "device", "a list of tables ([[switches.device]])", raw)
    out = []
    for i, item in enumerate(raw):
        key = f"device[{i}]"
        if not isinstance(item, dict):
            raise _error(path, key, "a table", item)
        extra = sorted(set(item) - {"launcher", "call", "traits", "hdim", "devices", "dropout", "causal", "args"})
        if extra:
            raise _error(path, f"{key}.{extra[0]}", "one of launcher, call, traits, hdim, devices, dropout, causal, args",
                         item[extra[0]])
        args = item.get("args", ["dropout", "causal"])
        if args not in (["dropout", "causal"], ["dropout"]):
            raise _error(path, f"{key}.args", '["dropout", "causal"] (the default) or ["dropout"] (a launch whose '
                         'kernel decides causal inside: flash-attn 2.5\'s backward)', args)
        launcher, call, traits, hdim = item.get("launcher"), item.get("call"), item.get("traits"), item.get("hdim")
        if not (isinstance(launcher, str) and _NAME.fullmatch(launcher)):
            raise _error(path, f"{key}.launcher", "the tree's launcher function name", launcher)
        if call not in PARAMS:
            raise _error(path, f"{key}.call", f"one of {', '.join(PARAMS)}", call)
        if not (isinstance(traits, str) and _TRAITS.fullmatch(traits) and "{hdim}" in traits and "{T}" in traits
                and not set(re.sub(r"\{hdim\}|\{T\}", "", traits)) & set("{}")):
            raise _error(path, f"{key}.traits", "the kernel traits as the tree spells them, with {hdim} and {T}", traits)
        if hdim not in tuple(hdims) or isinstance(hdim, bool):
            raise _error(path, f"{key}.hdim", f"a head dim of the profile ({', '.join(map(str, hdims))})", hdim)
        devices = item.get("devices")
        if not (isinstance(devices, list) and devices and all(isinstance(d, str) and _CAPABILITY.fullmatch(d)
                                                              for d in devices)):
            raise _error(path, f"{key}.devices", 'a list of compute capabilities like "8.6"', devices)
        flags = {}
        for name in ("dropout", "causal"):
            value = item.get(name, [False, True])
            if not (isinstance(value, list) and value and all(isinstance(v, bool) for v in value)):
                raise _error(path, f"{key}.{name}", "a list of true/false (default both)", value)
            flags[name] = tuple(dict.fromkeys(value))
        out.append(DeviceKernel(launcher, call, traits, hdim, tuple(dict.fromkeys(devices)), **flags, args=tuple(args)))
    keys = [(d.call, d.traits, d.hdim, d.dropout, d.causal) for d in out]
    if len(set(keys)) != len(keys):
        raise _error(path, "device", "each kernel (call, traits, hdim, dropout, causal) once", keys)
    return tuple(out)


def reaches(arch: str, device: str) -> bool:
    """Whether a cubin for `arch` (sm86) runs on a device of compute capability `device` (8.9): same major,
    minor at least the arch's (the gencodes of these profiles embed cubins only, no PTX)."""
    a, d = _ARCH.fullmatch(arch), _CAPABILITY.fullmatch(device)
    if a is None or d is None:
        return True  # not a shape we know: never narrow on it
    return cubin_runs_on(int(a.group(1) + a.group(2)), int(d.group(1) + d.group(2)))


def left_out(kernels: Iterable[DeviceKernel], archs: Iterable[str]) -> list[DeviceKernel]:
    """The kernels no arch of the selection can reach a device of."""
    archs = tuple(archs)
    return [k for k in kernels if not any(reaches(a, d) for a in archs for d in k.devices)]


def arch_for(kernel: DeviceKernel, profile_archs: Iterable[str]) -> str | None:
    """The profile's arch to add for the kernel's devices (for the error's command): one built for a device
    of the kernel exactly, else one whose cubin runs there."""
    archs = [a for a in profile_archs if _ARCH.fullmatch(a)]
    exact = [a for a in archs for d in kernel.devices if reaches(a, d) and _ARCH.fullmatch(a).group(2) == d[-1]]
    return (exact or [a for a in archs for d in kernel.devices if reaches(a, d)] or [None])[0]


def context(kernels: Iterable[DeviceKernel], selection, profile, command: Callable[..., str]) -> dict:
    """What the device header renders: per left-out kernel, the specializations of its launch for each head
    dim, dtype, dropout and causal value the selection builds, and the message its body throws."""
    types = {"fp16": "cutlass::half_t", "bf16": "cutlass::bfloat16_t"}
    archs = tuple(selection.archs)
    out = []
    for k in left_out(kernels, archs):
        if k.hdim not in selection.hdims:
            continue
        arch = arch_for(k, profile.archs)
        fix = command(arch=",".join(dict.fromkeys((*archs, arch)))) if arch else "a build of the tree for that device"
        message = (f"this GPU (compute capability {_capabilities(k.devices)}) runs {profile.name}'s "
                   f"{k.tree_spelling().replace('Headdim', str(k.hdim))}> kernel from {k.launcher}, which this "
                   f"flashbuild slice of {profile.name} compiles out (it is built for {', '.join(archs)}); rebuild with: {fix}")
        for dtype in selection.dtypes:
            traits = k.traits.replace("{hdim}", str(k.hdim)).replace("{T}", types[dtype])
            # every listed value, whatever the TU's: a specialization no launch names is never emitted (inline)
            for dropout in k.dropout:
                for causal in (k.causal if "causal" in k.args else (None,)):
                    out.append(dict(call=k.call, params=k.params, traits=traits, dropout=dropout, causal=causal,
                                    message=message, launcher=k.launcher, direction=k.direction))
    return dict(device_kernels=out)


def _capabilities(devices: tuple[str, ...]) -> str:
    return devices[0] if len(devices) == 1 else f"{', '.join(devices[:-1])} or {devices[-1]}"
