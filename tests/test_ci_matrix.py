"""CI matrix configs (flashbuild/ci/matrix.py) and the CLI around them: `flashbuild matrix`, `build
--config MATRIX --cell NAME`. No compiler: cells are selections, checked and printed."""

from __future__ import annotations

import json
import re
import shlex
import textwrap
from pathlib import Path

import pytest

from flashbuild.ci import matrix as matrices
from flashbuild.errors import SelectionError
from helpers import REPO, run_cli

CI = str(REPO / "configs" / "ci.toml")


def write(tmp_path: Path, text: str) -> str:
    path = tmp_path / "m.toml"
    path.write_text(textwrap.dedent(text))
    return str(path)


def names(path: str) -> list[str]:
    return [c.name for c in matrices.load(path).cells]


# ---------------------------------------------------------------- configs/ci.toml

def test_the_ci_matrix_has_one_cell_per_arch_and_dtype_and_two_smoke_cells():
    found = matrices.load(CI)
    assert [c.name for c in found.cells] == ["sm80-fp16", "sm80-bf16", "sm86-fp16", "sm86-bf16", "sm90-fp16",
                                             "sm90-bf16", "smoke-sm80", "smoke-sm90a"]
    cells = {c.name: c for c in found.cells}
    # 72 variants, plus the device-only kernel TUs: one per forward (head dims 32-256; the plain non-causal hdim-128
    # one two: its 128-key kernel too), two per plain backward (64-256: its deterministic instantiation too) and per
    # feature backward, one per split-KV variant and a second (the decode tile) per split-KV variant at head dims 64/128,
    # and the decode tile over pairs of K/V heads of the plain non-causal hdim-64 split-KV variant
    assert cells["sm90-fp16"].units == 6 * 3 * 2 * 2 + 24 + 1 + 20 + 20 + 24 + 8 + 1 and cells["sm90-fp16"].shards == 4
    assert cells["sm86-bf16"].selection.directions == ("fwd",)  # the include rule: forward only
    assert cells["smoke-sm90a"].units == 2 and cells["smoke-sm90a"].args() == [  # the Hopper launch and kernel
        "--hdim", "64", "--dtype", "fp16", "--arch", "sm90", "--direction", "fwd", "--causal", "off",
        "--no-local", "--no-softcap"]
    every = [v.name for c in found.cells[:6] for v in c.selection.variants]
    assert len(every) == len(set(every)) == 4 * 72 + 2 * 24  # the grid's cells never overlap


def test_matrix_github_format_is_one_job_per_cell_and_shard():
    result = run_cli("matrix", CI, "--format", "github")
    assert result.exit_code == 0, result.output
    jobs = json.loads(result.stdout)["include"]
    assert len(jobs) == 6 * 4 + 2
    assert {"cell": "sm80-fp16", "shard": "3/4"} == {k: jobs[2][k] for k in ("cell", "shard")}
    assert jobs[-1]["cell"] == "smoke-sm90a" and jobs[-1]["shard"] == "1/1" and jobs[-1]["tus"] == 2
    assert "\n" not in result.stdout.strip()  # one line: fits `echo "matrix=$(...)" >> $GITHUB_OUTPUT`


def test_matrix_json_format_carries_each_cells_selection_and_build_command():
    cells = json.loads(run_cli("matrix", "ci", "--format", "json").stdout)
    smoke = cells[-2]
    assert smoke["name"] == "smoke-sm80" and smoke["tus"] == 1
    assert shlex.split(smoke["args"])[:2] == ["--hdim", "64"]
    assert smoke["build"] == "flashbuild build --config ci --cell smoke-sm80"


def without_free_memory(text: str) -> str:
    return re.sub(r"[0-9.]+ GiB", "N GiB", text)


def test_a_cell_builds_what_the_matrix_printed(cache):
    for name in ("smoke-sm80", "sm86-fp16"):
        by_cell = run_cli("build", "--config", CI, "--cell", name, "--dry-run")
        cell = matrices.load(CI).cell(name)
        by_args = run_cli("build", *cell.args(), "--dry-run")
        assert by_cell.exit_code == 0, by_cell.output
        # Same key, same TUs; the plan's jobs line reads free memory, which moves between the two calls.
        assert without_free_memory(by_cell.stdout) == without_free_memory(by_args.stdout)


# ---------------------------------------------------------------- grid rules

def test_group_by_exclude_include_and_the_split_into_cross_products(tmp_path):
    path = write(tmp_path, """
        [matrix]
        hdim = [64, 128]
        dtype = ["fp16", "bf16"]
        arch = ["sm80", "sm90"]
        direction = ["fwd", "bwd"]
        causal = "both"
        features = ["none", "local,softcap"]
        group_by = ["arch"]
        [[matrix.exclude]]
        arch = "sm80"
        direction = "bwd"
        hdim = 128
        [[matrix.include]]
        arch = "sm86"
        hdim = 64
        dtype = "fp16"
        direction = "fwd"
        features = "none"
        """)
    cells = {c.name: c.selection for c in matrices.load(path).cells}
    # sm80 without bwd hdim 128 is no cross product: split on features (always), then on hdim
    assert sorted(cells) == ["sm80-fLS-h128", "sm80-fLS-h64", "sm80-fnone-h128", "sm80-fnone-h64", "sm86",
                             "sm90-fLS", "sm90-fnone"]
    assert cells["sm80-fnone-h128"].directions == ("fwd",) and cells["sm80-fnone-h64"].directions == ("fwd", "bwd")
    assert cells["sm90-fLS"].features == ("local", "softcap") and cells["sm90-fnone"].features == ()
    assert cells["sm86"].hdims == (64,) and cells["sm86"].dtypes == ("fp16",)
    covered = {v.name for s in cells.values() for v in s.variants}
    assert "bwd_hdim128_fp16_sm80" not in covered and "bwd_hdim64_bf16_causal_sm80" in covered


def test_no_group_by_is_one_cell_named_all(tmp_path):
    path = write(tmp_path, """
        [matrix]
        hdim = 64
        dtype = "fp16"
        arch = "sm90"
        group_by = []
        shards = 16
        """)
    (cell,) = matrices.load(path).cells
    assert cell.name == "all" and cell.shards == 16 and cell.units == 3 * 2 * 2 + 16 + 4 + 1  # directions x causal x features, + 16 kernel TUs, + 4 decode-tile TUs, + 1 over pairs of K/V heads


# ---------------------------------------------------------------- errors name the file, the key, expected and found

@pytest.mark.parametrize("body, key, words", [
    ("[matrix]\nhdim = [64, 80]\n", "matrix.hdim", ["80 is not a kernel head dim", "hdim-96"]),
    ("[matrix]\ndtype = 16\n", "matrix.dtype", ["16: not a valid value (valid: fp16, bf16)"]),
    ("[matrix]\ndtype = 1.5\n", "matrix.dtype", ["expected a name", "float"]),
    ("[matrix]\narch = [\"native\"]\n", "matrix.arch", ["expected arch names", "found a list"]),
    ("[matrix]\ngroup_by = [\"arch\", \"color\"]\n", "matrix.group_by", ["expected a list of distinct axis names",
                                                                       'found a list (["arch", "color"])']),
    ("[matrix]\nshards = 0\n", "matrix.shards", ["expected a positive integer", "found an integer (0)"]),
    ("[matrix]\nshards = \"4\"\n", "matrix.shards", ["expected a positive integer", 'found a string ("4")']),
    ("[matrix]\nhdims = [64]\n", "matrix", ["unknown key hdims", "valid keys: hdim"]),
    ("[matrix]\nexclude = {arch = \"sm80\"}\n", "matrix.exclude", ["expected a list of tables", "found a table"]),
    ("[matrix]\narch = \"sm80\"\n[[matrix.exclude]]\narch = \"sm89\"\n", "matrix.exclude[0]", ["matches nothing"]),
    ("[matrix]\n[[matrix.exclude]]\nsize = 3\n", "matrix.exclude[0]", ["unknown key size"]),
    ("[matrix]\n[[matrix.include]]\ndirection = \"sideways\"\n", "matrix.include[0].direction",
     ["sideways", "not a valid value"]),
    ("[matrix]\nfeatures = [\"local,dropout\"]\n", "matrix.features", ["dropout: not a feature"]),
    ("[[cells]]\nname = \"a b\"\n", "cells[0].name", ["expected a name of letters", 'found a string ("a b")']),
    ("[[cells]]\nname = \"x\"\nfeatures = [\"none\", \"local\"]\n", "cells[0].features", ["expected one feature set"]),
    ("[[cells]]\nname = \"x\"\n[[cells]]\nname = \"x\"\n", "", ["cell name x given twice"]),
    ("[[cells]]\nname = \"a-B\"\n[[cells]]\nname = \"A-b\"\n", "", ["cell name a-B and A-b given twice"]),
    ("[matrix]\n[selection]\nhdim = 64\n", "", ["unknown table or key selection"]),
    ("[matrix]\nhdim = [\n", "", ["not valid TOML"]),
])
def test_a_malformed_config_names_file_key_expected_and_found(tmp_path, body, key, words):
    path = write(tmp_path, body)
    with pytest.raises(SelectionError) as info:
        matrices.load(path)
    message = str(info.value)
    assert "m.toml" in message and key in message, message
    for word in words:
        assert word in message, message


def test_cli_errors_are_one_line_with_the_fix(tmp_path, cache):
    bad = write(tmp_path, "[matrix]\nhdim = [64, 80]\n")
    result = run_cli("matrix", bad)
    assert result.exit_code == 2 and "Traceback" not in result.output
    assert result.stderr.startswith("flashbuild: error: ") and "matrix.hdim" in result.stderr
    unknown = run_cli("build", "--config", CI, "--cell", "sm90-fp61", "--dry-run")
    assert unknown.exit_code == 2
    assert "has no such cell (cells: sm80-fp16, sm80-bf16," in unknown.stderr and "use --cell sm90-fp16" in unknown.stderr
    preset = run_cli("build", "--config", "ci-compile", "--cell", "smoke-sm80", "--dry-run")
    assert preset.exit_code == 2 and "is a preset, not a CI matrix" in preset.stderr
    bare = run_cli("build", "--config", CI, "--dry-run")
    assert bare.exit_code == 2 and "is a CI matrix, not a preset: pick one of its cells with --cell NAME" in bare.stderr
    assert "smoke-sm90a" in bare.stderr
    no_config = run_cli("build", "--cell", "smoke-sm80", "--dry-run")
    assert no_config.exit_code == 2 and "--config configs/ci.toml --cell smoke-sm80" in no_config.stderr
    both = run_cli("build", "--config", CI, "--cell", "smoke-sm80", "--hdim", "128", "--dry-run")
    assert both.exit_code == 2 and "drop --hdim" in both.stderr
    stray = run_cli("build", "--hdim", "64", "--costs", "x.json", "--dry-run")
    assert stray.exit_code == 2 and "--costs goes with --shard I/N" in stray.stderr
