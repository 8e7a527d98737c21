"""Selection parsing: values, defaults, presets, override order, and every user error (one line, exit 2)."""

from __future__ import annotations

import re

import pytest

from flashbuild import env
from flashbuild.errors import SelectionError
from flashbuild.selection import families
from flashbuild.selection.variants import (FEATURES, CompileFlags, HEAD_DIMS, Variant, implemented_directions, load_config,
                                 select)
from helpers import REPO, run_cli


def test_variant_names_follow_the_canonical_format():
    assert Variant("fwd", 128, "bf16", True, "sm90").name == "fwd_hdim128_bf16_causal_sm90"
    assert Variant("fwd", 64, "fp16", False, "sm80").name == "fwd_hdim64_fp16_sm80"


def test_selection_is_the_cross_product_in_canonical_order():
    s = select(hdim="128,64", dtype="bf16,fp16", arch="sm90", direction="bwd,fwd", causal="both", features=[])
    names = [v.name for v in s.variants]
    assert len(names) == 2 * 2 * 2 * 2
    assert names[:4] == ["fwd_hdim64_fp16_sm90", "fwd_hdim64_fp16_causal_sm90",
                         "fwd_hdim64_bf16_sm90", "fwd_hdim64_bf16_causal_sm90"]
    assert names[8] == "bwd_hdim64_fp16_sm90"  # directions first, then head dims
    assert s == select(hdim=[64, 128], dtype=["fp16", "bf16"], arch=["sm90"], direction=["fwd", "bwd"],
                       causal="both", features="none")


def test_features_add_one_feature_variant_right_after_each_plain_one():
    s = select(hdim="128,64", dtype="fp16", arch="sm80,sm90", direction="bwd,fwd", causal="both")
    assert s.features == FEATURES == ("local", "softcap")  # the default: every feature
    names = [v.name for v in s.variants]
    assert len(names) == 2 * (2 * 2 * 2 * 2)
    assert names[:4] == ["fwd_hdim64_fp16_sm80", "fwd_hdim64_fp16_sm80_local_softcap",
                         "fwd_hdim64_fp16_sm90", "fwd_hdim64_fp16_sm90_local_softcap"]
    plain = [v for v in s.variants if not v.features]
    assert [v.name for v in plain] == [v.name for v in select(hdim="64,128", dtype="fp16", arch="sm80,sm90",
                                                              direction="fwd,bwd", causal="both", features=[]).variants]
    assert all(v.features == ("local", "softcap") and v.features_mask == 3 for v in s.variants if v.features)
    one = select(hdim=64, dtype="fp16", arch="sm90", direction="fwd", causal="on", features=["softcap"])
    assert [v.name for v in one.variants] == ["fwd_hdim64_fp16_causal_sm90", "fwd_hdim64_fp16_causal_sm90_softcap"]
    assert [v.features_mask for v in one.variants] == [0, 2]


@pytest.mark.parametrize("variant, name, mask, described", [
    (Variant("fwd", 64, "fp16", True, "sm90", ("local", "softcap")), "fwd_hdim64_fp16_causal_sm90_local_softcap", 3,
     "fwd, hdim 64, fp16, causal, sm90, with local+softcap"),
    (Variant("bwd", 128, "bf16", False, "sm80", ("local",)), "bwd_hdim128_bf16_sm80_local", 1,
     "bwd, hdim 128, bf16, not causal, sm80, with local"),
    (Variant("splitkv", 256, "fp16", False, "sm86", ("softcap",)), "splitkv_hdim256_fp16_sm86_softcap", 2,
     "splitkv, hdim 256, fp16, not causal, sm86, with softcap"),
    (Variant("fwd", 32, "bf16", True, "sm89"), "fwd_hdim32_bf16_causal_sm89", 0, "fwd, hdim 32, bf16, causal, sm89"),
])
def test_feature_variant_names_masks_and_the_round_trip(variant, name, mask, described):
    assert variant.name == name and variant.features_mask == mask and variant.describe() == described
    assert Variant.from_name(name) == variant


@pytest.mark.parametrize("name", ["fwd_hdim64_fp16_sm90_softcap_local", "fwd_hdim64_fp16_sm90_local_local",
                                  "fwd_hdim64_fp16_sm90_window", "fwd_hdim64_fp16_local_sm90"])
def test_from_name_refuses_features_out_of_order_or_unknown(name):
    with pytest.raises(ValueError, match="not a variant name"):
        Variant.from_name(name)


def test_a_variant_refuses_unknown_or_unordered_features():
    for features in (("softcap", "local"), ("window",), ("local", "local")):
        with pytest.raises(ValueError, match="expected distinct names of local, softcap"):
            Variant("fwd", 64, "fp16", False, "sm90", features)


@pytest.mark.parametrize("value, expected", [
    (None, ("local", "softcap")), ([], ()), ("none", ()), (["none"], ()), ("local", ("local",)),
    (["softcap"], ("softcap",)), ("softcap, local", ("local", "softcap")), (("LOCAL", "softcap"), ("local", "softcap")),
])
def test_load_takes_features_as_a_list_a_string_or_none(value, expected):
    s = select(hdim=64, dtype="fp16", arch="sm90", direction="fwd", features=value)
    assert s.features == expected
    assert select(**s.as_kwargs()) == s  # as_kwargs selects the same, features included


@pytest.mark.parametrize("value, expected", [
    ("lokal", ['features=lokal: not a feature (valid: local, softcap, or none)',
               'pass features=["local", "softcap"] (the default), a subset of them, or features=[] (none)']),
    (["local", "window"], ["features=window: not a feature"]),
    ("", ["features: empty string"]),
    (3, ["features=3: expected a list of feature names"]),
    ([1], ["features=1: not a feature name"]),
])
def test_bad_features_name_the_valid_ones_and_the_fix(value, expected):
    with pytest.raises(SelectionError) as info:
        select(hdim=64, dtype="fp16", arch="sm90", features=value, keywords=True)  # load()'s words
    for text in expected:
        assert text in str(info.value)


def test_no_local_and_no_softcap_flags_compile_features_out(cache):
    both = run_cli("--hdim", "64", "--dtype", "fp16", "--arch", "sm90", "--direction", "fwd", "--dry-run")
    assert "compile 8 kernel TUs:" in both.stdout and "fwd_hdim64_fp16_causal_sm90_local_softcap" in both.stdout
    assert "features   local, softcap: each plain variant has a *_local_softcap variant" in both.stdout
    narrowed = run_cli("--hdim", "64", "--dtype", "fp16", "--arch", "sm90", "--direction", "fwd", "--no-local",
                       "--no-softcap", "--dry-run")
    assert narrowed.exit_code == 0, narrowed.output
    assert "compile 4 kernel TUs:" in narrowed.stdout and "sm90_local" not in narrowed.stdout
    assert "x features none (4 kernel TUs)" in narrowed.stdout  # 2 Hopper launch TUs, 2 kernel TUs
    assert "features   none: calls with window_size or softcap raise VariantNotBuiltError" in narrowed.stdout
    # sm90's Hopper backward (head dims 64-256) holds the deterministic mode in its plain kernel; head dim 32
    # and sm80 hold it in the feature kernel only.
    backward = run_cli("--hdim", "64", "--dtype", "fp16", "--arch", "sm90", "--direction", "bwd", "--no-local",
                       "--no-softcap", "--dry-run")
    assert "features   none: calls with window_size or softcap raise VariantNotBuiltError" in backward.stdout, \
        backward.output
    mixed = run_cli("--hdim", "32,64", "--dtype", "fp16", "--arch", "sm90", "--direction", "bwd", "--no-local",
                    "--no-softcap", "--dry-run")
    assert "features   none: calls with window_size or softcap, and deterministic backward calls on the Ampere " \
           "path, raise VariantNotBuiltError" in mixed.stdout, mixed.output
    ampere = run_cli("--hdim", "64", "--dtype", "fp16", "--arch", "sm80", "--direction", "bwd", "--no-local",
                     "--no-softcap", "--dry-run")
    assert "features   none: calls with window_size or softcap, and deterministic backward calls, raise " \
           "VariantNotBuiltError" in ampere.stdout, ampere.output
    softcap = run_cli("--hdim", "64", "--dtype", "fp16", "--arch", "sm90", "--direction", "fwd", "--no-local",
                      "--dry-run")
    assert "fwd_hdim64_fp16_sm90_softcap " in softcap.stdout and "sm90_local" not in softcap.stdout
    for command in ("test", "bench", "inspect", "watch"):
        help_text = run_cli(command, "--help").stdout
        assert "--no-local" in help_text and "--no-softcap" in help_text, command


def test_as_cli_names_each_feature_that_is_off():
    from flashbuild.pipeline.builder import parse_request

    for flags, tail in [((), "--causal both"), (("no_local",), "--causal both --no-local"),
                        (("no_local", "no_softcap"), "--causal both --no-local --no-softcap")]:
        selection, _ = parse_request(hdim=64, dtype="fp16", arch="sm90", **{f: True for f in flags})
        assert selection.as_cli().endswith(tail)
        again, _ = parse_request(**{k.replace("-", "_"): v for k, v in _cli_kwargs(selection.as_cli()).items()})
        assert again == selection


def _cli_kwargs(text: str) -> dict:
    """--hdim 64 --no-local ... -> {"hdim": "64", "no_local": True, ...}"""
    words, kwargs = text.split(), {}
    for i, word in enumerate(words):
        if word.startswith("--"):
            value = words[i + 1] if i + 1 < len(words) and not words[i + 1].startswith("--") else True
            kwargs[word[2:]] = value
    return kwargs


def test_flags_remove_features_from_the_preset(tmp_path):
    preset = tmp_path / "mine.toml"
    preset.write_text('[selection]\nhdim = [64]\narch = ["sm90"]\ndirection = ["fwd"]\nfeatures = ["softcap"]\n')
    assert select(config=preset).features == ("softcap",)
    assert select(config=preset, without=("softcap",)).features == ()
    assert select(config=preset, without=("local",)).features == ("softcap",)
    assert select(config=preset, features=["local"]).features == ("local",)  # an explicit value replaces it
    preset.write_text('[selection]\nhdim = [64]\narch = ["sm90"]\nfeatures = []\n')
    assert select(config=preset).features == ()
    preset.write_text('[selection]\nhdim = [64]\narch = ["sm90"]\nfeatures = ["locall"]\n')
    with pytest.raises(SelectionError, match=r'mine.toml: features locall: not a feature .*'
                                             r'set features = \["local", "softcap"\] \(the default\), a subset of them, '
                                             r'or features = \[\] \(none\) in mine.toml'):
        select(config=preset)


def test_defaults_are_every_head_dim_both_dtypes_causal_both_and_the_native_arch(monkeypatch):
    monkeypatch.setattr(env, "gpu_compute_caps", lambda: ["9.0"])
    s = select()
    assert s.hdims == HEAD_DIMS
    assert s.dtypes == ("fp16", "bf16")
    assert s.causal == (False, True)
    assert s.directions == implemented_directions() == ("fwd", "bwd", "splitkv")
    assert s.archs == ("sm90",)
    assert s.features == ("local", "softcap")
    assert len(s.variants) == 3 * 6 * 2 * 2 * 2  # each plain variant and its local+softcap variant


def test_native_becomes_each_gpus_arch():
    assert select(hdim=64, arch="native", detect=lambda: ["8.0", "8.6"]).archs == ("sm80", "sm86")
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
    # The plan's jobs line reads free memory, which moves between the two calls.
    assert re.sub(r"[0-9.]+ GiB", "N GiB", implicit.stdout) == re.sub(r"[0-9.]+ GiB", "N GiB", explicit.stdout)
    assert "fwd_hdim64_fp16_causal_sm90" in implicit.stdout


def test_presets_in_configs_are_all_valid():
    from flashbuild.selection.variants import preset_names

    presets = preset_names()
    assert presets and "ci" not in presets, "configs/ should hold presets (and ci.toml is a CI matrix)"
    for preset in presets:
        assert select(config=preset).variants  # loads by bare name and validates


def test_ci_compile_preset_is_one_tu_per_arch():
    names = [v.name for v in select(config="ci-compile").variants]
    assert names == ["fwd_hdim64_fp16_sm80", "fwd_hdim64_fp16_sm90"]  # features = []: CI compiles plain TUs


def test_preset_descriptions_count_their_tus():
    import re

    from flashbuild.pipeline.plan import selection_units
    from flashbuild.selection.variants import tomllib

    for preset in sorted((REPO / "configs").glob("*.toml")):
        description = tomllib.loads(preset.read_text())["description"]
        count = re.search(r"\((\d+) TUs", description)
        if count:
            assert int(count.group(1)) == len(selection_units(select(config=preset.stem))), preset.name


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
    with pytest.raises(SelectionError, match=r"unknown key hdims.*valid keys: hdim, dtype, arch, direction, causal, "
                                             r"features"):
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
    s = select(hdim=64, dtype="fp16", arch="sm80", direction="fwd", causal=True, features=[])
    assert [v.name for v in s.variants] == ["fwd_hdim64_fp16_causal_sm80"]
    both = select(hdim=64, dtype="fp16", arch="sm80", direction=["fwd", "bwd"], causal=True, features="local")
    assert [v.name for v in both.variants] == ["fwd_hdim64_fp16_causal_sm80", "fwd_hdim64_fp16_causal_sm80_local",
                                              "bwd_hdim64_fp16_causal_sm80", "bwd_hdim64_fp16_causal_sm80_local"]


def test_a_direction_no_family_implements_names_the_implemented_ones(monkeypatch):
    monkeypatch.setattr(families, "FAMILY_TABLE",
                        {key: fam for key, fam in families.FAMILY_TABLE.items() if key[0] != "splitkv"})
    result = run_cli("--direction", "splitkv", "--hdim", "64", "--arch", "sm90", "--dry-run")
    assert result.exit_code == 2
    assert "direction splitkv: no kernel family implements it yet (implemented: fwd, bwd)" in result.output
    assert "--direction fwd,bwd" in result.output and "Traceback" not in result.output


def test_backward_of_large_head_dims_is_selectable_for_sm86_and_sm89():
    """Their 32-row backward tiles fit 99 KB of shared memory (test_compile.py compiles them)."""
    for arch in ("sm86", "sm89"):
        selection = select(hdim="64,128,192,256", dtype="fp16", arch=arch, direction="fwd,bwd")
        assert {v.name for v in selection.variants if v.direction == "bwd" and v.hdim >= 192} == {
            f"bwd_hdim{h}_fp16{c}_{arch}{f}" for h in (192, 256) for c in ("", "_causal")
            for f in ("", "_local_softcap")}


@pytest.mark.parametrize("args, expected, unexpected", [
    (["--hdim", "²"], ["--hdim ²: not an integer head dim"], []),                  # int() would take it
    (["--hdim", "٦٤"], ["--hdim ٦٤: not an integer head dim"], []),
    (["--hdim", "-1"], ["--hdim -1: a head dim must be a positive integer", "use --hdim 64"], ["not an integer"]),
    (["--hdim", "0"], ["--hdim 0: a head dim must be a positive integer"], []),
    (["--arch", "sm_90"], ["--arch sm_90: not a valid value", "use --arch sm90"], ["use --arch sm80"]),
    (["--arch", "90"], ["use --arch sm90"], []),
    (["--arch", "sm_90a"], ["use --arch sm90"], []),
    (["--arch", "sm87"], ["use --arch sm86"], []),                                  # sm_86 code runs on 8.7
    (["--dtype", "bfloat16"], ["use --dtype bf16"], []),
    (["--config", "x.toml"], ["--config x.toml: no such file", "use --config ci-compile"], ["x.toml.toml"]),
    (["--config", "ci-compile.toml"], ["use --config ci-compile"], ["ci-compile.toml.toml"]),
    (["--config", "dev-hdim64"], ["no preset dev-hdim64", "use --config dev-hdim64-sm90"], []),
])
def test_odd_selections_name_the_value_and_the_closest_valid_one(args, expected, unexpected, cache, no_gpu, tmp_path,
                                                                  monkeypatch):
    monkeypatch.chdir(tmp_path)
    arch = [] if "--arch" in args else ["--arch", "sm90"]
    result = run_cli(*args, *arch, "--dry-run")
    assert result.exit_code == 2, result.output
    line = result.stderr.strip()
    assert line.startswith("flashbuild: error: ") and "\n" not in line and "Traceback" not in result.output
    for text in expected:
        assert text in line
    for text in unexpected:
        assert text not in line


def test_a_fix_that_holds_a_value_is_shell_quoted():
    from flashbuild.selection.variants import _use
    assert _use("--config", "my presets/a b.toml") == "use --config 'my presets/a b.toml'"
    assert _use("--hdim", 96) == "use --hdim 96"


@pytest.mark.parametrize("content, expected", [
    ("selection = 5\n", "selection = 5 is not a table"),
    ('description = 5\n[selection]\nhdim = [64]\n', "description = 5 is not a string"),
    ("[selection]\nhdim = 64.5\n", "hdim 64.5: expected a head dim (an integer) or a list of them, not float"),
    ("[selection]\nhdim = {a = 1}\n", "not dict"),
    ("[selection]\nhdim = [[64]]\n", "not list"),
    ("[selection]\ncausal = 1\n", "causal 1: expected on, off or both (or a bool), not int"),
    ('[selection]\narch = 90\n', 'set arch = "sm90" in typo.toml'),
])
def test_preset_values_of_the_wrong_type_are_named_with_the_file(tmp_path, content, expected):
    preset = tmp_path / "typo.toml"
    preset.write_text(content)
    with pytest.raises(SelectionError, match=re.escape(expected)):
        select(config=preset, detect=lambda: ["9.0"])


def test_a_preset_that_is_not_a_readable_text_file_is_named(tmp_path):
    (tmp_path / "bin.toml").write_bytes(b"\x00\xff\xfe")
    with pytest.raises(SelectionError, match="bin.toml: not a text file"):
        load_config(tmp_path / "bin.toml")
    (tmp_path / "dir.toml").mkdir()
    with pytest.raises(SelectionError, match="dir.toml is a directory, not a TOML file"):
        load_config(tmp_path / "dir.toml")
    (tmp_path / "link.toml").symlink_to(tmp_path / "gone.toml")
    with pytest.raises(SelectionError, match="link.toml is a broken link"):
        load_config(tmp_path / "link.toml")


@pytest.mark.parametrize("kwargs, said, fix", [
    (dict(hdim=80), "hdim=80:", "pass hdim=96"),
    (dict(dtype="fp8"), "dtype=fp8:", "pass dtype='fp16'"),
    (dict(arch="sm75"), "arch=sm75:", "pass arch='sm80'"),
    (dict(direction="fwdx"), "direction=fwdx:", "pass direction='fwd'"),
])
def test_load_arguments_are_named_as_keywords_not_flags(kwargs, said, fix):
    """load()/build() take keywords: their errors say hdim=80 and pass hdim=96, not the CLI's --hdim."""
    args = {"hdim": 64, "dtype": "fp16", "arch": "sm90", **kwargs}
    with pytest.raises(SelectionError) as info:
        select(**args, keywords=True)
    assert str(info.value).startswith(said) and fix in str(info.value) and "--" not in str(info.value), info.value
    with pytest.raises(SelectionError, match="^--"):  # the CLI's words stay the CLI's
        select(**args)


def test_load_says_its_keywords():
    import flashbuild
    with pytest.raises(SelectionError, match=r"^hdim=80: .*pass hdim=96"):
        flashbuild.load(hdim=80, dtype="fp16", arch="sm80")
