"""The command line as a kernel developer meets it: user mistakes are refused before any work, with
a message that names what was asked, what exists and the command that fixes it (no GPU needed)."""

from __future__ import annotations

import pytest

from flashbuild.build import builder
from flashbuild.debug import runtime, watch
from helpers import run_cli

SELECTION = ["--hdim", "64", "--dtype", "fp16", "--arch", "sm90", "--direction", "fwd", "--causal", "on"]


def _no_build(*args, **kwargs):
    raise AssertionError("built before refusing the command line")


def test_run_refuses_a_missing_command_before_building(monkeypatch, cache):
    monkeypatch.setattr(builder, "build", _no_build)
    result = run_cli("run", *SELECTION, "--", "no-such-program-flashbuild")
    assert result.exit_code == 2, result.output
    assert "no-such-program-flashbuild: command not found on PATH" in result.output
    assert "Traceback" not in result.output


def test_watch_fresh_process_without_a_gpu_exits_2_instead_of_polling(monkeypatch, cache):
    monkeypatch.setattr(runtime, "require_gpu", lambda command: (_ for _ in ()).throw(
        runtime.NoGpuError(f"flashbuild {command} runs kernels, so it needs a GPU")))
    monkeypatch.setattr(watch, "watch", lambda *a, **k: pytest.fail("polled without a GPU"))
    result = run_cli("watch", *SELECTION, "--fresh-process")
    assert result.exit_code == 2, result.output
    assert "flashbuild watch runs kernels" in result.output


def test_matrix_of_a_missing_file_offers_a_matrix_not_a_preset(cache, tmp_path):
    result = run_cli("matrix", str(tmp_path / "nope.toml"))
    assert result.exit_code == 2, result.output
    assert "--config" not in result.output  # `matrix` takes CONFIG, not --config
    assert "CI matrices: ci" in result.output and "flashbuild matrix ci" in result.output
    assert "ci-compile" not in result.output  # a preset, which `matrix` refuses


def test_a_missing_matrix_for_a_cell_offers_a_matrix(cache, tmp_path):
    result = run_cli("build", "--config", str(tmp_path / "nope.toml"), "--cell", "sm90-fp16", "--dry-run")
    assert result.exit_code == 2, result.output
    assert "CI matrices: ci" in result.output and "use --config ci" in result.output
    assert "ci-compile" not in result.output
