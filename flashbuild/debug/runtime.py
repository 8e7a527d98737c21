"""What `flashbuild test` and `bench` share: the GPU they need, the build they run (the cached one,
or a clean rebuild with --rebuild), and which of its variants this GPU runs.

torch is imported only after env.torch_info() says it has CUDA, so the no-GPU answer is fast.
"""

from __future__ import annotations

import subprocess
from dataclasses import dataclass

from ..pipeline import builder
from .. import env
from ..errors import NoGpuError, SelectionError
from ..selection.space import cubin_runs_on
from ..selection.variants import ARCH_NUMBER, Selection, Variant

NO_GPU_HINT = "`flashbuild inspect` and `flashbuild build --compile-only` work without one"


@dataclass(frozen=True)
class Gpu:
    name: str
    arch_number: int  # compute capability x 10, e.g. 90
    torch: str
    device: str = "cuda"

    @property
    def arch(self) -> str:
        return f"sm{self.arch_number}"

    def describe(self) -> str:
        return f"{self.name} ({self.arch}), torch {self.torch}"


def require_gpu(command: str) -> Gpu:
    """The CUDA device torch sees, or NoGpuError (exit 2) saying what is missing."""
    torch_info = env.torch_info()
    if torch_info is None:
        raise NoGpuError(f"flashbuild {command} runs kernels, so it needs torch with CUDA and a GPU: torch is not "
                         f"installed ({builder.TORCH_CUDA_HINT}); {NO_GPU_HINT}")
    if torch_info.cuda is None:
        raise NoGpuError(f"flashbuild {command} runs kernels, so it needs a GPU: torch {torch_info.version} has no "
                         f"CUDA (install a CUDA build: {builder.TORCH_CUDA_HINT}); {NO_GPU_HINT}")
    import torch

    if not torch.cuda.is_available():
        raise NoGpuError(f"flashbuild {command} runs kernels, so it needs a GPU: torch {torch_info.version} "
                         f"(CUDA {torch_info.cuda}) sees no CUDA device (check nvidia-smi and "
                         f"CUDA_VISIBLE_DEVICES); {NO_GPU_HINT}")
    major, minor = torch.cuda.get_device_capability()
    return Gpu(torch.cuda.get_device_name(), major * 10 + minor, torch.__version__)


def runs_on(variant_arch: str, gpu_arch_number: int) -> bool:
    """Whether the binding runs a kernel built for variant_arch on this GPU: the exact arch, or an
    older one of the same major (sm80 machine code runs on sm86 and sm89), as device_arch() in
    kernels/binding/flash_api.cpp picks it."""
    return cubin_runs_on(ARCH_NUMBER[variant_arch], gpu_arch_number)


def runnable(variants: list[Variant], gpu: Gpu) -> tuple[list[Variant], list[Variant]]:
    """(variants this GPU runs, variants it does not). When the build holds the exact arch, an
    older arch of the same major is not what the binding picks, so it counts as not run here."""
    archs = {v.arch for v in variants if runs_on(v.arch, gpu.arch_number)}
    best = max(archs, key=lambda a: ARCH_NUMBER[a], default=None)
    here = [v for v in variants if v.arch == best]
    return here, [v for v in variants if v.arch != best]


def check_selection_runs_here(selection: Selection, gpu: Gpu, command: str) -> None:
    if not any(runs_on(arch, gpu.arch_number) for arch in selection.archs):
        raise SelectionError(
            f"flashbuild {command}: this GPU is {gpu.arch} ({gpu.name}) and the selection's archs "
            f"({', '.join(selection.archs)}) do not run on it; use --arch {gpu.arch if gpu.arch in ARCH_NUMBER else 'native'}")


def load_build(selection: Selection, options: builder.BuildOptions, *, rebuild: bool = False):
    """The loaded extension of the selection: the cached build when it is up to date (load()
    rebuilds what changed), or, with rebuild=True, every output removed and built again. An
    external tree's build comes back behind its adapter (adapters.py): the checks call the tree's
    own Python API."""
    plan = builder.make_plan(selection, options)
    if rebuild and (plan.build_dir / "build.ninja").is_file():
        ninja = env.find_ninja()
        if ninja is not None:
            builder.log(f"--rebuild: removing the outputs of {plan.key} and building it again")
            subprocess.run([str(ninja), "-C", str(plan.build_dir), "-t", "clean"], capture_output=True, check=False)
    module = builder.load(selection, options)
    builder.log(f"using build {plan.key} ({plan.build_dir})")
    if selection.builtin:
        return module
    return open_tree_build(plan)


def open_tree_build(plan):
    """An external tree's linked build, imported through its Python package, behind its adapter."""
    import json

    from ..pipeline import loader
    from ..sources import profile as profiles
    from . import adapters

    tree = plan.profile
    root = profiles.Path(plan.selection.source)
    package = loader.load_package(plan.build_dir, [root / p for p in tree.python_path], tree.python_package,
                                  plan.module_name)
    return adapters.wrap(tree.adapter, package, json.loads(plan.manifest_path.read_text()))
