"""Bad input to test / bench / inspect is one clear line, never a traceback: no GPU (test and bench
exit 2; inspect works, see test_inspect.py), a selection the cache does not hold (built, or the reason
it cannot be), a GPU the selection has no kernels for, a missing compute-sanitizer. A results file of
the wrong format is in test_bench.py."""

from __future__ import annotations

from pathlib import Path

import pytest

from flashbuild import env
from flashbuild.debug import runtime
from helpers import run_cli

SLICE = ["--hdim", "64", "--dtype", "fp16", "--arch", "sm90", "--direction", "fwd"]


def one_error_line(result) -> str:
    assert "Traceback" not in result.output
    lines = result.stderr.strip().splitlines()
    assert lines and lines[-1].startswith("flashbuild: error: "), result.output
    return lines[-1]


@pytest.mark.parametrize("command", ["test", "bench"])
def test_without_cuda_torch_test_and_bench_say_so_and_exit_2(command, cache, monkeypatch):
    monkeypatch.setattr(env, "torch_info", lambda: env.TorchInfo("2.13.0+cpu", None, Path("/t")))
    result = run_cli(command, *SLICE)
    assert result.exit_code == 2
    line = one_error_line(result)
    assert f"flashbuild {command} runs kernels, so it needs a GPU: torch 2.13.0+cpu has no CUDA" in line
    assert "flashbuild inspect" in line and "--compile-only" in line
    assert not cache.exists()  # nothing was built for nothing


@pytest.mark.parametrize("command", ["test", "bench"])
def test_with_cuda_torch_but_no_device_test_and_bench_say_so_and_exit_2(command, cache, monkeypatch):
    torch = pytest.importorskip("torch")
    monkeypatch.setattr(env, "torch_info", lambda: env.TorchInfo("2.11.0+cu130", "13.0", Path("/t")))
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    result = run_cli(command, *SLICE)
    assert result.exit_code == 2
    assert "sees no CUDA device (check nvidia-smi and CUDA_VISIBLE_DEVICES)" in one_error_line(result)


def test_without_torch_at_all(cache, monkeypatch):
    monkeypatch.setattr(env, "torch_info", lambda: None)
    result = run_cli("test", *SLICE)
    assert result.exit_code == 2 and "torch is not installed" in one_error_line(result)


@pytest.fixture
def fake_h200(monkeypatch):
    monkeypatch.setattr(runtime, "require_gpu", lambda command: runtime.Gpu("NVIDIA H200", 90, "2.13.0", "cpu"))


def test_a_selection_not_in_the_cache_is_built_or_the_reason_it_cannot_be_is_given(cache, fake_root, fake_h200,
                                                                                    monkeypatch):
    """On a GPU host the slice is built, then tested; here (torch without CUDA) it cannot be linked,
    and the message says why and what would work."""
    monkeypatch.setattr(env, "torch_info", lambda: env.TorchInfo("2.13.0+cpu", None, Path("/t")))
    result = run_cli("test", *SLICE)
    assert result.exit_code == 1
    line = one_error_line(result)
    assert "cannot build a loadable extension: torch 2.13.0+cpu has no CUDA" in line
    assert "--compile-only" in line


def test_a_selection_with_no_kernel_for_this_gpu_is_a_usage_error(cache, fake_h200):
    result = run_cli("test", "--hdim", "64", "--dtype", "fp16", "--arch", "sm80,sm86")
    # the binding runs a kernel built for the same major arch only: no sm8x kernel on an sm90 GPU
    assert result.exit_code == 2
    line = one_error_line(result)
    assert "this GPU is sm90 (NVIDIA H200)" in line and "use --arch sm90" in line
    assert not cache.exists()


def test_sanitize_without_compute_sanitizer_names_the_fix_before_building(cache, fake_h200, monkeypatch):
    monkeypatch.setattr(env, "find_cuda_tool", lambda name: None)
    result = run_cli("test", *SLICE, "--sanitize")
    assert result.exit_code == 1
    line = one_error_line(result)
    assert "--sanitize needs compute-sanitizer" in line and "nvidia-cuda-sanitizer-api" in line
    assert not cache.exists()


def test_bad_shapes_choice_is_a_usage_error(cache):
    result = run_cli("test", *SLICE, "--shapes", "huge")
    assert result.exit_code == 2 and "'huge' is not one of 'quick', 'full'" in one_error_line(result)
