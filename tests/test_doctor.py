"""`flashbuild doctor` trusts nothing it has not run: a compiler that does not run is BROKEN, a
CUDA_HOME without a runnable bin/nvcc is WRONG (naming the nvcc used instead), a cache that cannot
hold builds is WRONG; each fails the command (exit 1) with one error line naming it."""

from __future__ import annotations

import re

import pytest

from flashbuild import env
from helpers import make_fake_cuda, run_cli


def script(path, body: str, mode: int = 0o755):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("#!/bin/sh\n" + body + "\n")
    path.chmod(mode)
    return path


def line(output: str, name: str) -> str:
    match = re.search(rf"^(\S+)\s+{re.escape(name)}\s+(.*)$", output, re.M)
    assert match, output
    return f"{match.group(1)} {match.group(2)}"


def test_the_checkout_passes_the_kernels_check(cache):
    assert line(run_cli("doctor").stdout, "kernels").startswith(f"OK {env.kernels_dir()}")


def test_an_nvcc_that_exits_non_zero_is_broken_not_ok(tmp_path, monkeypatch, cache):
    script(tmp_path / "cuda" / "bin" / "nvcc", "echo 'cannot load libnvvm.so' >&2; exit 127")
    monkeypatch.setenv("CUDA_HOME", str(tmp_path / "cuda"))
    result = run_cli("doctor")
    assert result.exit_code == 1
    assert line(result.stdout, "nvcc").startswith(f"BROKEN {tmp_path / 'cuda' / 'bin' / 'nvcc'} (from CUDA_HOME")
    assert "exited 127: cannot load libnvvm.so" in result.stdout
    (error,) = result.stderr.strip().splitlines()
    assert error.startswith("flashbuild: error: cannot build: nvcc broken (nvcc: ")
    assert env.nvcc_version(tmp_path / "cuda" / "bin" / "nvcc") == "unknown"


@pytest.mark.parametrize("make, problem", [
    (lambda home: None, "has no bin/nvcc (the directory does not exist)"),
    (lambda home: home.mkdir(), "has no bin/nvcc"),
    (lambda home: (home / "bin").mkdir(parents=True) or (home / "bin" / "nvcc").symlink_to(home / "gone"),
     "has no bin/nvcc (it is a broken link)"),
    (lambda home: (home / "bin" / "nvcc").mkdir(parents=True), "has no runnable bin/nvcc (it is not a file)"),
    (lambda home: script(home / "bin" / "nvcc", "exit 0", mode=0o644), "has no runnable bin/nvcc (it is not executable)"),
])
def test_a_cuda_home_without_a_runnable_nvcc_is_wrong_and_names_the_nvcc_used(tmp_path, monkeypatch, cache, make,
                                                                              problem):
    home = tmp_path / "cuda"
    make(home)
    fallback = make_fake_cuda(tmp_path / "other") / "bin"
    monkeypatch.setenv("CUDA_HOME", str(home))
    monkeypatch.setenv("PATH", f"{fallback}:/usr/bin:/bin")
    result = run_cli("doctor")
    assert result.exit_code == 1
    assert line(result.stdout, "CUDA_HOME") == (
        f"WRONG CUDA_HOME={home} {problem}: builds use {fallback / 'nvcc'} (from PATH) instead -> fix: point CUDA_HOME "
        f"at a CUDA toolkit (the directory holding bin/nvcc), or unset it to use {fallback / 'nvcc'}")
    assert line(result.stdout, "nvcc").startswith(f"OK {fallback / 'nvcc'} (CUDA 13.0.88), from PATH: CUDA_HOME={home}")
    assert "cannot build: CUDA_HOME wrong" in result.stderr


def test_a_host_compiler_that_does_not_run_is_broken(monkeypatch, cache):
    monkeypatch.setenv("CXX", "/bin/false")
    result = run_cli("doctor")
    assert result.exit_code == 1 and line(result.stdout, "host c++").startswith("BROKEN /bin/false does not run")


def test_a_cache_dir_that_is_a_file_is_wrong(tmp_path, monkeypatch):
    (tmp_path / "f").write_text("x")
    monkeypatch.setenv("FLASHBUILD_CACHE_DIR", str(tmp_path / "f"))
    result = run_cli("doctor")
    assert result.exit_code == 1
    assert line(result.stdout, "cache").startswith(f"WRONG FLASHBUILD_CACHE_DIR {tmp_path / 'f'}: not a directory")
    monkeypatch.setenv("FLASHBUILD_CACHE_DIR", str(tmp_path / "f" / "cache"))
    assert line(run_cli("doctor").stdout, "cache").startswith("WRONG")


def test_a_tool_that_fails_has_no_version():
    assert env.tool_version("/bin/false") == "unknown"
    assert env.tool_version("/no/such/tool") == "unknown"
