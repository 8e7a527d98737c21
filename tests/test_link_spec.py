"""The torch link spec is kept in the build dir, so a no-op rebuild never imports torch (3.3 s on
the GPU host); it is recomputed when what it depends on changes."""

from __future__ import annotations

import pytest

from flashbuild.build import builder, toolchain
from flashbuild import env

pytestmark = pytest.mark.skipif(env.torch_info() is None or env.find_nvcc() is None,
                                reason="needs torch installed and nvcc to plan a build")


def plan_in(tmp_path):
    return builder.make_plan(*builder.parse_request(hdim=64, dtype="fp16", arch="sm90", direction="fwd",
                                                    build_dir=tmp_path / "b"))


def test_second_call_reuses_the_saved_spec_without_importing_torch(tmp_path, monkeypatch):
    plan = plan_in(tmp_path)
    first = toolchain.torch_link_spec(plan)
    assert (plan.build_dir / toolchain.LINK_SPEC_FILE).is_file()

    def no_import(*args):
        raise AssertionError("torch_link_spec imported torch although the saved spec is valid")

    monkeypatch.setattr(toolchain, "_import_torch_spec", no_import)
    assert toolchain.torch_link_spec(plan) == first
    monkeypatch.setattr(env, "find_host_cxx", lambda: first.cxx.parent / "another-c++")
    assert toolchain.torch_link_spec(plan).cxx.name == "another-c++"  # the compiler is not torch's part


def test_a_changed_stamp_recomputes_the_spec(tmp_path, monkeypatch):
    plan = plan_in(tmp_path)
    toolchain.torch_link_spec(plan)
    calls = []
    real = toolchain._import_torch_spec
    monkeypatch.setattr(toolchain, "_import_torch_spec", lambda *a: calls.append(a) or real(*a))
    info = env.torch_info()
    monkeypatch.setattr(env, "torch_info", lambda: env.TorchInfo(info.version + ".post1", info.cuda, info.root))
    toolchain.torch_link_spec(plan)
    assert len(calls) == 1


def test_a_corrupt_saved_spec_is_recomputed(tmp_path):
    plan = plan_in(tmp_path)
    first = toolchain.torch_link_spec(plan)
    (plan.build_dir / toolchain.LINK_SPEC_FILE).write_text("{not json")
    assert toolchain.torch_link_spec(plan) == first
