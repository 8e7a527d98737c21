"""What a slice leaves out of the directions and kernels the tree's tests and API reach: the pytest
plugin's direction switches and always-calling test functions (profile key tests.functions), and a
forward check that flash-attn 2's API ran on the split-KV kernels the slice leaves out. No GPU."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from flashbuild.selection.variants import Variant
from flashbuild.sources import profile as profiles
from flashbuild.sources import pytest_slice


def manifest(profile: str, directions: list[str] | None, features: list[str] = (), hdim: int = 64) -> dict:
    selection = {"hdim": [hdim], "dtype": ["fp16"], "features": list(features), "causal": "on"}
    if directions is not None:
        selection["direction"] = directions
    return {"key": "k", "profile": profile, "selection": selection}


@pytest.mark.parametrize("line", ["flash-attn-2@2.5", "flash-attn-2@2.6", "flash-attn-2@2.7.4", "flash-attn-2"])
def test_fa2_cases_that_always_call_a_direction_the_slice_lacks_are_deselected(line):
    """flash-attn 2's forward tests run the backward of every case on sm90, its KV-cache test the
    split-KV kernels: a forward-only slice deselects them (naming the direction), a slice holding them
    keeps them, and a manifest without directions (every direction) keeps them too."""
    tree = profiles.load(line)
    params = {"dtype": "torch.float16", "d": 64, "causal": True, "seqlen_q": 128}
    why = pytest_slice.serves(params, manifest(line, ["fwd"]), tree, "test_flash_attn_output")
    assert why == "direction bwd (every case of test_flash_attn_output calls it)"
    assert pytest_slice.serves(params, manifest(line, ["fwd", "bwd"]), tree, "test_flash_attn_output") is None
    assert pytest_slice.serves(params, manifest(line, None), tree, "test_flash_attn_output") is None
    cache = {**params, "num_splits": 1, "new_kv": False}
    assert "direction splitkv" in pytest_slice.serves(cache, manifest(line, ["fwd", "bwd"]), tree,
                                                      "test_flash_attn_kvcache")
    assert pytest_slice.serves(cache, manifest(line, ["fwd", "bwd", "splitkv"]), tree, "test_flash_attn_kvcache") is None


@pytest.mark.parametrize("line", ["flash-attn-3@3.0.0b1", "flash-attn-3@3.0.0-nopackage", "flash-attn-3"])
def test_fa3_forward_only_slice_sets_the_modules_backward_switch_and_drops_combine_without_split(line):
    tree = profiles.load(line)
    env = pytest_slice.test_environment(manifest(line, ["fwd"], hdim=128), tree)
    assert env["FLASH_ATTENTION_DISABLE_BACKWARD"] == "TRUE"
    assert "FLASH_ATTENTION_DISABLE_BACKWARD" not in pytest_slice.test_environment(
        manifest(line, ["fwd", "bwd"], hdim=128), tree)
    combine = {"dtype": "torch.float16", "d": 128, "num_splits": 3, "seqlen": 64}
    assert "split (every case of test_flash_attn_combine" in pytest_slice.serves(
        combine, manifest(line, ["fwd"], hdim=128), tree, "test_flash_attn_combine")
    assert pytest_slice.serves(combine, manifest(line, ["fwd"], ["split"], hdim=128), tree,
                               "test_flash_attn_combine") is None


def test_tests_functions_naming_no_direction_or_feature_is_the_profiles_clear_error(tmp_path):
    from flashbuild.errors import FlashbuildError

    text = (profiles.profiles_dir() / "flash-attn-2.toml").read_text()
    assert "[tests.functions]" in text
    start = text.index("[tests.functions]")
    end = text.index("\n\n", start)
    for bad in ('sideways = ["test_x"]', 'bwd = "test_x"', 'bwd = ["test x; rm"]', 'splitkv = [1]'):
        path = tmp_path / "bad.toml"
        path.write_text(f"{text[:start]}[tests.functions]\n{bad}{text[end:]}")
        with pytest.raises(FlashbuildError, match="tests.functions"):
            profiles.load(str(path))


FAKE_FA2_MODULE = '''
import pytest

@pytest.mark.parametrize("dtype", ["torch.float16"])
@pytest.mark.parametrize("d", [64])
def test_flash_attn_output(dtype, d):
    pass

@pytest.mark.parametrize("dtype", ["torch.float16"])
@pytest.mark.parametrize("d", [64])
@pytest.mark.parametrize("num_splits", [1])
def test_flash_attn_kvcache(dtype, d, num_splits):
    pass
'''


def test_the_plugin_counts_a_forward_only_slices_backward_cases_as_deselected(tmp_path):
    (tmp_path / "test_fake_fa2.py").write_text(FAKE_FA2_MODULE)
    path = tmp_path / "manifest.json"
    environ = {**os.environ, "FLASHBUILD_SLICE": str(path), "PYTHONDONTWRITEBYTECODE": "1"}
    for directions, expected in ((["fwd"], "2 deselected"), (["fwd", "bwd"], "1 passed, 1 deselected"),
                                 (["fwd", "bwd", "splitkv"], "2 passed")):
        path.write_text(json.dumps(manifest("flash-attn-2", directions)))
        process = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "flashbuild.sources.pytest_slice",
                                  "-p", "no:cacheprovider", str(tmp_path / "test_fake_fa2.py")],
                                 capture_output=True, text=True, cwd=tmp_path, env=environ)
        assert expected in process.stdout, process.stdout[-2000:]


class _Interface:
    def __init__(self, error: Exception):
        self.error = error

    def flash_attn_func(self, *args, **kwargs):
        raise self.error


def _fa2_slice(error: Exception):
    from flashbuild.debug import adapters

    class Fa2(adapters.FlashAttn2Slice):
        def __init__(self):
            self.manifest = {"profile": "flash-attn-2", "key": "k",
                             "selection": {"causal": "on", "features": [], "direction": ["fwd"]}}
            self.interface = _Interface(error)
            self._no_softcap = True
            self._window_pair = False
            self._no_cache_lse = False

    return Fa2()


def _real_split_messages(tmp_path) -> list[str]:
    """The texts a flash-attn 2 slice raises when a forward reaches the split-KV kernels it leaves out, as
    the build renders them: the stub of a forward-only slice, and the Split site's compiled-out branch."""
    from flashbuild.pipeline import builder
    from flashbuild.pipeline.plan import tree_context
    from flashbuild.sources import switches
    from test_profiles import fake_fa2_tree

    tree = fake_fa2_tree(tmp_path)
    forward_only = builder.make_plan(*builder.parse_request(source=tree, profile="flash-attn-2", arch="sm90", hdim="128",
                                                            dtype="fp16", direction="fwd", causal="on", features="none"))
    stubs = [m for m in tree_context(forward_only)["messages"] if "split-KV" in m]
    site = next(s for s in profiles.load("flash-attn-2").switches.macros if s.site == "Split")
    narrowed = switches.narrow(site, (True,), (), lambda **changes: "flashbuild --features split ...", "flash-attn-2@2.8")
    return [*stubs, *(n.message for n in narrowed if n.message)]


def test_a_forward_the_trees_api_split_is_a_skip_naming_the_heuristic_not_a_failure(tmp_path):
    """flash-attn 2's mha_fwd picks the split-KV kernels for few query blocks (its num_splits heuristic,
    by the GPU's SM count): on a slice without them the call raises the slice's named error, and the
    check reports that as outside the slice; any other error stays the row's failure. (Found on the H200:
    the watch of a forward-only slice failed its GQA shape on the stub's error.)"""
    pytest.importorskip("torch")
    from flashbuild.debug import checking

    variant = Variant.from_name("fwd_hdim128_fp16_causal_sm90")
    shape = checking.Shape(2, 113, 1023, 16, 2)
    messages = _real_split_messages(tmp_path)
    # the split-KV stubs (the API references both causal values) and the Split site's left-out branch
    assert any("holds no split-KV" in m for m in messages) and any("feature split left out" in m for m in messages)
    for text in messages:
        row = checking.check(_fa2_slice(RuntimeError(text)), variant, shape, seed=0, device="cpu")
        assert row.status == "skip" and "num_splits heuristic" in row.skipped and row.error is None, text
    for error in (RuntimeError("CUDA error: an illegal memory access was encountered"),
                  ValueError(messages[0]),  # not the slice's RuntimeError
                  RuntimeError("this flashbuild slice of flash-attn-2 holds no backward kernel for head dim 128")):
        row = checking.check(_fa2_slice(error), variant, shape, seed=0, device="cpu")
        assert row.status == "FAIL" and row.error and not row.skipped
    bwd = Variant.from_name("bwd_hdim128_fp16_causal_sm90")  # only a forward's split is the API's choice
    assert _fa2_slice(RuntimeError(messages[0])).outside_call(bwd, shape, RuntimeError(messages[0])) is None


# ---------------------------------------------------------------- FA3's backward GQA site (feature gqa)

@pytest.mark.parametrize("line", ["flash-attn-3@3.0.0b1", "flash-attn-3"])
def test_a_gqa_case_needs_feature_gqa_only_where_the_slice_runs_its_backward(line):
    """The GQA site is in the backward's TUs only (switches.directions): a forward-only slice serves the
    module's MQA/GQA cases (it skips their backward), a slice with the backward needs gqa for them."""
    tree = profiles.load(line)
    params = {"dtype": "torch.float16", "d": 128, "causal": True, "seqlen_q": 128, "mha_type": "gqa"}
    assert pytest_slice.serves(params, manifest(line, ["fwd"], hdim=128), tree, "test_flash_attn_output") is None
    why = pytest_slice.serves(params, manifest(line, ["fwd", "bwd"], hdim=128), tree, "test_flash_attn_output")
    assert why == "compiled-out switch branch: gqa"
    assert pytest_slice.serves(params, manifest(line, ["fwd", "bwd"], ["gqa"], hdim=128), tree,
                               "test_flash_attn_output") is None
    mha = {**params, "mha_type": "mha"}
    assert pytest_slice.serves(mha, manifest(line, ["fwd", "bwd"], hdim=128), tree, "test_flash_attn_output") is None


def test_a_backward_check_of_a_gqa_shape_is_a_skip_without_gqa():
    from flashbuild.debug import adapters, checking

    class Fa3(adapters.FlashAttn3Slice):
        def __init__(self, features):
            self.manifest = {"profile": "flash-attn-3", "selection": {"causal": "both", "features": features}}

    bwd, fwd = Variant.from_name("bwd_hdim128_fp16_sm90"), Variant.from_name("fwd_hdim128_fp16_sm90")
    gqa, mha = checking.Shape(2, 113, 1023, 16, 2), checking.Shape(2, 17, 17, 4, 4)
    assert "needs feature gqa" in Fa3([]).outside(bwd, gqa)
    row = checking.check(Fa3([]), bwd, gqa, seed=0, device="cpu")
    assert row.status == "skip" and "GQA/MQA" in row.skipped
    assert Fa3(["gqa"]).outside(bwd, gqa) is None and Fa3([]).outside(bwd, mha) is None
    assert Fa3([]).outside(fwd, gqa) is None


@pytest.mark.parametrize("bad", ['gqa = "bwd"', 'gqa = []', 'gqa = ["sideways"]', 'nosuch = ["bwd"]'])
def test_switch_directions_that_name_no_feature_or_direction_are_the_profiles_clear_error(tmp_path, bad):
    from flashbuild.errors import FlashbuildError

    text = (profiles.profiles_dir() / "flash-attn-3.toml").read_text()
    start = text.index("[switches.directions]")
    end = text.index("\n\n", start)
    path = tmp_path / "bad.toml"
    path.write_text(f"{text[:start]}[switches.directions]\n{bad}{text[end:]}")
    with pytest.raises(FlashbuildError, match="switches.directions"):
        profiles.load(str(path))


def test_the_fix_of_a_missing_split_kv_direction_also_adds_split(tmp_path):
    """A forward-only FA2 slice's split-KV stub names a command that serves what it names (KV-cache calls
    and forwards the API splits): the direction and the split branch, in one rebuild."""
    from flashbuild.pipeline import builder
    from flashbuild.pipeline.plan import tree_context
    from test_profiles import fake_fa2_tree

    tree = fake_fa2_tree(tmp_path)

    def stubs(features: str, direction: str = "fwd") -> list[str]:
        plan = builder.make_plan(*builder.parse_request(source=tree, profile="flash-attn-2", arch="sm90", hdim="64",
                                                        dtype="fp16", direction=direction, causal="on",
                                                        features=features))
        return tree_context(plan)["messages"]

    split_kv = [m for m in stubs("none") if "split-KV" in m]
    assert split_kv and all("--direction fwd,splitkv --causal both --features split" in m for m in split_kv)
    assert all("--features local,split" in m for m in stubs("local") if "split-KV" in m)
    assert all("--features split" in m and "split,split" not in m for m in stubs("split") if "split-KV" in m)
    backward = [m for m in stubs("none") if "backward" in m]  # the other stubs keep the slice's features
    assert backward and all("--direction fwd,bwd --causal both --features none" in m for m in backward)


FAKE_FA3_MODULE = '''
import pytest

def test_flash3_bw_compatibility():
    assert {outcome!r} == "pass"

@pytest.mark.parametrize("dtype", ["torch.float16"])
@pytest.mark.parametrize("d", [128])
def test_flash_attn_output(dtype, d):
    pass
'''


@pytest.mark.parametrize("line, listed", [("flash-attn-3@3.0.0", True), ("flash-attn-3@3.0.0-nopackage", True),
                                          ("flash-attn-3@3.0.0b1", False)])
def test_a_test_the_trees_own_build_fails_is_an_expected_failure_never_a_pass(tmp_path, line, listed):
    """tests.known_failures of a release line (FA3 after upstream e1944ba9: its bwd schema test expects
    8 outputs, its API registers 5): the case runs as xfail, so it counts as an expected failure; if it
    passes it shows as XPASS (the entry stale), and a line without the entry runs it as usual."""
    tree = profiles.load(line)
    assert ("test_flash3_bw_compatibility" in tree.tests.known_failures) is listed
    path = tmp_path / "manifest.json"
    path.write_text(json.dumps(manifest(line, ["fwd"], hdim=128)))
    environ = {**os.environ, "FLASHBUILD_SLICE": str(path), "PYTHONDONTWRITEBYTECODE": "1"}
    for outcome, expected in (("fail", "1 passed, 1 xfailed" if listed else "1 failed, 1 passed"),
                              ("pass", "1 passed, 1 xpassed" if listed else "2 passed")):
        (tmp_path / "test_fake_fa3.py").write_text(FAKE_FA3_MODULE.format(outcome=outcome))
        process = subprocess.run([sys.executable, "-m", "pytest", "-q", "-rxX", "-p", "flashbuild.sources.pytest_slice",
                                  "-p", "no:cacheprovider", str(tmp_path / "test_fake_fa3.py")],
                                 capture_output=True, text=True, cwd=tmp_path, env=environ)
        assert expected in process.stdout, process.stdout[-2000:]
        if listed and outcome == "fail":
            assert "the tree's own build fails it too" in process.stdout and "e1944ba9" in process.stdout


@pytest.mark.parametrize("bad", ['"test x; rm" = "why"', 'test_a = ""', 'test_a = 3', 'test_a = "two\\nlines"',
                                 f'test_a = "{"x" * 401}"'])
def test_known_failures_that_are_not_a_function_and_a_one_line_reason_are_the_profiles_clear_error(tmp_path, bad):
    from flashbuild.errors import FlashbuildError

    text = (profiles.profiles_dir() / "flash-attn-3.toml").read_text()
    path = tmp_path / "bad.toml"
    path.write_text(f"{text}\n[tests.known_failures]\n{bad}\n")
    with pytest.raises(FlashbuildError, match="known_failures"):
        profiles.load(str(path))


FAKE_REFUSING_MODULE = '''
import pytest

@pytest.mark.parametrize("seqlen", [113, 4096])
def test_flash_attn_output(seqlen):
    if seqlen == 113:   # the tree's API picked a kernel the slice left out: the stub's error
        raise RuntimeError("this flashbuild slice of flash-attn-2@2.8 holds no split-KV forward kernel for head dim "
                           "128, fp16, causal (it holds fwd, bwd, causal on); rebuild with: flashbuild --source T "
                           "--direction fwd,bwd,splitkv --features split")

def test_a_real_failure():
    raise RuntimeError("CUDA error: an illegal memory access was encountered")
'''


def test_a_case_that_raises_the_slices_own_error_is_a_skip_naming_it_and_other_failures_stay_failures(tmp_path):
    """flash-attn 2's num_splits heuristic sends a small forward to the split-KV kernels, which no case
    parameter says: the case ends in the slice's error, reported as a skip with it, and counted."""
    path = tmp_path / "manifest.json"
    path.write_text(json.dumps(manifest("flash-attn-2@2.8", ["fwd", "bwd"], hdim=128)))
    (tmp_path / "test_fake_fa2.py").write_text(FAKE_REFUSING_MODULE)
    environ = {**os.environ, "FLASHBUILD_SLICE": str(path), "PYTHONDONTWRITEBYTECODE": "1"}
    process = subprocess.run([sys.executable, "-m", "pytest", "-q", "-rs", "-p", "flashbuild.sources.pytest_slice",
                              "-p", "no:cacheprovider", str(tmp_path / "test_fake_fa2.py")],
                             capture_output=True, text=True, cwd=tmp_path, env=environ)
    out = process.stdout
    assert "1 failed, 1 passed, 1 skipped" in out, out[-2000:]
    assert "needs what this slice compiled out: this flashbuild slice of flash-attn-2@2.8 holds no split-KV" in out
    assert "flashbuild slice: 1 case(s) reached a branch or kernel the slice compiled out" in out
    assert "test_a_real_failure" in out and "illegal memory access" in out
