"""`flashbuild inspect`: what each compiled kernel costs, read from the build's objects without a GPU.

From `cuobjdump -res-usage` (registers, stack frame, static shared memory, local memory),
`cuobjdump -elf` (the launch bound: max threads per block) and `cuobjdump -sass` (the instruction
mix: HGMMA, HMMA, FFMA, LDSM, LDL, STL; LDL/STL are local-memory traffic: register spills, or
arrays the compiler put on the stack). cuobjdump -sass runs nvdisasm, so both must be found.

The shared memory a launch adds dynamically (the kernels' Traits::kSmemBytes) is not recorded in
the object, so shared memory here is the static part only, and the occupancy estimate is the
bound set by registers, threads and static shared memory.

The parsers are pure functions of cuobjdump's text, tested on samples and on a real object.
"""

from __future__ import annotations

import json
import math
import os
import re
import subprocess
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path

from .. import env
from ..errors import BuildError

MIX = ("HGMMA", "HMMA", "FFMA", "LDSM", "LDL", "STL")


@dataclass(frozen=True)
class SmLimits:
    registers: int = 65536      # per SM
    max_warps: int = 64         # per SM
    max_blocks: int = 32        # per SM
    shared_bytes: int = 167936  # per SM, usable by blocks
    max_regs_per_thread: int = 255


ARCH_LIMITS = {
    "sm_80": SmLimits(max_warps=64, max_blocks=32, shared_bytes=164 * 1024),
    "sm_86": SmLimits(max_warps=48, max_blocks=16, shared_bytes=100 * 1024),
    "sm_89": SmLimits(max_warps=48, max_blocks=24, shared_bytes=100 * 1024),
    "sm_90": SmLimits(max_warps=64, max_blocks=32, shared_bytes=228 * 1024),
    "sm_90a": SmLimits(max_warps=64, max_blocks=32, shared_bytes=228 * 1024),
}
REGISTER_UNIT = 256      # registers are allocated per warp in units of 256
RESERVED_SMEM = 1024     # per block, reserved by the system on sm80 and newer


# ---------------------------------------------------------------- parsing cuobjdump's text

RES_FUNCTION = re.compile(r"^\s*Function (\S+):\s*$")
RES_VALUES = re.compile(r"([A-Z_]+(?:\[\d+\])?):(\d+)")
SASS_FUNCTION = re.compile(r"^\s*Function : (\S+)\s*$")
SASS_INSTRUCTION = re.compile(r"^\s*/\*[0-9a-f]{4,}\*/\s+(?:@!?U?P[T\d]+\s+)?([A-Z][A-Z0-9_]*)((?:\.[A-Z0-9_]+)*)(.*?);")
ARCH_LINE = re.compile(r"^\s*arch = (sm_\w+)")


def parse_res_usage(text: str) -> dict[str, dict[str, int]]:
    """kernel -> {'REG': 168, 'STACK': 0, 'SHARED': 1024, 'LOCAL': 0, ..., plus 'arch' as text}."""
    kernels: dict[str, dict] = {}
    arch = None
    current = None
    for line in text.splitlines():
        if match := ARCH_LINE.match(line):
            arch = match.group(1)
        elif match := RES_FUNCTION.match(line):
            current = match.group(1)
            kernels[current] = {"arch": arch}
        elif current is not None and "REG:" in line:
            kernels[current].update({k: int(v) for k, v in RES_VALUES.findall(line)})
            current = None
    return kernels


def parse_sass(text: str) -> dict[str, list[str]]:
    """kernel -> its instructions as 'OPCODE.MODIFIERS' (predicates dropped)."""
    kernels: dict[str, list[str]] = {}
    current = None
    for line in text.splitlines():
        if match := SASS_FUNCTION.match(line):
            current = match.group(1)
            kernels[current] = []
        elif current is not None and (match := SASS_INSTRUCTION.match(line)):
            kernels[current].append(match.group(1) + match.group(2))
    return kernels


def parse_max_threads(text: str) -> dict[str, int]:
    """kernel -> the launch bound (EIATTR_MAX_THREADS: x*y*z) from `cuobjdump -elf`'s .nv.info.<kernel>."""
    bounds: dict[str, int] = {}
    current = None
    lines = text.splitlines()
    for i, line in enumerate(lines):
        if line.startswith(".nv.info."):
            current = line[len(".nv.info."):].strip()
        elif line.startswith(".") and not line.startswith(".nv.info."):
            current = None
        elif current and "EIATTR_MAX_THREADS" in line:
            for follow in lines[i + 1:i + 4]:
                if "Value:" in follow:
                    dims = [int(x, 16) for x in re.findall(r"0x[0-9a-f]+", follow)]
                    if dims:
                        bounds[current] = math.prod(dims)
                    break
    return bounds


def opcode(instruction: str) -> str:
    return instruction.split(".", 1)[0]


def instruction_mix(instructions: list[str]) -> dict[str, int]:
    counts = Counter(opcode(i) for i in instructions)
    return {name: counts.get(name, 0) for name in MIX} | {"total": len(instructions)}


def local_bytes(instructions: list[str], op: str) -> int:
    """Bytes moved by the LDL or STL instructions, counted once each (as ptxas counts spill bytes):
    the width suffix (.64, .128, .U8, ...) gives the size; no suffix is 32 bits."""
    widths = {"U8": 1, "S8": 1, "U16": 2, "S16": 2, "64": 8, "128": 16}
    total = 0
    for instruction in instructions:
        parts = instruction.split(".")
        if parts[0] == op:
            total += next((widths[p] for p in parts[1:] if p in widths), 4)
    return total


# ---------------------------------------------------------------- occupancy

@dataclass
class Occupancy:
    warps_per_sm: int
    max_warps: int
    limited_by: str
    blocks_per_sm: int | None  # None when the block size is unknown (no launch bound)

    @property
    def percent(self) -> float:
        return 100.0 * self.warps_per_sm / self.max_warps


def occupancy(arch: str, registers: int, threads: int | None, static_smem: int) -> Occupancy:
    """Resident warps per SM as registers, the block size and static shared memory allow."""
    limits = ARCH_LIMITS.get(arch, ARCH_LIMITS["sm_80"])
    warp_regs = max(1, math.ceil(max(registers, 1) * 32 / REGISTER_UNIT)) * REGISTER_UNIT
    warps_by_regs = limits.registers // warp_regs
    if not threads:
        warps = min(warps_by_regs, limits.max_warps)
        return Occupancy(warps, limits.max_warps, "registers" if warps_by_regs < limits.max_warps else "warps", None)
    warps_per_block = math.ceil(threads / 32)
    bounds = {
        "registers": warps_by_regs // warps_per_block,
        "warps": limits.max_warps // warps_per_block,
        "blocks": limits.max_blocks,
        "static shared memory": limits.shared_bytes // (static_smem + RESERVED_SMEM),
    }
    limited_by = min(bounds, key=bounds.get)
    blocks = bounds[limited_by]
    return Occupancy(blocks * warps_per_block, limits.max_warps, limited_by, blocks)


# ---------------------------------------------------------------- one kernel's report

@dataclass
class KernelReport:
    variant: str
    kernel: str
    arch: str
    registers: int
    stack_bytes: int
    local_bytes: int
    static_smem_bytes: int
    max_threads: int | None
    spill_store_bytes: int   # STL bytes (spills, or stack arrays)
    spill_load_bytes: int    # LDL bytes
    mix: dict[str, int]
    occupancy: Occupancy
    flags: list[str] = field(default_factory=list)

    def to_json(self) -> dict:
        data = asdict(self)
        data["occupancy"]["percent"] = round(self.occupancy.percent, 1)
        data["dynamic_smem_bytes"] = None
        data["notes"] = ["shared memory is the static part: the dynamic shared memory a launch adds is not "
                         "recorded in the object", "spill bytes count LDL/STL instructions in the SASS: spills "
                         "or arrays placed on the stack"]
        return data


def report(variant: str, kernel: str, res: dict, instructions: list[str], max_threads: int | None) -> KernelReport:
    arch = res.get("arch") or "sm_80"
    mix = instruction_mix(instructions)
    stores, loads = local_bytes(instructions, "STL"), local_bytes(instructions, "LDL")
    occ = occupancy(arch, res.get("REG", 0), max_threads, res.get("SHARED", 0))
    flags = []
    if stores or loads:
        flags.append(f"local-memory traffic: {stores} B stored, {loads} B loaded (spills or stack arrays)")
    if res.get("STACK", 0) or res.get("LOCAL", 0):
        flags.append(f"local memory: {res.get('STACK', 0)} B stack frame, {res.get('LOCAL', 0)} B local")
    if res.get("REG", 0) >= ARCH_LIMITS.get(arch, SmLimits()).max_regs_per_thread:
        flags.append("registers at the 255 cap")
    return KernelReport(variant, kernel, arch, res.get("REG", 0), res.get("STACK", 0), res.get("LOCAL", 0),
                        res.get("SHARED", 0), max_threads, stores, loads, mix, occ, flags)


# ---------------------------------------------------------------- running cuobjdump

def tools() -> tuple[Path, Path]:
    """(cuobjdump, nvdisasm), or a BuildError naming the wheel that carries the missing one."""
    found = {name: env.find_cuda_tool(name) for name in ("cuobjdump", "nvdisasm")}
    missing = [name for name, f in found.items() if f is None]
    if missing:
        wheels = " ".join(env.CUDA_TOOL_WHEELS[m] for m in missing)
        raise BuildError(f"inspect needs {' and '.join(missing)} (not next to nvcc, in $CUDA_HOME/bin, on PATH or in "
                         f"/usr/local/cuda/bin): `pip install {wheels}`, or install the CUDA toolkit's binary utilities")
    return found["cuobjdump"].path, found["nvdisasm"].path


def cuobjdump(obj: Path, *args: str, tool_paths: tuple[Path, Path] | None = None) -> str:
    cuobj, nvdisasm = tool_paths or tools()
    environ = {**os.environ, "PATH": f"{nvdisasm.parent}{os.pathsep}{os.environ.get('PATH', '')}",
               "NVDISASM_PATH": str(nvdisasm.parent)}
    out = subprocess.run([str(cuobj), *args, str(obj)], capture_output=True, text=True, errors="replace",
                         env=environ, check=False)
    if out.returncode != 0:
        first = (out.stderr or out.stdout).strip().splitlines()
        raise BuildError(f"{cuobj.name} {' '.join(args)} {obj} failed: {first[0] if first else f'exit {out.returncode}'}")
    return out.stdout


def inspect_object(variant: str, obj: Path, tool_paths: tuple[Path, Path] | None = None) -> list[KernelReport]:
    """One report per kernel (__global__ function) in the object."""
    tool_paths = tool_paths or tools()
    res = parse_res_usage(cuobjdump(obj, "-res-usage", tool_paths=tool_paths))
    sass = parse_sass(cuobjdump(obj, "-sass", tool_paths=tool_paths))
    bounds = parse_max_threads(cuobjdump(obj, "-elf", tool_paths=tool_paths))
    return [report(variant, kernel, res[kernel], sass.get(kernel, []), bounds.get(kernel))
            for kernel in res if kernel in sass]


def inspect_build(objects: dict[str, Path], jobs: int | None = None) -> list[KernelReport]:
    """Reports for {variant: object path}, in the given order, objects read in parallel."""
    tool_paths = tools()
    with ThreadPoolExecutor(max_workers=jobs or env.cpu_count()) as pool:
        per_object = pool.map(lambda item: inspect_object(item[0], item[1], tool_paths), objects.items())
        return [r for reports in per_object for r in reports]


def sass_text(obj: Path) -> str:
    return cuobjdump(obj, "-sass")


# ---------------------------------------------------------------- output

def demangle(names: list[str]) -> dict[str, str]:
    """mangled -> demangled via c++filt when it is there; the names themselves otherwise."""
    import shutil

    cxxfilt = shutil.which("c++filt")
    if not cxxfilt or not names:
        return {n: n for n in names}
    out = subprocess.run([cxxfilt], input="\n".join(names), capture_output=True, text=True, check=False)
    lines = out.stdout.splitlines()
    return dict(zip(names, lines)) if out.returncode == 0 and len(lines) == len(names) else {n: n for n in names}


LIMITER_SHORT = {"registers": "regs", "warps": "warps", "blocks": "blocks", "static shared memory": "smem"}


def short_name(demangled: str) -> str:
    """'void flashbuild::ampere::fwd_kernel<Traits<...>, true>(flashbuild::FwdParams)' -> 'fwd_kernel'."""
    head = demangled.split("<", 1)[0].split("(", 1)[0]
    return head.split("::")[-1].split()[-1] if head.strip() else demangled


def table(reports: list[KernelReport]) -> str:
    names = demangle([r.kernel for r in reports])
    short = {r.kernel: short_name(names[r.kernel])[:24] for r in reports}
    kwidth = max([len("kernel")] + list(map(len, short.values())))
    width = max([len("variant")] + [len(r.variant) for r in reports])
    head = (f"{'variant':<{width}}  {'kernel':<{kwidth}}  {'arch':<6}  {'regs':>4}  {'threads':>7}  {'smem(static)':>12}  {'stack':>5}  "
            f"{'spill st/ld B':>13}  {'occupancy':>16}  " + "  ".join(f"{m:>5}" for m in MIX))
    lines = [head]
    for r in reports:
        occ = f"{r.occupancy.percent:.0f}% {r.occupancy.warps_per_sm}w {LIMITER_SHORT[r.occupancy.limited_by]}"
        lines.append(f"{r.variant:<{width}}  {short[r.kernel]:<{kwidth}}  {r.arch:<6}  {r.registers:>4}  {r.max_threads or '-':>7}  "
                     f"{r.static_smem_bytes:>12}  {r.stack_bytes:>5}  "
                     f"{f'{r.spill_store_bytes}/{r.spill_load_bytes}':>13}  {occ:>16}  "
                     + "  ".join(f"{r.mix[m]:>5}" for m in MIX))
    lines.append("kernels:")
    lines += [f"  {r.variant}: {names[r.kernel]}" for r in reports]
    lines.append("smem is the static part and occupancy (warps per SM, and what limits them) an upper bound: "
                 "the dynamic shared memory a launch adds is not recorded in the object. spill bytes are the "
                 "LDL/STL traffic in the SASS (spills, or arrays on the stack).")
    flagged = [r for r in reports if r.flags]
    if flagged:
        lines.append("flags:")
        lines += [f"  {r.variant}: {'; '.join(r.flags)}" for r in flagged]
    else:
        lines.append("flags: none (no spills, no local memory)")
    return "\n".join(lines)


def reports_json(reports: list[KernelReport], **info) -> str:
    return json.dumps({"format": "flashbuild-inspect", "version": 1, **info,
                       "kernels": [r.to_json() for r in reports]}, indent=2) + "\n"
