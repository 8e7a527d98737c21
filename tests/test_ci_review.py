"""Review of the CI pieces as a CI engineer would use them: hand-edited or damaged manifests, --costs files
that do not belong to the selection, and the workflow's jobs fitting together (the torch and Python the
shards were compiled with are the ones the link job links with; one cell's artifacts are never another's)."""

from __future__ import annotations

import fnmatch
import json
from pathlib import Path

import pytest

from flashbuild.ci import shard as sharding
from flashbuild.errors import SelectionError
from helpers import REPO, run_cli
from test_ci_shard import SELECTION, SELECTION_TUS, build_shards, edit_manifest, fake_cuda  # noqa: F401 (fixture)

WORKFLOW = REPO / ".github" / "workflows" / "flashbuild-matrix.yml"


# ---------------------------------------------------------------- manifests

@pytest.mark.parametrize("change, words", [
    (lambda m: m.update(shard="2/3"), "'shard': expected an object {\"index\": I, \"count\": N}"),
    (lambda m: m["shard"].update(index="3"), "'shard': expected an object {\"index\": I, \"count\": N}"),
    (lambda m: m["shard"].update(index=0), "'shard': expected an object {\"index\": I, \"count\": N}"),
    (lambda m: m.update(units=None), "'units': expected a list of TU names"),
    (lambda m: m.update(objects=[]), "'objects': expected an object of TU name -> sha256"),
    (lambda m: m.update(variants="fwd"), "'variants': expected a list of TU names"),
    (lambda m: m.update(split=[]), "'split': expected an object"),
    (lambda m: m.update(selection=None), "'selection': expected an object"),
])
def test_a_manifest_field_of_the_wrong_shape_is_named_not_a_traceback(tmp_path, fake_cuda, change, words):
    artifacts = build_shards(tmp_path, 3)
    edit_manifest(artifacts[2], change)
    result = run_cli("link", *map(str, artifacts))
    assert result.exit_code == 1, result.output
    assert "Traceback" not in result.output and isinstance(result.exception, SystemExit)
    assert f"{artifacts[2] / 'manifest.json'}: {words}" in result.stderr, result.stderr
    assert "rebuild that shard with `flashbuild" in result.stderr


def test_link_refuses_shards_whose_variants_are_not_the_selections(tmp_path, fake_cuda):
    """Every manifest edited alike (a TU dropped from the variants, its shard's units and objects): the
    shards agree with each other, but not with the selection they name, whose build holds that TU."""
    artifacts = build_shards(tmp_path, 2)
    dropped = json.loads((artifacts[0] / "manifest.json").read_text())["units"][0]

    def drop(m):
        m["variants"].remove(dropped)
        if dropped in m["units"]:
            m["units"].remove(dropped)
            del m["objects"][dropped]

    for artifact in artifacts:
        edit_manifest(artifact, drop)
    result = run_cli("link", *map(str, artifacts))
    assert result.exit_code == 1, result.output
    assert "Traceback" not in result.output
    assert f"the shards hold {SELECTION_TUS - 1} TUs, the selection they name has {SELECTION_TUS} (not in any shard: " \
           f"{dropped};" in result.stderr
    assert "--shard I/2`" in result.stderr


def test_shards_of_two_cells_are_named_as_such(tmp_path, fake_cuda):
    config = tmp_path / "m.toml"
    config.write_text('[matrix]\nhdim = [64, 128]\ndtype = "fp16"\narch = "sm80"\ndirection = "fwd"\n'
                      'features = ["none"]\ngroup_by = ["hdim"]\nshards = 2\n')
    artifacts = []
    for cell, i in (("h64", 1), ("h128", 2)):
        artifacts.append(tmp_path / f"{cell}-{i}")
        built = run_cli("build", "--config", str(config), "--cell", cell, "--shard", f"{i}/2", "--artifact-dir",
                        str(artifacts[-1]))
        assert built.exit_code == 0, built.output
    result = run_cli("link", *map(str, artifacts))
    assert result.exit_code == 1 and "Traceback" not in result.output
    assert "selection.hdim differs ([128] vs [64]); they are shards of different selections (h128 vs h64): link " \
           "the shards of one cell" in result.stderr, result.stderr


# ---------------------------------------------------------------- --costs

def test_costs_that_name_none_of_the_selections_tus_are_refused(tmp_path, fake_cuda):
    other = tmp_path / "other.ninja_log"  # a log of another selection, or of TUs since renamed
    other.write_text("# ninja log v7\n0\t9000\t1\tobj/bwd_hdim256_bf16_sm80.o\tx\n0\t100\t1\tobj/gone.o\ty\n")
    empty = tmp_path / "empty.json"
    empty.write_text("{}\n")
    for path in (other, empty):
        result = run_cli(*SELECTION, "--shard", "1/2", "--costs", str(path), "--dry-run")
        assert result.exit_code == 2, result.output
        assert f"--costs {path}: times none of the {SELECTION_TUS} TUs of this selection" in result.stderr, \
            result.stderr
        assert "drop --costs to split by the estimate" in result.stderr
    partial = tmp_path / "partial.json"  # some TUs timed: the others take the estimate, as documented
    partial.write_text('{"fwd_hdim64_fp16_sm90": 12.5, "gone": 3}')
    result = run_cli(*SELECTION, "--shard", "1/2", "--costs", str(partial), "--dry-run")
    assert result.exit_code == 0, result.output
    assert "costs: --costs" in result.stdout


@pytest.mark.parametrize("text", ['{"fwd_hdim64_fp16_sm90": NaN}', '{"fwd_hdim64_fp16_sm90": Infinity}'])
def test_costs_that_are_not_finite_are_refused(tmp_path, text):
    path = tmp_path / "c.json"
    path.write_text(text)
    with pytest.raises(SelectionError, match=r"fwd_hdim64_fp16_sm90: expected seconds \(a number >= 0\)"):
        sharding.read_costs(path)


# ---------------------------------------------------------------- the workflow

def _workflow():
    yaml = pytest.importorskip("yaml")
    return yaml.safe_load(WORKFLOW.read_text())


def _installs(job: dict) -> str:
    return " ".join(str(s.get("run", "")) for s in job["steps"] if "pip install" in str(s.get("run", "")))


def _python(job: dict) -> str | None:
    return next((s["with"]["python-version"] for s in job["steps"]
                 if s.get("uses", "").startswith("actions/setup-python")), None)


def test_the_shards_are_compiled_with_the_torch_and_python_the_link_and_gpu_jobs_use():
    """The key, and link's check that this machine fits the shards, hold the torch version (2.13.0+cpu is
    not 2.13.0+cu130) and the Python ABI: compiled with another, every link would stop, and the GPU job's
    load() would compile every TU again."""
    data = _workflow()
    jobs = data["jobs"]
    torch = {name: [t for t in ("$TORCH_CPU", "$TORCH_CUDA") if t in _installs(jobs[name])]
             for name in ("compile", "link", "gpu-test")}
    assert torch["compile"] == torch["link"] == torch["gpu-test"] == ["$TORCH_CUDA"], torch
    pythons = {name: _python(jobs[name]) for name in ("compile", "link", "gpu-test")}
    assert len(set(pythons.values())) == 1 and None not in pythons.values(), pythons


def test_a_cells_link_job_downloads_only_that_cells_shards():
    """The artifact names and the link job's download pattern, for cell names that are prefixes of
    each other ('sm80' and a hand cell 'sm80-x', both valid names)."""
    jobs = _workflow()["jobs"]
    upload = next(s for s in jobs["compile"]["steps"] if s.get("uses", "").startswith("actions/upload-artifact"))
    download = next(s for s in jobs["link"]["steps"] if s.get("uses", "").startswith("actions/download-artifact"))
    from flashbuild.ci.matrix import _CELL_NAME

    names = ["sm80", "sm80-x", "sm80-fp16", "sm80-fp16-fLS", "a", "a-1"]
    assert all(_CELL_NAME.fullmatch(n) for n in names) and not _CELL_NAME.fullmatch("a@b")

    def uploaded(cell, index):
        return upload["with"]["name"].replace("${{ matrix.cell }}", cell).replace("${{ strategy.job-index }}",
                                                                                    str(index))

    artifacts = {(cell, i): uploaded(cell, i) for cell in names for i in range(12)}
    assert len(set(artifacts.values())) == len(artifacts)
    for cell in names:
        pattern = download["with"]["pattern"].replace("${{ matrix.cell }}", cell)
        got = {c for (c, _), name in artifacts.items() if fnmatch.fnmatchcase(name, pattern)}
        assert got == {cell}, (cell, pattern, got)
