"""`flashbuild doctor`: each tool a build needs, found where, which version, and the fix when missing."""

from __future__ import annotations

from dataclasses import dataclass

from . import env


@dataclass(frozen=True)
class Check:
    name: str
    ok: bool
    detail: str
    fix: str = ""
    required: bool = True  # needed to compile kernels; the others are needed to link or for --arch native


def _nvcc() -> Check:
    found = env.find_nvcc()
    if found is None:
        return Check("nvcc", False, "not in $CUDA_HOME/bin, on PATH, in /usr/local/cuda/bin, or from the "
                     "nvidia-cuda-nvcc wheel", "install the CUDA toolkit or `pip install nvidia-cuda-nvcc`, or set CUDA_HOME")
    return Check("nvcc", True, f"{found.path} (CUDA {env.nvcc_version(found.path)}), from {found.source}: {found.reason}")


def _cutlass() -> Check:
    include = env.cutlass_include_dir()
    if include is None:
        return Check("CUTLASS", False, "no cutlass_library package with source/include", "`pip install nvidia-cutlass`")
    return Check("CUTLASS", True, f"{include} (CUTLASS {env.cutlass_version(include)})")


def _kernels() -> Check:
    kernels = env.kernels_dir()
    if not (kernels / "flash" / "params.h").is_file():
        return Check("kernels", False, f"{kernels}/common/params.h is missing",
                     "run from a flashbuild checkout (`pip install -e .`) or set FLASHBUILD_ROOT to one")
    return Check("kernels", True, str(kernels))


def _ninja() -> Check:
    ninja = env.find_ninja()
    if ninja is None:
        return Check("ninja", False, "neither the ninja package nor ninja on PATH", "`pip install ninja`")
    return Check("ninja", True, f"{ninja} ({env.tool_version(ninja)})")


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


def _host_cxx() -> Check:
    cxx = env.find_host_cxx()
    if cxx is None:
        return Check("host c++", False, "no $CXX, c++, g++ or clang++ on PATH", "install one (apt-get install g++)")
    return Check("host c++", True, f"{cxx} ({env.tool_version(cxx)})")


def _gpu() -> Check:
    gpus = env.gpus()
    if not gpus:
        return Check("GPU", False, "none (nvidia-smi missing or reports no GPU): --arch native cannot resolve",
                     "pass --arch sm80|sm86|sm89|sm90; GPU tests skip", required=False)
    return Check("GPU", True, "; ".join(f"{name} (compute capability {cap})" for name, cap in gpus))


def _cache() -> Check:
    return Check("cache", True, f"{env.cache_dir()} (FLASHBUILD_CACHE_DIR overrides)")


def checks() -> list[Check]:
    return [_nvcc(), _cutlass(), _kernels(), _ninja(), _host_cxx(), _torch(), _gpu(), _cache()]
