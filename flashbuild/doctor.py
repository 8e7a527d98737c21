"""`flashbuild doctor`: each tool a build needs, found where, which version, and the fix when missing.

A tool is OK only when it runs: each found compiler is asked for its version, and one that cannot
be started, exits non-zero or does not answer is BROKEN. A CUDA_HOME without a runnable bin/nvcc
is WRONG (builds would silently use another nvcc), naming the nvcc used instead and why. A CUDA
torch and an nvcc of different CUDA major versions are WRONG (the extension cannot link or load).
"""

from __future__ import annotations

import os
import subprocess
from dataclasses import dataclass
from pathlib import Path

from . import env


@dataclass(frozen=True)
class Check:
    name: str
    ok: bool
    detail: str
    fix: str = ""
    required: bool = True  # needed to compile kernels; the others are needed to link or for --arch native
    state: str = "MISSING"  # what a failed check shows: MISSING, BROKEN (found, does not run), WRONG

    @property
    def label(self) -> str:
        return "OK" if self.ok else self.state


def probe(tool: Path, flag: str = "--version") -> tuple[bool, str]:
    """(True, its first line) when `tool flag` runs and exits 0, else (False, what went wrong)."""
    try:
        out = subprocess.run([str(tool), flag], capture_output=True, text=True, errors="replace", check=False,
                             timeout=env.TOOL_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        return False, f"`{tool.name} {flag}` did not answer in {env.TOOL_TIMEOUT_S} s"
    except OSError as exc:
        return False, f"cannot be run ({exc.strerror or exc})"
    lines = [line.strip() for line in (out.stdout + out.stderr).splitlines() if line.strip()]
    if out.returncode != 0:
        said = f": {lines[0][:120]}" if lines else " and printed nothing"
        return False, f"`{tool.name} {flag}` exited {out.returncode}{said}"
    return True, lines[0] if lines else "no version printed"


def _cuda_home() -> tuple[str, str, str | None]:
    """(variable, value, problem) of CUDA_HOME (else CUDA_PATH); value '' when neither is set."""
    var = "CUDA_HOME" if os.environ.get("CUDA_HOME") else "CUDA_PATH"
    value = os.environ.get(var, "")
    return var, value, env.cuda_home_problem(value, var) if value else None


NVCC_FIX = ("install the CUDA toolkit or `pip install nvidia-cuda-nvcc`, or set CUDA_HOME to a toolkit "
            "(the directory holding bin/nvcc)")


def _nvcc() -> list[Check]:
    var, value, problem = _cuda_home()
    found = env.find_nvcc()
    checks = []
    if problem:
        instead = f"builds use {found.path} (from {found.source}) instead" if found else "and no other nvcc was found"
        checks.append(Check(var, False, f"{problem}: {instead}", f"point {var} at a CUDA toolkit (the directory "
                            f"holding bin/nvcc), or unset it to use {found.path if found else 'the nvcc on PATH'}",
                            state="WRONG"))
    if found is None:
        return checks + [Check("nvcc", False, f"not in ${var}/bin, on PATH, in /usr/local/cuda/bin, or from the "
                               "nvidia-cuda-nvcc wheel", NVCC_FIX)]
    runs, said = probe(found.path)
    if not runs:
        return checks + [Check("nvcc", False, f"{found.path} (from {found.source}: {found.reason}) does not run: {said}",
                               f"reinstall it or {NVCC_FIX}", state="BROKEN")]
    version = env.nvcc_version(found.path)
    shown = f"CUDA {version}" if version != "unknown" else f"version unknown: it printed {said!r}"
    return checks + [Check("nvcc", True, f"{found.path} ({shown}), from {found.source}: {found.reason}")]


def _cutlass() -> Check:
    include = env.cutlass_include_dir()
    if include is None:
        return Check("CUTLASS", False, "no cutlass_library package with source/include", "`pip install nvidia-cutlass`")
    return Check("CUTLASS", True, f"{include} (CUTLASS {env.cutlass_version(include)})")


def _kernels() -> Check:
    problem = env.root_problem()
    if problem:
        return Check("kernels", False, problem, "run from a flashbuild checkout (`pip install -e .`) or set "
                     "FLASHBUILD_ROOT to one")
    kernels = env.kernels_dir()
    if not (kernels / "common" / "params.h").is_file():
        return Check("kernels", False, f"{kernels}/common/params.h is missing",
                     "run from a flashbuild checkout (`pip install -e .`) or set FLASHBUILD_ROOT to one")
    return Check("kernels", True, str(kernels))


def _tool(name: str, path: Path | None, missing: str, fix: str, required: bool = True) -> Check:
    """A found tool that must run: OK with its version line, BROKEN when it does not run."""
    if path is None:
        return Check(name, False, missing, fix, required=required)
    runs, said = probe(path)
    if not runs:
        return Check(name, False, f"{path} does not run: {said}", f"reinstall it, or {fix}", required=required,
                     state="BROKEN")
    return Check(name, True, f"{path} ({said})")


def _ninja() -> Check:
    return _tool("ninja", env.find_ninja(), "neither the ninja package nor ninja on PATH", "`pip install ninja`")


def _torch() -> Check:
    torch = env.torch_info()
    if torch is None:
        return Check("torch", False, "not installed", "`pip install torch` (a CUDA build, to link the extension)",
                     required=False)
    if torch.cuda is None:
        return Check("torch", False, f"{torch.version} at {torch.root}: no CUDA, so kernels compile but the "
                     "extension cannot link", "install a CUDA build of torch (e.g. `pip install torch --index-url "
                     "https://download.pytorch.org/whl/cu130`); --compile-only works without it", required=False)
    return Check("torch", True, f"{torch.version} (CUDA {torch.cuda}) at {torch.root}")


def _cuda_match() -> list[Check]:
    """torch's CUDA and nvcc's, compared by major version: the binding compiles against torch's CUDA
    headers and the extension loads torch's CUDA runtime, so kernels from an nvcc of another major
    link or run against the wrong one. No line when either is missing (their own checks say so)."""
    torch, found = env.torch_info(), env.find_nvcc()
    if torch is None or torch.cuda is None or found is None:
        return []
    nvcc = env.nvcc_version(found.path)
    if nvcc == "unknown":
        return []
    torch_major, nvcc_major = str(torch.cuda).split(".")[0], nvcc.split(".")[0]
    if torch_major == nvcc_major:
        return [Check("CUDA", True, f"torch {torch.version} (CUDA {torch.cuda}) and nvcc (CUDA {nvcc}): the same "
                      f"major version")]
    minor = nvcc.split(".")[1] if "." in nvcc else "0"
    return [Check("CUDA", False, f"torch {torch.version} is built for CUDA {torch.cuda}, nvcc {found.path} is CUDA "
                  f"{nvcc}: a major-version mismatch, so the extension cannot link or load against this torch "
                  f"(kernels still compile: --compile-only, inspect)",
                  f"install the torch build for CUDA {nvcc_major} (e.g. `pip install torch --index-url "
                  f"https://download.pytorch.org/whl/cu{nvcc_major}{minor}`), or point CUDA_HOME at a CUDA "
                  f"{torch_major} toolkit", required=False, state="WRONG")]


def _host_cxx() -> Check:
    found = env.find_host_cxx()
    check = _tool("host c++", found, "no $CXX, c++, g++ or clang++ on PATH", "install one (apt-get install g++)")
    cxx = os.environ.get("CXX")
    if cxx and check.ok and found is not None and found.name != Path(cxx).name:
        return Check(check.name, True, f"{check.detail}; CXX={cxx} is not on PATH, so this one is used")
    return check


def _gpu() -> Check:
    gpus = env.gpus()
    if not gpus:
        return Check("GPU", False, "none (nvidia-smi missing or reports no GPU): --arch native cannot resolve",
                     "pass --arch sm80|sm86|sm89|sm90; GPU tests skip", required=False)
    return Check("GPU", True, "; ".join(f"{name} (compute capability {cap})" for name, cap in gpus))


def _cache() -> Check:
    """The cache root must be (or be creatable as) a private directory we can write."""
    from .pipeline import cache
    from .errors import FlashbuildError

    try:
        root = cache.cache_root(create=False)
    except FlashbuildError as exc:
        return Check("cache", False, str(exc), state="WRONG")  # the message holds the fix
    if not root.exists():
        parent = root.parent
        while not parent.exists() and not parent.is_symlink():
            parent = parent.parent
        if not parent.is_dir() or not os.access(parent, os.W_OK | os.X_OK):
            why = "is not a directory" if not parent.is_dir() else "is not writable by you"
            return Check("cache", False, f"{root} cannot be created: {parent} {why}",
                         "set FLASHBUILD_CACHE_DIR to a directory of your own", state="WRONG")
        return Check("cache", True, f"{root} (created on the first build; FLASHBUILD_CACHE_DIR overrides)")
    return Check("cache", True, f"{root} (FLASHBUILD_CACHE_DIR overrides)")


def checks() -> list[Check]:
    return [*_nvcc(), _cutlass(), _kernels(), _ninja(), _host_cxx(), _torch(), *_cuda_match(), _gpu(), _cache()]
