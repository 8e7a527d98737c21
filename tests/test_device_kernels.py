"""Kernels flash-attn 2's launchers pick by the device ([[switches.device]]): a slice whose archs reach
none of a kernel's devices specializes its launch to throw the slice's error, so the TU never
instantiates it; every other launch is untouched. Checked from the rendered files, and against every
release's real launch templates."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from flashbuild.errors import SelectionError
from flashbuild.sources import device_kernels, profile as profiles
from helpers import requires_nvcc
from test_releases import FA2_SDISTS, _real_fa2, _texts, layout_tree

SPECIALIZED = re.compile(r"inline void (run_flash_(?:fwd|bwd))<(\w+<[^>]*>), (true|false), (true|false)>")


def _specialized(text: str) -> set[tuple[str, str, bool, bool]]:
    return {(call, re.sub(r"\s+", "", traits), d == "true", c == "true") for call, traits, d, c in SPECIALIZED.findall(text)}


@pytest.mark.parametrize("arch, device, runs", [
    ("sm80", "8.0", True), ("sm80", "8.6", True), ("sm80", "8.9", True), ("sm80", "9.0", False),
    ("sm86", "8.0", False), ("sm86", "8.9", True), ("sm89", "8.6", False), ("sm90", "8.9", False),
    ("sm90", "9.0", True), ("sm90a", "9.0", True)])
def test_a_cubin_runs_on_its_major_version_from_its_minor_on(arch, device, runs):
    assert device_kernels.reaches(arch, device) is runs


@pytest.fixture
def tree(tmp_path):
    return layout_tree(tmp_path, "flash-attn-2@2.8", "2.8.3")


def test_an_sm90_slice_compiles_out_the_sm8x_tiles_of_the_hdim_128_forward(tree):
    plan, texts = _texts(tree, hdim=128, direction="fwd,bwd", causal="on", features="none")
    fwd, bwd = _specialized(texts["flashbuild_devices_fwd.h"]), _specialized(texts["flashbuild_devices_bwd.h"])
    half = "cutlass::half_t"
    assert fwd == {("run_flash_fwd", f"Flash_fwd_kernel_traits<128,128,32,4,false,false,{half}>", False, False),
                   ("run_flash_fwd", f"Flash_fwd_kernel_traits<128,64,64,4,false,false,{half}>", False, True)}
    assert bwd == {("run_flash_bwd", f"Flash_bwd_kernel_traits<128,64,64,8,4,2,2,true,false,{half}>", d, c)
                   for d in (False, True) for c in (False, True)}
    # the 128 x 64 forward tile, which an sm90 device runs, is never specialized; dropout's 128 x 32 launch neither
    assert not any("128,64,4" in t for _, t, _, _ in fwd) and not any(d for _, _, d, _ in fwd)
    text = texts["flashbuild_devices_fwd.h"]
    assert "compute capability 8.6, 8.7 or 8.9" in text and "--arch sm90,sm86" in text
    assert "flashbuild_switch::miss(" in text
    for unit in plan.units:  # after the launch template, before the TU's own specialization
        if unit.source is None and unit.direction in ("fwd", "bwd"):
            tu = texts[f"{unit.name}.cu"]
            at = tu.find(f'#include "flashbuild_devices_{unit.direction}.h"')
            assert tu.find("_launch_template.h") < at < tu.find(f"run_mha_{unit.direction}_<"), unit.name


@pytest.mark.parametrize("arch, forward_tiles", [
    ("sm80", set()),                                   # an sm_80 cubin runs on 8.0 and every 8.x: all kept
    ("sm86", {"Flash_fwd_kernel_traits<128,128,64,4,false,false,cutlass::half_t>"}),   # the sm80/sm90 tile out
    ("sm86,sm90", set()),
    ("sm90", {"Flash_fwd_kernel_traits<128,128,32,4,false,false,cutlass::half_t>",
              "Flash_fwd_kernel_traits<128,64,64,4,false,false,cutlass::half_t>"})])
def test_what_a_slice_compiles_out_follows_the_devices_its_archs_reach(tree, arch, forward_tiles):
    _, texts = _texts(tree, hdim=128, arch=arch, direction="fwd", causal="both", features="none")
    assert {t for _, t, _, _ in _specialized(texts["flashbuild_devices_fwd.h"])} == forward_tiles


def test_the_default_build_of_every_arch_compiles_every_tile(tree):
    _, texts = _texts(tree, hdim="32,64,96,128,192,256", arch="sm80,sm86,sm89,sm90", direction="fwd,bwd")
    assert not _specialized(texts["flashbuild_devices_fwd.h"] + texts["flashbuild_devices_bwd.h"])


@pytest.mark.parametrize("entry, key", [
    ({"call": "run_flash_fwd", "traits": "X<{hdim}, {T}>", "hdim": 128, "devices": ["8.6"]}, "launcher"),
    ({"launcher": "f", "call": "launch", "traits": "X<{hdim}, {T}>", "hdim": 128, "devices": ["8.6"]}, "call"),
    ({"launcher": "f", "call": "run_flash_fwd", "traits": "X<128, T>", "hdim": 128, "devices": ["8.6"]}, "traits"),
    ({"launcher": "f", "call": "run_flash_fwd", "traits": "X<{hdim}, {T}>); evil(<", "hdim": 128, "devices": ["8.6"]},
     "traits"),
    ({"launcher": "f", "call": "run_flash_fwd", "traits": "X<{hdim}, {T}>", "hdim": 100, "devices": ["8.6"]}, "hdim"),
    ({"launcher": "f", "call": "run_flash_fwd", "traits": "X<{hdim}, {T}>", "hdim": 128, "devices": ["sm86"]}, "devices"),
    ({"launcher": "f", "call": "run_flash_fwd", "traits": "X<{hdim}, {T}>", "hdim": 128, "devices": []}, "devices"),
    ({"launcher": "f", "call": "run_flash_fwd", "traits": "X<{hdim}, {T}>", "hdim": 128, "devices": ["8.6"],
      "dropout": "no"}, "dropout"),
    ({"launcher": "f", "call": "run_flash_fwd", "traits": "X<{hdim}, {T}>", "hdim": 128, "devices": ["8.6"],
      "when": 1}, "when"),
])
def test_a_bad_device_entry_is_the_profiles_error_naming_the_key(entry, key):
    with pytest.raises(SelectionError, match=rf"switches\.device\[0\]\.{key}"):
        device_kernels.parse(Path("p.toml"), [entry], (64, 128))


LAUNCHER = re.compile(r"void (run_mha_(fwd|bwd)_hdim(\d+))\s*\(")
DEVICE_QUERY = re.compile(r"is_sm8x|max_smem_per_block|max_smem_per_sm")


def _launchers(tree: Path) -> dict[str, str]:
    """Each hdim launcher of the tree's launch templates -> its body (to the next line that is a lone '}')."""
    out = {}
    for header in sorted((tree / "csrc/flash_attn/src").glob("flash_*_launch_template.h")):
        text = header.read_text()
        for found in LAUNCHER.finditer(text):
            end = text.find("\n}", found.end())
            out[found.group(1)] = re.sub(r"\s+", " ", text[found.end():end])
    return out


@pytest.mark.parametrize("version", sorted(FA2_SDISTS))
def test_each_release_launches_every_device_kernel_it_names_and_names_each_device_choice(version):
    tree = _real_fa2(version)
    profile = profiles.load(f"flash-attn-2@{FA2_SDISTS[version]}")
    launchers = _launchers(tree)
    for kernel in profile.switches.devices:
        body = launchers.get(kernel.launcher)
        assert body is not None, (version, kernel.launcher)
        spelled = re.sub(r"\s+", " ", kernel.tree_spelling())
        assert spelled in body, (version, kernel.launcher, spelled)
        # the launch's template arguments after the traits are the ones the specialization spells
        for launch in re.finditer(re.escape(spelled) + r"> ?((?:, ?\w+ ?)+)> ?\(params", body):
            assert len(launch.group(1).split(",")) - 1 == len(kernel.args), (version, kernel.launcher, launch.group(0))
    named = {k.launcher for k in profile.switches.devices}
    for name, body in launchers.items():
        if int(name.rsplit("hdim", 1)[1]) in profile.hdims and DEVICE_QUERY.search(body):
            assert name in named, f"{version}: {name} chooses by the device, and no [[switches.device]] names it"


@pytest.mark.compile
@requires_nvcc
def test_the_hdim_128_causal_forward_tu_of_an_sm90_slice_holds_one_kernel(tmp_path):
    """flash-attn 2.8.3's run_mha_fwd_hdim128 launches the sm8x 64 x 64 tile under a runtime `if (is_sm8x)`;
    an sm90 slice specializes that launch away: the object holds the 128 x 64 kernel alone."""
    tree = _real_fa2("2.8.3")
    args = ["--source", str(tree), "--hdim", "128", "--dtype", "fp16", "--arch", "sm90", "--direction", "fwd",
            "--causal", "on", "--features", "none", "--compile-only", "--jobs", "1", "--build-dir", str(tmp_path / "b")]
    process = subprocess.run([sys.executable, "-m", "flashbuild", *args], capture_output=True, text=True,
                             env={**os.environ, "FLASHBUILD_CACHE_DIR": str(tmp_path / "cache")}, timeout=1800)
    assert process.returncode == 0, process.stderr[-3000:]
    names = subprocess.run(["nm", str(tmp_path / "b/obj/flash_fwd_hdim128_fp16_causal_sm80.o")], capture_output=True,
                           text=True, check=True).stdout
    # each __global__ instantiation has one host stub function (a text symbol)
    stubs = {line.split()[-1] for line in names.splitlines() if len(line.split()) == 3 and line.split()[1] in "tT"
             and "__device_stub__" in line and not line.endswith(".cold")}
    assert len(stubs) == 1 and "Flash_fwd_kernel_traitsILi128ELi128ELi64ELi4E" in stubs.pop()


def test_device_entries_without_the_header_that_renders_them_are_the_profiles_error(tmp_path):
    text = (profiles.profiles_dir() / "flash-attn-2.toml").read_text()
    cut = text.replace('file = "flashbuild_devices_bwd.h"', 'file = "something_else.h"')
    assert cut != text
    path = tmp_path / "fa2.toml"
    path.write_text(cut)
    with pytest.raises(SelectionError, match=r"switches\.device.*flashbuild_devices_bwd\.h"):
        profiles.load(str(path))
