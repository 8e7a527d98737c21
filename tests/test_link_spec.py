"""What the binding and link edges take from torch. The built-in profile's plan never imports torch
(3.3 s on the GPU host, before the first compile of a cold build): torch's install tells its include
dirs, C++ standard and libraries, and a ninja edge beside the kernel TUs (torch_abi.py) writes its ABI
macros into a header the binding's compile force-includes. An upstream tree whose kernels include torch
imports it for their flags; that spec is kept in the build dir and recomputed when its stamp changes."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from flashbuild import env
from flashbuild.pipeline import builder, graph, toolchain, torch_abi

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
    assert graph.binding_flags(link, builder.toolchain(plan), plan.gen_dir)[-2:] == ["-include", graph.TORCH_ABI_FILE]
    info = env.torch_info()
    assert (link.abi_probe.torch_root, link.abi_probe.torch_version) == (info.root, info.version)
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


def probe(out, *torch_args):
    info = env.torch_info()
    args = torch_args or (str(info.root), info.version)
    return subprocess.run([sys.executable, torch_abi.__file__, str(out), *args], cwd=out.parent,
                          capture_output=True, text=True)


def macros_of(cxx, header):
    return subprocess.run([cxx, "-include", str(header), "-dM", "-E", "-x", "c++", "/dev/null"],
                          capture_output=True, text=True, check=True).stdout


def test_the_abi_probe_writes_what_the_import_reads_and_rewrites_only_on_change(tmp_path):
    import torch

    out = tmp_path / graph.TORCH_ABI_FILE
    assert probe(out).returncode == 0
    assert out.read_text() == torch_abi.header(torch_abi.abi_defines(torch._C))
    before = out.stat().st_mtime_ns
    assert probe(out).returncode == 0
    assert out.stat().st_mtime_ns == before  # restat: an unchanged ABI leaves the binding alone
    out.write_text("#define STALE 1\n")
    assert probe(out).returncode == 0
    assert out.read_text() == torch_abi.header(torch_abi.abi_defines(torch._C))


def test_the_abi_probe_refuses_another_torch_than_the_plans(tmp_path):
    """The header describes the torch whose headers the binding includes, or the build stops saying why."""
    out = tmp_path / graph.TORCH_ABI_FILE
    info = env.torch_info()
    moved = probe(out, str(tmp_path), info.version)
    assert moved.returncode == 1 and "run flashbuild with one Python and one torch" in moved.stderr
    other = probe(out, str(info.root), "0.0.1")
    assert other.returncode == 1 and f"imports torch {info.version}" in other.stderr
    assert not out.exists()


@pytest.mark.skipif(shutil.which("c++") is None and shutil.which("g++") is None, reason="no host C++ compiler")
def test_the_host_compiler_reads_the_macros_with_their_quotes(tmp_path):
    """pybind11's macros are string literals: `"_gcc"` must reach the preprocessor with its quotes."""
    header = tmp_path / graph.TORCH_ABI_FILE
    header.write_text(torch_abi.header(['-DPYBIND11_COMPILER_TYPE="_gcc"', "-D_GLIBCXX_USE_CXX11_ABI=1"]))
    macros = macros_of(shutil.which("c++") or shutil.which("g++"), header)
    assert '#define PYBIND11_COMPILER_TYPE "_gcc"' in macros
    assert "#define _GLIBCXX_USE_CXX11_ABI 1" in macros


def test_python_and_python3_plan_the_same_probe(tmp_path, monkeypatch):
    """The interpreter in the probe's command is python3.X beside it when that is the same file: a build
    planned from `python` and a load() from `python3` see one build.ninja."""
    versioned = Path(sys.executable).with_name(f"python{sys.version_info.major}.{sys.version_info.minor}")
    if not versioned.exists():
        pytest.skip(f"no {versioned.name} beside {sys.executable}")
    for name in ("python", "python3", versioned.name):
        alias = Path(sys.executable).with_name(name)
        if alias.exists() and alias.samefile(versioned):
            monkeypatch.setattr(sys, "executable", str(alias))
            assert toolchain._interpreter() == versioned


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
