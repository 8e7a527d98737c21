"""Every benchmark script still runs: each Python script of a study answers --help on this machine
(no GPU, no upstream tree), so an API it calls that moved or a module it imports that went away fails
here, not on the GPU host months later. Scripts kept as the record of a run (under a study's results/)
are only compiled; shell scripts are parsed (bash -n), and those that start with benchmarks/study_start.sh answer -h
with their header comment, without OUT set. (benchmarks/archive/ is an index only: its files are
in git history.)"""

from __future__ import annotations

import itertools
import os
import py_compile
import subprocess
import sys

import pytest

from helpers import REPO

BENCHMARKS = REPO / "benchmarks"
pytestmark = pytest.mark.slow  # one Python start (some import torch) per script


def _is_record(path) -> bool:
    parts = path.relative_to(BENCHMARKS).parts
    return "results" in parts or parts[0] == "archive"


SCRIPTS = sorted(p for p in BENCHMARKS.rglob("*.py") if not _is_record(p))
RECORDS = sorted(p for p in BENCHMARKS.rglob("*.py") if _is_record(p))
SHELL = sorted(BENCHMARKS.rglob("*.sh"))


def _id(path) -> str:
    return str(path.relative_to(BENCHMARKS))


@pytest.mark.parametrize("script", SCRIPTS, ids=_id)
def test_each_study_script_answers_help(script):
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), str(REPO / "tests"), str(REPO / "tests" / "gpu")]),
           "CUDA_VISIBLE_DEVICES": ""}
    done = subprocess.run([sys.executable, str(script), "--help"], capture_output=True, text=True, timeout=300,
                          cwd=REPO, env=env)
    assert done.returncode == 0, f"{_id(script)} --help failed:\n{done.stderr[-2000:]}"
    assert done.stdout.strip(), f"{_id(script)} --help printed no usage"
    # --help read as an argument (a build dir, an output file) writes into the tree: a usage never does
    written = [p.name for p in (REPO / "--help", REPO / "-h") if os.path.lexists(p)]
    assert not written, f"{_id(script)} --help wrote {written} in the repository root instead of printing its usage"


@pytest.mark.parametrize("script", RECORDS, ids=_id)
def test_recorded_scripts_still_compile(script, tmp_path):
    py_compile.compile(str(script), cfile=str(tmp_path / "out.pyc"), doraise=True)


@pytest.mark.parametrize("script", SHELL, ids=_id)
def test_shell_scripts_parse(script):
    done = subprocess.run(["bash", "-n", str(script)], capture_output=True, text=True)
    assert done.returncode == 0, f"{_id(script)}: {done.stderr}"


START = '. "$(dirname "$0")/../study_start.sh"'
STARTED = [p for p in SHELL if START in p.read_text().splitlines()]


@pytest.mark.parametrize("script", STARTED, ids=_id)
def test_started_shell_scripts_print_their_header_for_help(script):
    env = {k: v for k, v in os.environ.items() if k != "OUT"}
    done = subprocess.run(["bash", str(script), "-h"], capture_output=True, text=True, cwd=REPO, env=env, timeout=60)
    lines = script.read_text().splitlines()[1:]
    header = [line[2:] for line in itertools.takewhile(lambda line: line.startswith("#"), lines)]
    assert done.returncode == 0 and done.stdout.splitlines() == header, f"{_id(script)} -h: {done.stdout}{done.stderr}"


def test_there_are_scripts_to_check():
    assert len(SCRIPTS) >= 10 and SHELL and STARTED
