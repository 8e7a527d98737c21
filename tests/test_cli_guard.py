"""The CLI's last line of defence (issue 48): an exception no check caught is one line saying it is a
flashbuild bug and where its full traceback was written, exit 70; never a traceback on the terminal."""

from __future__ import annotations

import re
from pathlib import Path

from click.testing import CliRunner

from flashbuild import cli as cli_module


def test_an_uncaught_exception_is_one_line_naming_the_traceback_file(monkeypatch, tmp_path):
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    monkeypatch.delenv("FLASHBUILD_TRACEBACK", raising=False)
    import tempfile
    monkeypatch.setattr(tempfile, "tempdir", None)  # TMPDIR is read again

    def boom(*args, **kwargs):
        raise RecursionError("maximum recursion depth exceeded\nsecond line")

    from flashbuild.pipeline import cache
    monkeypatch.setattr(cache, "scan", boom)
    result = CliRunner().invoke(cli_module.cli, ["list"])
    assert result.exit_code == cli_module.BUG_EXIT
    assert "Traceback" not in result.output
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "a flashbuild bug" in lines[0] and "RecursionError" in lines[0], result.stderr
    assert "second line" not in lines[0]
    written = Path(re.search(r"traceback is in (\S+):", lines[0]).group(1))
    assert written.parent == tmp_path and written.stat().st_mode & 0o077 == 0
    text = written.read_text()
    assert "Traceback (most recent call last)" in text and "boom" in text and "flashbuild" in text.splitlines()[0]


def test_user_mistakes_still_get_their_own_error_line(tmp_path, monkeypatch):
    monkeypatch.setenv("FLASHBUILD_CACHE_DIR", str(tmp_path / "cache"))
    result = CliRunner().invoke(cli_module.cli, ["--hdim", "64", "--hdim", "128", "--dry-run"])
    assert result.exit_code == 2 and "a flashbuild bug" not in result.stderr
    assert result.stderr.startswith("flashbuild: error: Invalid value for '--hdim': given twice")


def test_a_path_in_the_environment_naming_no_users_home_is_the_users_error(tmp_path, monkeypatch):
    """FLASHBUILD_ROOT=~nosuchuser/x reached the guard (pathlib's RuntimeError): now the variable's own
    check says what it lacks; CUDA_HOME likewise names itself."""
    monkeypatch.setenv("FLASHBUILD_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("FLASHBUILD_ROOT", "~flashbuild-no-such-user/tree")
    listed = CliRunner().invoke(cli_module.cli, ["list"])
    assert listed.exit_code != cli_module.BUG_EXIT and "a flashbuild bug" not in listed.stderr, listed.stderr
    result = CliRunner().invoke(cli_module.cli, ["--hdim", "64", "--dtype", "fp16", "--arch", "sm90", "--dry-run"])
    assert "a flashbuild bug" not in result.stderr and result.exit_code in (1, 2), result.stderr
    assert "FLASHBUILD_ROOT=~flashbuild-no-such-user/tree has no kernels/" in result.stderr
    monkeypatch.delenv("FLASHBUILD_ROOT")
    from flashbuild import env
    assert "CUDA_HOME=~flashbuild-no-such-user/cuda has no bin/nvcc" in env.cuda_home_problem("~flashbuild-no-such-user/cuda")
