"""What the binding and link edges take from torch. The built-in profile's plan never imports torch
(3.3 s on the GPU host, before the first compile of a cold build): torch's install tells its include
dirs, C++ standard and libraries, and a ninja edge beside the kernel TUs (torch_abi.py) writes its ABI
defines into a response file the binding's compile reads. An upstream tree whose kernels include torch
imports it for their flags; that spec is kept in the build dir and recomputed when its stamp changes."""

from __future__ import annotations

import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from flashbuild import env
from flashbuild.build import builder, graph, toolchain, torch_abi

pytestmark = pytest.mark.skipif(env.torch_info() is None or env.find_nvcc() is None,
                                reason="needs torch installed and nvcc to plan a build")


def plan_in(tmp_path):
    return builder.make_plan(*builder.parse_request(hdim=64, dtype="fp16", arch="sm90", direction="fwd",
                                                    build_dir=tmp_path / "b"))


def test_the_builtin_link_spec_imports_no_torch(tmp_path, monkeypatch):
    plan = plan_in(tmp_path)

    def no_import(*args):
        raise AssertionError("torch_link_spec imported torch for the built-in profile")

    monkeypatch.setattr(toolchain, "_import_torch_spec", no_import)
    link = toolchain.torch_link_spec(plan)
    assert link.abi_probe is not None and link.abi_probe.script == Path(torch_abi.__file__)
    assert not any("ABI" in d or "PYBIND11" in d for d in link.defines)
    assert graph.binding_flags(link, builder.toolchain(plan), plan.gen_dir)[-1] == f"@{graph.TORCH_ABI_FILE}"
    assert not (plan.build_dir / toolchain.LINK_SPEC_FILE).exists()


def test_the_static_spec_is_what_importing_torch_gives(tmp_path):
    """Include dirs, C++ standard, library dir and CUDA, read from the install, equal torch's own answers."""
    import torch
    from torch.utils import cpp_extension

    plan = plan_in(tmp_path)
    spec = toolchain.static_torch_spec(plan)
    ours = [str(d) for d in spec.include_dirs]
    theirs = [p for p in cpp_extension.include_paths() if p in ours or "cuda" not in p.lower()]
    assert ours[:len(theirs)] == theirs
    assert spec.torch_lib == Path(torch.__file__).parent / "lib"
    assert spec.cuda == (torch.version.cuda is not None)
    assert spec.defines == ()


def test_the_abi_probe_writes_what_the_import_reads_and_rewrites_only_on_change(tmp_path):
    import torch

    out = tmp_path / graph.TORCH_ABI_FILE
    subprocess.run([sys.executable, torch_abi.__file__, str(out)], check=True, cwd=tmp_path)
    assert shlex.split(out.read_text()) == torch_abi.abi_defines(torch._C)
    before = out.stat().st_mtime_ns
    subprocess.run([sys.executable, torch_abi.__file__, str(out)], check=True, cwd=tmp_path)
    assert out.stat().st_mtime_ns == before  # restat: an unchanged ABI leaves the binding alone
    out.write_text("-DSTALE=1\n")
    subprocess.run([sys.executable, torch_abi.__file__, str(out)], check=True, cwd=tmp_path)
    assert shlex.split(out.read_text()) == torch_abi.abi_defines(torch._C)


@pytest.mark.skipif(shutil.which("c++") is None and shutil.which("g++") is None, reason="no host C++ compiler")
def test_the_host_compiler_reads_the_defines_with_their_quotes(tmp_path):
    """pybind11's defines are string literals: `"_gcc"` must reach the preprocessor with its quotes."""
    rsp = tmp_path / graph.TORCH_ABI_FILE
    rsp.write_text(torch_abi.response_file(['-DPYBIND11_COMPILER_TYPE="_gcc"', "-D_GLIBCXX_USE_CXX11_ABI=1"]))
    cxx = shutil.which("c++") or shutil.which("g++")
    macros = subprocess.run([cxx, f"@{rsp.name}", "-dM", "-E", "-x", "c++", "/dev/null"], cwd=tmp_path,
                            capture_output=True, text=True, check=True).stdout
    assert '#define PYBIND11_COMPILER_TYPE "_gcc"' in macros
    assert "#define _GLIBCXX_USE_CXX11_ABI 1" in macros


def upstream_plan(tmp_path, monkeypatch):
    """A plan whose profile's kernels include torch (as FA2's and FA3's do)."""
    import dataclasses

    plan = plan_in(tmp_path)
    upstream = dataclasses.replace(plan.profile, kernels_need_torch=True)
    monkeypatch.setattr(type(plan), "profile", property(lambda self: upstream))
    return plan


def test_an_upstream_link_spec_takes_the_saved_spec_without_importing_again(tmp_path, monkeypatch):
    plan = upstream_plan(tmp_path, monkeypatch)
    first = toolchain.torch_link_spec(plan)
    assert first.abi_probe is None and any("PYBIND11" in d or "ABI" in d for d in first.defines)
    assert (plan.build_dir / toolchain.LINK_SPEC_FILE).is_file()

    def no_import(*args):
        raise AssertionError("torch_link_spec imported torch although the saved spec is valid")

    monkeypatch.setattr(toolchain, "_import_torch_spec", no_import)
    assert toolchain.torch_link_spec(plan) == first
    monkeypatch.setattr(env, "find_host_cxx", lambda: first.cxx.parent / "another-c++")
    assert toolchain.torch_link_spec(plan).cxx.name == "another-c++"  # the compiler is not torch's part


def test_a_changed_stamp_recomputes_the_spec(tmp_path, monkeypatch):
    plan = plan_in(tmp_path)
    toolchain.torch_spec(plan)
    calls = []
    real = toolchain._import_torch_spec
    monkeypatch.setattr(toolchain, "_import_torch_spec", lambda *a: calls.append(a) or real(*a))
    info = env.torch_info()
    monkeypatch.setattr(env, "torch_info", lambda: env.TorchInfo(info.version + ".post1", info.cuda, info.root))
    toolchain.torch_spec(plan)
    assert len(calls) == 1


def test_a_corrupt_saved_spec_is_recomputed(tmp_path):
    plan = plan_in(tmp_path)
    first = toolchain.torch_spec(plan)
    (plan.build_dir / toolchain.LINK_SPEC_FILE).write_text("{not json")
    assert toolchain.torch_spec(plan) == first
