"""Selection parsing: values, defaults, presets, override order, and every user error (one line, exit 2)."""

from __future__ import annotations

import pytest

from flashbuild import env
from flashbuild.errors import SelectionError
from flashbuild.variants import (CompileFlags, HEAD_DIMS, Variant, implemented_directions, load_config,
                                 select)
from helpers import REPO, run_cli


def test_variant_names_follow_the_canonical_format():
    assert Variant("fwd", 128, "bf16", True, "sm90").name == "fwd_hdim128_bf16_causal_sm90"
    assert Variant("fwd", 64, "fp16", False, "sm80").name == "fwd_hdim64_fp16_sm80"


def test_selection_is_the_cross_product_in_canonical_order():
    s = select(hdim="128,64", dtype="bf16,fp16", arch="sm90", direction="bwd,fwd", causal="both")
    names = [v.name for v in s.variants]
    assert len(names) == 2 * 2 * 2 * 2
    assert names[:4] == ["fwd_hdim64_fp16_sm90", "fwd_hdim64_fp16_causal_sm90",
                         "fwd_hdim64_bf16_sm90", "fwd_hdim64_bf16_causal_sm90"]
    assert names[8] == "bwd_hdim64_fp16_sm90"  # directions first, then head dims
    assert s == select(hdim=[64, 128], dtype=["fp16", "bf16"], arch=["sm90"], direction=["fwd", "bwd"],
                       causal="both")


def test_defaults_are_every_head_dim_both_dtypes_causal_both_and_the_native_arch(monkeypatch):
    monkeypatch.setattr(env, "gpu_compute_caps", lambda: ["9.0"])
    s = select()
    assert s.hdims == HEAD_DIMS
    assert s.dtypes == ("fp16", "bf16")
    assert s.causal == (False, True)
    assert s.directions == implemented_directions() == ("fwd", "bwd", "splitkv")
    assert s.archs == ("sm90",)
    assert len(s.variants) == 3 * 6 * 2 * 2


def test_native_becomes_each_gpus_arch():
    assert select(arch="native", detect=lambda: ["8.0", "8.6"]).archs == ("sm80", "sm86")
    assert select(arch="native,sm90", detect=lambda: ["8.0"]).archs == ("sm80", "sm90")


@pytest.mark.parametrize("args, expected", [
    (["--hdim", "80"], ["80 is not a kernel head dim", "32, 64, 96, 128, 192, 256",
                        "run on the hdim-96 kernel, padded", "use --hdim 96"]),
    (["--hdim", "64,100"], ["100 is not a kernel head dim", "hdim-128", "--hdim 128"]),
    (["--hdim", "512"], ["512 is not a kernel head dim", "--hdim 256"]),
    (["--hdim", "sixty"], ["--hdim sixty", "not an integer", "32, 64, 96, 128, 192, 256"]),
    (["--hdim", ","], ["--hdim: empty list", "32, 64, 96, 128, 192, 256"]),
    (["--dtype", "fp8"], ["--dtype fp8", "fp16, bf16"]),
    (["--dtype", ""], ["--dtype: empty list", "fp16, bf16"]),
    (["--arch", "sm75"], ["--arch sm75", "sm80, sm86, sm89, sm90, native"]),
    (["--direction", "sideways"], ["--direction sideways", "fwd, bwd, splitkv"]),
    (["--causal", "maybe"], ["--causal maybe", "on, off, both"]),
    (["--debug", "--lineinfo"], ["--debug and --lineinfo contradict"]),
    (["--jobs", "0"], ["--jobs 0", "at least 1"]),
    (["--launcher", "no-such-launcher-xyz"], ["--launcher no-such-launcher-xyz", "not found on PATH"]),
    (["--config", "no-such-preset"], ["--config no-such-preset", "presets:", "ci-compile"]),
    (["--hdims", "64"], ["No such option", "--hdim"]),
])
def test_every_bad_value_is_one_line_exit_2_naming_it_and_the_valid_ones(args, expected, cache, no_gpu):
    arch = [] if "--arch" in args else ["--arch", "sm90"]
    result = run_cli(*args, *arch, "--dry-run")
    assert result.exit_code == 2, result.output
    assert result.stdout == ""
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("flashbuild: error: ")
    for text in expected:
        assert text in lines[0]
    assert "Traceback" not in result.output
    assert not cache.exists()


def test_native_without_a_gpu_says_which_archs_to_pass(cache, no_gpu):
    result = run_cli("--hdim", "64", "--dry-run")  # arch defaults to native
    assert result.exit_code == 2
    assert "--arch native: no GPU found" in result.stderr
    assert "pass --arch sm80|sm86|sm89|sm90" in result.stderr


def test_a_gpu_without_kernels_is_named():
    with pytest.raises(SelectionError, match=r"compute capability 7\.5 \(sm75\)"):
        select(arch="native", detect=lambda: ["7.5"])


def test_the_build_subcommand_can_be_named_or_left_out(cache):
    implicit = run_cli("--hdim", "64", "--dtype", "fp16", "--arch", "sm90", "--dry-run")
    explicit = run_cli("build", "--hdim", "64", "--dtype", "fp16", "--arch", "sm90", "--dry-run")
    assert implicit.exit_code == explicit.exit_code == 0
    assert implicit.stdout == explicit.stdout
    assert "fwd_hdim64_fp16_causal_sm90" in implicit.stdout


def test_presets_in_configs_are_all_valid():
    presets = sorted((REPO / "configs").glob("*.toml"))
    assert presets, "configs/ should hold presets"
    for preset in presets:
        assert select(config=preset.stem).variants  # loads by bare name and validates


def test_ci_compile_preset_is_one_tu_per_arch():
    names = [v.name for v in select(config="ci-compile").variants]
    assert names == ["fwd_hdim64_fp16_sm80", "fwd_hdim64_fp16_sm90"]


def test_flags_override_the_preset_and_the_preset_overrides_defaults(tmp_path):
    preset = tmp_path / "mine.toml"
    preset.write_text('[selection]\nhdim = [64]\ndtype = ["bf16"]\narch = ["sm80"]\ncausal = "on"\n')
    from_file = select(config=preset)
    assert (from_file.hdims, from_file.dtypes, from_file.archs, from_file.causal) == ((64,), ("bf16",), ("sm80",), (True,))
    overridden = select(config=str(preset), hdim="128", causal="off")
    assert overridden.hdims == (128,) and overridden.causal == (False,)
    assert overridden.dtypes == ("bf16",) and overridden.archs == ("sm80",)  # kept from the file
    assert overridden.directions == ("fwd", "bwd", "splitkv")  # not in the file: the default (every implemented one)


def test_preset_errors_name_the_key_and_the_valid_keys(tmp_path):
    preset = tmp_path / "typo.toml"
    preset.write_text('[selection]\nhdims = [64]\n')
    with pytest.raises(SelectionError, match=r"unknown key hdims.*valid keys: hdim, dtype, arch, direction, causal"):
        load_config(preset)
    preset.write_text('[selection]\nhdim = [80]\narch = ["sm90"]\n')
    with pytest.raises(SelectionError, match=r"typo.toml: hdim 80: .*set hdim = 96 in typo.toml"):
        select(config=preset)
    preset.write_text('[selection\n')
    with pytest.raises(SelectionError, match="not valid TOML"):
        load_config(preset)
    preset.write_text('[build]\njobs = 2\n')
    with pytest.raises(SelectionError, match=r"unknown table or key build"):
        load_config(preset)


def test_debug_and_lineinfo_contradict_but_each_alone_is_fine():
    assert CompileFlags(debug=True).label() == "debug"
    assert CompileFlags(lineinfo=True).label() == "lineinfo"
    with pytest.raises(SelectionError):
        CompileFlags(debug=True, lineinfo=True)


def test_python_api_takes_ints_lists_and_bool_causal():
    s = select(hdim=64, dtype="fp16", arch="sm80", direction="fwd", causal=True)
    assert [v.name for v in s.variants] == ["fwd_hdim64_fp16_causal_sm80"]
    both = select(hdim=64, dtype="fp16", arch="sm80", direction=["fwd", "bwd"], causal=True)
    assert [v.name for v in both.variants] == ["fwd_hdim64_fp16_causal_sm80", "bwd_hdim64_fp16_causal_sm80"]


def test_a_direction_no_family_implements_names_the_implemented_ones(monkeypatch):
    from flashbuild import variants
    monkeypatch.setattr(variants, "FAMILY_TABLE",
                        {key: fam for key, fam in variants.FAMILY_TABLE.items() if key[0] != "splitkv"})
    result = run_cli("--direction", "splitkv", "--hdim", "64", "--arch", "sm90", "--dry-run")
    assert result.exit_code == 2
    assert "direction splitkv: no kernel family implements it yet (implemented: fwd, bwd)" in result.output
    assert "--direction fwd,bwd" in result.output and "Traceback" not in result.output
