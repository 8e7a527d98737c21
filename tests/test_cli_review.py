"""The command line as a kernel developer meets it: user mistakes are refused before any work, with
a message that names what was asked, what exists and the command that fixes it (no GPU needed)."""

from __future__ import annotations

import pytest

from flashbuild.pipeline import builder
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


def test_a_bad_features_flag_is_answered_in_flags(cache):
    result = run_cli("build", *SELECTION, "--features", "bogus", "--dry-run")
    assert result.exit_code == 2, result.output
    assert "--features bogus: not a feature" in result.output
    assert "use --features local,softcap" in result.output and "--features none" in result.output
    assert "features=[" not in result.output  # the Python API's spelling, not a flag


def test_none_with_other_features_says_so(cache):
    result = run_cli("build", *SELECTION, "--features", "none,local", "--dry-run")
    assert result.exit_code == 2, result.output
    assert "none (no feature) cannot be combined with local" in result.output
    assert "not a feature (valid: local, softcap, or none)" not in result.output  # none is valid


def test_features_and_no_flag_that_removes_it_contradict(cache):
    result = run_cli("build", *SELECTION, "--features", "local", "--no-local", "--dry-run")
    assert result.exit_code == 2, result.output
    assert "--features local and --no-local contradict" in result.output


def test_no_flag_still_narrows_a_preset_and_the_default(cache):
    result = run_cli("build", *SELECTION, "--no-local", "--dry-run")
    assert result.exit_code == 0 and "features softcap" in result.output
    result = run_cli("build", *SELECTION, "--features", "local,softcap", "--no-softcap", "--dry-run")
    assert result.exit_code == 2 and "--features local,softcap and --no-softcap contradict" in result.output


def test_load_features_error_stays_in_python_words(cache):
    from flashbuild.errors import SelectionError

    with pytest.raises(SelectionError, match=r'pass features=\["local", "softcap"\]'):
        builder.parse_request(hdim=64, dtype="fp16", arch="sm90", features=["bogus"], keywords=True)
    with pytest.raises(SelectionError, match="none .no feature. cannot be combined with local"):
        builder.parse_request(hdim=64, dtype="fp16", arch="sm90", features="none,local", keywords=True)


@pytest.mark.parametrize("args", [["-h"], ["build", "-h"], ["matrix", "-h"], ["--hdim", "64", "-h"]])
def test_dash_h_is_help(args):
    result = run_cli(*args)
    assert result.exit_code == 0, result.output
    assert "Usage: flashbuild" in result.output


def test_clean_keys_and_all_contradict(cache):
    result = run_cli("clean", "--all", "some-key")
    assert result.exit_code == 2, result.output
    assert "--all and some-key contradict" in result.output
