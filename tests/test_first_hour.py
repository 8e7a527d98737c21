"""A newcomer's first hour on a machine without a GPU: the main job's last line says what works here,
`flashbuild --help` shows the build options, `doctor` flags a torch / nvcc CUDA major mismatch, and
the editable install imports from the folder that holds the checkout."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from flashbuild import env
from flashbuild.pipeline import builder
from helpers import REPO, run_cli

MAIN_JOB = ["--hdim", "64", "--dtype", "fp16", "--arch", "sm90"]


# ---------------------------------------------------------------- the end of the main job

@pytest.fixture
def built(monkeypatch, cache):
    """The main job 'built' (builder.build stood in for) with a CUDA torch: what the CLI prints after."""

    def fake_build(selection, options):
        names = [v.name for v in selection.variants]
        return builder.BuildResult(build_dir=cache / "k", extension=cache / "k" / "_flashbuild_0123abcd.so",
                                   manifest={"variants": names}, timings={}, key="k-0123abcd",
                                   module_name="_flashbuild_0123abcd")

    monkeypatch.setattr(builder, "build", fake_build)
    monkeypatch.setattr(env, "torch_info", lambda: env.TorchInfo("2.14.1+cu130", "13.0", Path("/t")))


def test_without_a_gpu_the_last_line_says_what_works_here_instead_of_load_it(built, monkeypatch):
    monkeypatch.setattr(env, "gpus", lambda: [])
    result = run_cli(*MAIN_JOB)
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    assert lines[0].startswith("extension  ") and lines[2].startswith("holds      12 variants: ")
    assert len(lines) == 4 and not any(line.startswith("load it") for line in lines)
    last = lines[3]
    assert last.startswith("no GPU     nvidia-smi reports no GPU here, so the extension cannot run on this machine")
    selection = "--hdim 64 --dtype fp16 --arch sm90"
    assert f"`flashbuild inspect {selection}" in last and "--compile-only builds" in last
    assert f"`flashbuild test {selection}" in last and "need a GPU" in last


def test_a_gpu_that_runs_none_of_the_builds_archs_is_named(built, monkeypatch):
    monkeypatch.setattr(env, "gpus", lambda: [("NVIDIA A100-SXM4-80GB", "8.0")])
    last = run_cli(*MAIN_JOB).stdout.splitlines()[-1]
    assert last.startswith("no GPU     this machine's GPUs (NVIDIA A100-SXM4-80GB: sm80) run none of the build's "
                           "archs (sm90)")


@pytest.mark.parametrize("gpu, arch", [(("NVIDIA H200", "9.0"), "sm90"), (("NVIDIA A10", "8.6"), "sm80")])
def test_a_gpu_that_runs_the_build_gets_the_load_line(built, monkeypatch, gpu, arch):
    monkeypatch.setattr(env, "gpus", lambda: [gpu])
    last = run_cli("--hdim", "64", "--dtype", "fp16", "--arch", arch).stdout.splitlines()[-1]
    assert last.startswith("load it    python3 -c 'import flashbuild; m = flashbuild.load(hdim=64")


# ---------------------------------------------------------------- --help

@pytest.mark.parametrize("args", [["--help"], ["-h"], []])
def test_the_top_level_help_shows_the_main_jobs_build_options(args):
    result = run_cli(*args)
    assert result.exit_code == 0, result.output
    text = result.stdout
    assert "Build options (flashbuild [build] OPTIONS: the default command):" in text
    build_options = text[text.index("Build options"):text.index("Commands:")]
    for option in ("--hdim", "--dtype", "--arch", "--direction", "--causal", "--no-local", "--features",
                   "--config", "--source", "--dry-run", "--compile-only", "--jobs", "--build-dir", "--launcher"):
        assert f"  {option}" in build_options or f", {option}" in build_options, option
    assert "--help" not in build_options  # the group's own, listed once above
    assert "flashbuild --hdim 64 --dtype fp16 --arch sm90" in text and "flash-attn==2.8.3" in text
    for command in ("build", "test", "bench", "inspect", "doctor"):
        assert f"\n  {command} " in text[text.index("Commands:"):]


# ---------------------------------------------------------------- doctor: torch's CUDA against nvcc's

def nvcc_reporting(tmp_path: Path, release: str) -> Path:
    home = tmp_path / f"cuda-{release}"
    (home / "bin").mkdir(parents=True)
    nvcc = home / "bin" / "nvcc"
    nvcc.write_text(f"#!/bin/sh\necho 'Cuda compilation tools, release {release}, V{release}.93'\n")
    nvcc.chmod(0o755)
    return home


def doctor_line(output: str, name: str) -> str:
    found = [line for line in output.splitlines() if line.split()[1:2] == [name]]
    assert len(found) <= 1, output
    return found[0] if found else ""


@pytest.mark.parametrize("torch_cuda, nvcc, state", [("12.8", "13.0", "WRONG"), ("13.0", "12.9", "WRONG"),
                                                      ("13.0", "13.2", "OK"), ("12.6", "12.8", "OK")])
def test_doctor_flags_a_torch_cuda_and_nvcc_major_mismatch(tmp_path, monkeypatch, cache, torch_cuda, nvcc, state):
    monkeypatch.setenv("CUDA_HOME", str(nvcc_reporting(tmp_path, nvcc)))
    monkeypatch.setattr(env, "torch_info", lambda: env.TorchInfo(f"2.9.0+cu{torch_cuda.replace('.', '')}",
                                                                 torch_cuda, Path("/t")))
    result = run_cli("doctor")
    line = doctor_line(result.stdout, "CUDA")
    assert line.startswith(f"{state} "), result.stdout
    if state == "OK":
        assert f"(CUDA {torch_cuda}) and nvcc (CUDA {nvcc}.93): the same major version" in line
        return
    major, minor = nvcc.split(".")
    assert f"is built for CUDA {torch_cuda}, nvcc {tmp_path / f'cuda-{nvcc}' / 'bin' / 'nvcc'} is CUDA {nvcc}.93: " \
           f"a major-version mismatch" in line
    assert f"install the torch build for CUDA {major} (e.g. `pip install torch --index-url " \
           f"https://download.pytorch.org/whl/cu{major}{minor}`), or point CUDA_HOME at a CUDA " \
           f"{torch_cuda.split('.')[0]} toolkit" in line


def test_doctor_compares_nothing_without_a_cuda_torch(monkeypatch, cache):
    monkeypatch.setattr(env, "torch_info", lambda: env.TorchInfo("2.13.0+cpu", None, Path("/t")))
    assert doctor_line(run_cli("doctor").stdout, "CUDA") == ""


# ---------------------------------------------------------------- the editable install, from the clone's parent

def test_the_editable_install_imports_the_package_from_the_folder_holding_the_checkout(tmp_path):
    """`pip install -e .` in a checkout named flashbuild, then Python started in the folder that holds
    it: the current directory comes first on sys.path, where `flashbuild/` (the checkout, no
    __init__.py) reads as a namespace package unless the install's path entry is a plain one (which
    Python prefers to a namespace portion). Here the editable wheel pip would install is built with
    the same backend hook (PEP 660) and its .pth added as site would, with nothing else installed."""
    build_meta = pytest.importorskip("setuptools.build_meta", reason="setuptools builds the editable wheel")
    assert build_meta  # the hook runs in a child process, as pip runs it
    checkout = tmp_path / "flashbuild"
    checkout.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(REPO / name, checkout / name)
    shutil.copytree(REPO / "flashbuild", checkout / "flashbuild", ignore=shutil.ignore_patterns("__pycache__"))
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    made = subprocess.run([sys.executable, "-c", "import sys; from setuptools import build_meta; "
                           f"print(build_meta.build_editable({str(wheels)!r}))"],
                          cwd=checkout, capture_output=True, text=True, timeout=300)
    assert made.returncode == 0, made.stderr[-2000:]
    site = tmp_path / "site"
    with zipfile.ZipFile(wheels / made.stdout.strip().splitlines()[-1]) as wheel:
        pths = [n for n in wheel.namelist() if n.endswith(".pth")]
        assert len(pths) == 1, wheel.namelist()
        wheel.extractall(site, members=[n for n in wheel.namelist() if "/" not in n])  # the top-level files
    # -S: no site-packages (the flashbuild this test runs from must not answer), then the wheel's .pth alone.
    probe = ("import importlib.util, site, sys; site.addsitedir(sys.argv[1]); import flashbuild; "
             "print(flashbuild.__file__, callable(getattr(flashbuild, 'load', None)), "
             "importlib.util.find_spec('flashbuild.__main__') is not None)")
    environ = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "FLASHBUILD_ROOT")}
    ran = subprocess.run([sys.executable, "-S", "-c", probe, str(site)], cwd=tmp_path, capture_output=True,
                         text=True, env=environ, timeout=120)
    assert ran.returncode == 0, ran.stderr[-2000:]
    assert ran.stdout.split() == [str(checkout / "flashbuild" / "__init__.py"), "True", "True"], ran.stdout


# ---------------------------------------------------------------- CI runs the README's commands

@pytest.mark.parametrize("block, command", [("install", "pip install -e .\n"), ("test", "python3 -m pytest -q tests\n")])
def test_ci_runs_the_readmes_install_and_test_blocks_as_written(block, command):
    """.ci/run reads the blocks marked in README.md, so what CI runs is what a newcomer pastes."""
    function = subprocess.run(["sed", "-n", "/^readme_block()/,/^}/p", str(REPO / ".ci" / "run")],
                              capture_output=True, text=True, check=True).stdout
    assert function.startswith("readme_block()")
    ran = subprocess.run(["bash", "-c", f'python={sys.executable}\n{function}\nreadme_block {block}'], cwd=REPO,
                         capture_output=True, text=True, timeout=60)
    assert ran.returncode == 0, ran.stderr
    assert ran.stdout == command
    readme = (REPO / "README.md").read_text()
    assert f"<!-- .ci/run: {block} -->\n```\n{command}```" in readme
    assert readme.index("<!-- .ci/run: install -->") < readme.index("flashbuild --hdim 64 --dtype fp16 --arch sm90")


# ---------------------------------------------------------------- a CPU torch: the build stops (the stand-in nvcc)

@pytest.fixture
def fake_toolkit(tmp_path, fake_root, cache, monkeypatch):
    from helpers import make_fake_cuda

    monkeypatch.setenv("CUDA_HOME", str(make_fake_cuda(tmp_path)))
    monkeypatch.setenv("FAKE_NVCC_LOG", str(tmp_path / "nvcc.log"))


SYNTHETIC = ["--hdim", "64", "--dtype", "fp16", "--arch", "sm80", "--direction", "fwd", "--causal", "off",
             "--features", "none"]


def test_a_cpu_torch_keeps_its_own_message(fake_toolkit, monkeypatch):
    monkeypatch.setattr(env, "torch_info", lambda: env.TorchInfo("2.13.0+cpu", None, Path("/t")))
    monkeypatch.setattr(env, "gpus", lambda: [])
    result = run_cli(*SYNTHETIC)
    assert result.exit_code == 1 and result.stdout == ""
    line = result.stderr.strip().splitlines()[-1]
    assert "compiled 1 kernel object" in line and "torch 2.13.0+cpu has no CUDA" in line and "--compile-only" in line
