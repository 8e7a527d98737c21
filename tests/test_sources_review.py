"""Review of source profiles: the tree's own tests run on a slice (`flashbuild run ... -- python3 -m
pytest TREE/tests/... -p flashbuild.sources.pytest_slice`) must not write into the tree either."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from helpers import REPO

TEST_MODULE = """\
import pytest

@pytest.mark.parametrize("dtype", ["torch.float16", "torch.bfloat16"])
@pytest.mark.parametrize("d", [64, 128])
def test_case(dtype, d):
    pass
"""


def test_the_trees_own_tests_leave_no_pytest_cache_in_the_tree(tmp_path):
    # An sdist's root holds setup.py, so pytest makes it the rootdir and would put .pytest_cache there.
    tree = tmp_path / "flash_attn-2.8.3"
    (tree / "tests").mkdir(parents=True)
    (tree / "setup.py").write_text("")
    (tree / "tests" / "test_flash_attn.py").write_text(TEST_MODULE)
    build = tmp_path / "build"
    build.mkdir()
    manifest = {"key": "k", "profile": "flash-attn-2", "source": str(tree),
                "selection": {"hdim": [64], "dtype": ["fp16"], "features": []}}
    (build / "manifest.json").write_text(json.dumps(manifest))
    before = sorted(p.relative_to(tree) for p in tree.rglob("*"))
    env = {**os.environ, "FLASHBUILD_SLICE": str(build / "manifest.json"), "PYTHONPYCACHEPREFIX": str(build / "pyc"),
           "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])}
    process = subprocess.run([sys.executable, "-m", "pytest", str(tree / "tests" / "test_flash_attn.py"),
                              "-p", "flashbuild.sources.pytest_slice", "-q"],
                             capture_output=True, text=True, env=env, cwd=tmp_path, timeout=300)
    assert process.returncode == 0, process.stdout[-2000:] + process.stderr[-2000:]
    assert "1 passed, 3 deselected" in process.stdout
    assert sorted(p.relative_to(tree) for p in tree.rglob("*")) == before
    assert (build / "pytest_cache").is_dir()  # the cache went to the build dir instead


# ---------------------------------------------------------------- a tree of another release

import pytest  # noqa: E402

from flashbuild.pipeline import builder  # noqa: E402
from flashbuild.errors import SelectionError  # noqa: E402
from test_profiles import fake_fa2_tree  # noqa: E402


@pytest.mark.parametrize("version", ["2.8.3", "2.8.0", "2.8.4.post1"])
def test_a_tree_of_the_profiles_release_is_accepted(tmp_path, version):
    tree = fake_fa2_tree(tmp_path)
    (tree / "flash_attn" / "__init__.py").write_text(f'__version__ = "{version}"\n')
    builder.make_plan(*builder.parse_request(source=tree, profile="flash-attn-2", hdim=64, dtype="fp16", arch="sm90"))


@pytest.mark.parametrize("text, found", [('__version__ = "2.6.3"\n', "2.6.3"), ('__version__ = "3.0.0b1"\n', "3.0.0b1"),
                                         ("", "no version")])
def test_a_tree_of_another_release_is_refused_naming_both_versions(tmp_path, text, found):
    tree = fake_fa2_tree(tmp_path)
    (tree / "flash_attn" / "__init__.py").write_text(text)
    with pytest.raises(SelectionError) as error:
        builder.parse_request(source=tree, profile="flash-attn-2", hdim=64, dtype="fp16", arch="sm90")
    message = str(error.value)
    assert found in message and "2.8" in message and "flash_attn/__init__.py" in message


@pytest.mark.parametrize("pattern", [r"^(a+)+$", r"(\d*)*", r"([0-9]{2,})+x", "(" + "x" * 300 + ")"])
def test_a_version_pattern_that_could_backtrack_forever_is_refused(tmp_path, pattern):
    """A profile's tree.version.pattern runs on a file of the user's tree: a repeated group of one
    repeated atom (exponential backtracking) or an overlong pattern is refused when the profile is read."""
    from flashbuild.errors import SelectionError
    from flashbuild.sources import profile as profiles

    text = (profiles.profiles_dir() / "flash-attn-2.toml").read_text()
    line = next(l for l in text.splitlines() if l.startswith("version = {"))
    copy = tmp_path / "mytree.toml"
    copy.write_text(text.replace(line, "version = { file = \"flash_attn/__init__.py\", pattern = '%s', "
                                       "accepts = \"2.8\" }" % pattern))
    with pytest.raises(SelectionError) as error:
        profiles.load(str(copy))
    assert "tree.version.pattern" in str(error.value) and "quantifier" in str(error.value)


def test_a_version_file_that_is_a_fifo_does_not_hang(tmp_path):
    from flashbuild.sources import profile as profiles, tree_check

    tree = tmp_path / "tree"
    (tree / "flash_attn").mkdir(parents=True)
    os.mkfifo(tree / "flash_attn" / "__init__.py")
    assert tree_check.tree_version(profiles.load("flash-attn-2"), tree) is None
