"""`flashbuild watch`: polling kernels/ for saved files, with the test run and the clock faked."""

from __future__ import annotations

import os
import sys

from flashbuild import cli
from flashbuild.debug import watch
from helpers import run_cli


def test_snapshot_sees_sources_and_changes_name_them(tmp_path):
    (tmp_path / "ampere").mkdir()
    (tmp_path / "ampere" / "fwd.h").write_text("a")
    (tmp_path / "notes.txt").write_text("not a source")
    before = watch.snapshot(tmp_path)
    assert list(before) == ["ampere/fwd.h"]
    os.utime(tmp_path / "ampere" / "fwd.h", ns=(1, before["ampere/fwd.h"] + 10**9))
    (tmp_path / "new.cuh").write_text("b")
    assert watch.changes(before, watch.snapshot(tmp_path)) == ["ampere/fwd.h", "new.cuh"]
    assert watch.changes(before, before) == []


def test_runs_once_then_after_each_change(tmp_path):
    header = tmp_path / "fwd.h"
    header.write_text("v1")
    runs, logs = [], []
    edits = iter([None, "v2", None, None, "v3"])  # one edit (or none) before each poll

    def sleep(_):
        edit = next(edits)
        if edit:
            header.write_text(edit)
            stamp = header.stat().st_mtime_ns + 10**9 * (len(runs) + 1)
            os.utime(header, ns=(stamp, stamp))

    count = watch.watch(tmp_path, ["flashbuild", "test"], interval=0.01, log=logs.append,
                        run=lambda cmd: runs.append(cmd) or 0, sleep=sleep, max_cycles=5)
    assert count == 3 and runs == [["flashbuild", "test"]] * 3
    assert sum(m.startswith("changed: fwd.h") for m in logs) == 2


def test_watch_command_reruns_flashbuild_test_quick_on_the_selection(monkeypatch, cache):
    seen = {}

    def fake_watch(root, command, interval, log):
        seen.update(root=root, command=command, interval=interval)
        return 0

    monkeypatch.setattr(watch, "watch", fake_watch)
    result = run_cli("watch", "--hdim", "64", "--dtype", "fp16", "--arch", "sm90", "--direction", "fwd,bwd",
                     "--interval", "0.5")
    assert result.exit_code == 0, result.output
    assert seen["command"][:4] == [sys.executable, "-m", "flashbuild", "test"]
    assert seen["command"][4:] == ["--hdim", "64", "--dtype", "fp16", "--arch", "sm90", "--direction", "fwd,bwd",
                                   "--causal", "both", "--shapes", "quick"]
    assert seen["root"].name == "kernels" and seen["interval"] == 0.5
    assert cli.build_args  # the same selection arguments a child test gets
