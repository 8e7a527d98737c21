"""The GitHub Actions example (.github/workflows/flashbuild-matrix.yml) cannot run here: check that it
parses, that its jobs chain matrix -> compile -> link -> GPU test, and that its matrix is what
`flashbuild matrix` prints (every key a job reads is one the command writes)."""

from __future__ import annotations

import json
import re

import pytest

from helpers import REPO, run_cli

WORKFLOW = REPO / ".github" / "workflows" / "flashbuild-matrix.yml"


def test_the_workflow_text_is_plain_yaml_and_reads_the_matrix_from_flashbuild():
    text = WORKFLOW.read_text()
    assert "\t" not in text  # YAML forbids tabs for indentation
    assert "MATRIX_CONFIG: configs/ci.toml" in text
    assert 'flashbuild matrix "$MATRIX_CONFIG" --format github' in text
    assert "matrix: ${{ fromJSON(needs.matrix.outputs.jobs) }}" in text
    used = set(re.findall(r"\$\{\{\s*matrix\.(\w+)\s*\}\}", text))
    github = json.loads(run_cli("matrix", str(REPO / "configs" / "ci.toml"), "--format", "github").stdout)
    written = set(github["include"][0])
    assert used <= written | {"cell"}, used - written  # link/gpu-test's own matrix is {cell}


def test_the_workflow_parses_and_chains_its_jobs():
    yaml = pytest.importorskip("yaml")
    data = yaml.safe_load(WORKFLOW.read_text())
    jobs = data["jobs"]
    assert list(jobs) == ["matrix", "compile", "link", "gpu-test"]
    assert jobs["compile"]["needs"] == "matrix"
    assert "compile" in jobs["link"]["needs"] and "link" in jobs["gpu-test"]["needs"]
    assert jobs["compile"]["strategy"]["matrix"] == "${{ fromJSON(needs.matrix.outputs.jobs) }}"
    steps = " ".join(str(s.get("run", "")) for s in jobs["compile"]["steps"])
    assert '--cell "${{ matrix.cell }}" --shard "${{ matrix.shard }}"' in steps and "--artifact-dir shard" in steps
    uploads = [s for s in jobs["compile"]["steps"] if s.get("uses", "").startswith("actions/upload-artifact")]
    assert uploads and uploads[0]["with"]["path"] == "shard"
    assert any("flashbuild link shards/*" in str(s.get("run", "")) for s in jobs["link"]["steps"])
    assert any("flashbuild test" in str(s.get("run", "")) for s in jobs["gpu-test"]["steps"])
    assert data["env"]["FLASHBUILD_LAUNCHER"] == "sccache"
    # The matrix job's command, run here, gives a matrix GitHub accepts.
    run = next(s["run"] for s in jobs["matrix"]["steps"] if s.get("id") == "matrix")
    assert "--format github" in run
    cells = json.loads(run_cli("matrix", data["env"]["MATRIX_CONFIG"].replace("configs/ci.toml", str(
        REPO / "configs" / "ci.toml")), "--format", "github").stdout)["include"]
    assert 0 < len(cells) <= 256 and all({"cell", "shard", "args"} <= set(c) for c in cells)
