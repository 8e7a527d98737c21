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
from test_ci_shard import SELECTION, build_shards, edit_manifest, fake_cuda  # noqa: F401 (fixture)

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
    assert f"the shards hold 27 TUs, the selection they name has 28 (not in any shard: {dropped};" in result.stderr
    assert "--shard I/2`" in result.stderr
