"""The builder without a compiler: cache keys, the lock, dry runs, reading ninja's output and log,
the load contract, the no-CUDA stop, and the list / clean / doctor commands."""

from __future__ import annotations

import json
import re
import shlex
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest

from flashbuild.pipeline import builder
from flashbuild import env
from flashbuild.errors import BuildError
from flashbuild.pipeline.ninja_output import NinjaOutput, first_error, new_log_entries, read_ninja_log
from flashbuild.selection.variants import CompileFlags, select
from helpers import run_cli

VERSIONS = {"flashbuild": "0.1.0", "nvcc": "13.0.88", "torch": "2.13.0", "python": "cpython-311-x86_64-linux-gnu"}


def key(flags=CompileFlags(), versions=VERSIONS, **selection):
    return builder.cache_key(select(**selection), flags, versions)[0]


# ---------------------------------------------------------------- cache key

def test_key_is_readable_and_ends_in_a_short_hash():
    k = key(hdim=64, dtype="fp16", arch="sm90", direction="fwd", causal="both")
    assert re.fullmatch(r"sm90-fp16-h64-fwd-c01-fLS-[0-9a-f]{8}", k), k
    assert re.fullmatch(r"sm80\+sm90-fp16\+bf16-h64\+128-fwd-c1-fnone-lineinfo-[0-9a-f]{8}",
                        key(CompileFlags(lineinfo=True), hdim="64,128", dtype="fp16,bf16", arch="sm80,sm90",
                            direction="fwd", causal="on", features=[]))
    default = key(hdim=64, dtype="fp16", arch="sm90", causal="both")  # every implemented direction, every feature
    assert re.fullmatch(r"sm90-fp16-h64-fwd\+bwd\+splitkv-c01-fLS-[0-9a-f]{8}", default), default
    assert "-c01-fL-" in key(hdim=64, dtype="fp16", arch="sm90", features=["local"])
    assert "-c01-fS-" in key(hdim=64, dtype="fp16", arch="sm90", features="softcap")


def test_key_ignores_the_order_values_are_given_in():
    assert key(hdim="128,64", dtype="bf16,fp16", arch="sm90,sm80") == key(hdim=[64, 128], dtype=["fp16", "bf16"],
                                                                         arch=["sm80", "sm90"])


@pytest.mark.parametrize("change", [
    dict(selection=dict(hdim="64,128")), dict(selection=dict(dtype="bf16")), dict(selection=dict(arch="sm80")),
    dict(selection=dict(causal="on")), dict(selection=dict(direction="fwd")),
    dict(selection=dict(features=[])), dict(selection=dict(features=["local"])), dict(selection=dict(features="softcap")),
    dict(flags=CompileFlags(debug=True)), dict(flags=CompileFlags(lineinfo=True)),
    dict(flags=CompileFlags(nvcc_flags=("-Xptxas=-v",))),
    dict(versions={**VERSIONS, "flashbuild": "0.2.0"}), dict(versions={**VERSIONS, "nvcc": "12.8.93"}),
    dict(versions={**VERSIONS, "torch": "2.11.0+cu130"}), dict(versions={**VERSIONS, "python": "cpython-312"}),
])
def test_key_changes_when_it_must(change):
    base = dict(hdim=64, dtype="fp16", arch="sm90", causal="both")
    changed = key(change.get("flags", CompileFlags()), change.get("versions", VERSIONS),
                  **{**base, **change.get("selection", {})})
    assert changed != key(**base)
    assert changed.rsplit("-", 1)[1] != key(**base).rsplit("-", 1)[1]  # the hash itself differs


def test_key_holds_the_wheels_cutlass_by_its_version_header_not_its_path():
    """Our kernels' CUTLASS is the nvidia-cutlass wheel: its version.h keys the build, its site-packages
    dir does not (shards built on other machines link under the same key)."""
    selection = select(hdim=64, dtype="fp16", arch="sm90")
    assert set(builder.cutlass_identity(selection)) == {"version_h"}
    assert builder.cache_key(selection, CompileFlags(), VERSIONS, {"version_h": "a"}) != \
        builder.cache_key(selection, CompileFlags(), VERSIONS, {"version_h": "b"})


def test_key_and_module_do_not_depend_on_jobs_build_dir_launcher_or_verbose(tmp_path):
    selection = select(hdim=64, dtype="fp16", arch="sm90")
    a = builder.make_plan(selection, builder.BuildOptions())
    b = builder.make_plan(selection, builder.BuildOptions(jobs=7, build_dir=tmp_path, launcher="ccache", verbose=True))
    assert a.key == b.key and a.module_name == b.module_name
    assert a.module_name.isidentifier() and a.module_name == "_flashbuild_" + a.key.rsplit("-", 1)[1]
    assert b.build_dir == tmp_path and b.jobs == 7


def test_a_launcher_given_as_a_relative_path_is_made_absolute(tmp_path, monkeypatch):
    """ninja runs the compile commands in the build dir, where ./wrap.sh would not be found."""
    wrapper = tmp_path / "tools" / "wrap.sh"
    wrapper.parent.mkdir()
    wrapper.write_text("#!/bin/sh\nexec \"$@\"\n")
    wrapper.chmod(0o755)
    monkeypatch.chdir(tmp_path)
    _, options = builder.parse_request(hdim=64, dtype="fp16", arch="sm90", launcher="tools/wrap.sh")
    assert options.launcher == str(wrapper.resolve())
    _, options = builder.parse_request(hdim=64, dtype="fp16", arch="sm90", launcher="sh")  # a PATH name stays
    assert options.launcher == "sh"


# ---------------------------------------------------------------- lock

def test_second_builder_of_a_key_waits_for_the_lock(tmp_path, capsys):
    events = []
    first_holds = threading.Event()
    release = threading.Event()

    def first():
        with builder.build_lock(tmp_path / "k"):
            events.append("first in")
            first_holds.set()
            release.wait(10)
            events.append("first out")

    def second():
        first_holds.wait(10)
        with builder.build_lock(tmp_path / "k"):
            events.append("second in")

    threads = [threading.Thread(target=first), threading.Thread(target=second)]
    for t in threads:
        t.start()
    first_holds.wait(10)
    time.sleep(0.5)
    assert events == ["first in"]  # the second is still waiting
    release.set()
    for t in threads:
        t.join(10)
    assert events == ["first in", "first out", "second in"]
    assert "waiting for another flashbuild process building k" in capsys.readouterr().err


def test_lock_is_held_across_processes(tmp_path):
    holder = subprocess.Popen([sys.executable, "-c", textwrap.dedent(f"""
        import sys, time
        from pathlib import Path
        from flashbuild.pipeline import builder
        with builder.build_lock(Path({str(tmp_path / 'k')!r})):
            print("held", flush=True)
            time.sleep(1.5)
        """)], stdout=subprocess.PIPE, text=True)
    assert holder.stdout.readline().strip() == "held"
    started = time.monotonic()
    with builder.build_lock(tmp_path / "k"):
        waited = time.monotonic() - started
    holder.wait(10)
    assert waited > 0.5, "the lock did not make this process wait for the other"


# ---------------------------------------------------------------- dry run

def test_dry_run_prints_the_plan_and_writes_nothing(tmp_path, cache):
    result = run_cli("--hdim", "64", "--dtype", "fp16", "--arch", "sm90", "--dry-run",
                     "--build-dir", str(tmp_path / "bd"))
    assert result.exit_code == 0, result.output
    out = result.stdout
    for direction in ("fwd", "bwd", "splitkv"):  # the default: every implemented direction
        assert f"{direction}_hdim64_fp16_sm90" in out and f"{direction}_hdim64_fp16_causal_sm90" in out
        assert f"from templates/{direction}_instantiate.cu.j2" in out
        assert f"obj/{direction}_hdim64_fp16_sm90.o" in out
        assert f"obj/{direction}_hdim64_fp16_causal_sm90_local_softcap.o" in out
    families = {line.split()[0]: " ".join(line.split()[1:]) for line in out.splitlines() if line.startswith("  ")}
    assert families["fwd_hdim64_fp16_sm90"].startswith("hopper; packed (varlen) calls")
    assert families["bwd_hdim64_fp16_sm90"].startswith("hopper; local windows and softcap (the feature TUs)")
    assert "_fallback" not in out and "fallback.cu.j2" not in out  # no Ampere-path kernel beside a Hopper one
    for variant in ("fwd_hdim64_fp16_sm90", "fwd_hdim64_fp16_causal_sm90_local_softcap"):  # the Hopper forward's
        # kernel compiles device-only in a TU of its own, which the variant's TU (host code alone) launches
        assert families[f"{variant}_kernel"] == f"hopper; the kernel of {variant} alone, device-only (nvcc -fatbin; " \
                                                f"{variant} launches it from this TU's object)"
        assert f"obj/{variant}_kernel.o" in out
    assert "from templates/fwd_kernel.cu.j2" in out
    for variant in ("bwd_hdim64_fp16_sm90", "bwd_hdim64_fp16_causal_sm90_local_softcap"):  # the backward's main kernel and its
        # deterministic instantiation, each device-only in a TU of its own
        assert families[f"{variant}_kernel"] == f"hopper; the kernel of {variant} alone, device-only (nvcc -fatbin; " \
                                                f"{variant} launches it from this TU's object)"
        assert families[f"{variant}_kernel_ordered"] == (
            f"hopper; the deterministic (ordered) kernel of {variant} alone, device-only (nvcc -fatbin; {variant} "
            f"launches it from this TU's object)")
    assert "from templates/bwd_kernel.cu.j2" in out
    assert families["splitkv_hdim64_fp16_sm90"].startswith("hopper; the Hopper forward kernel compiled for decoding")
    assert "flashbuild_dispatch.h" in out and "compute_90a" in out
    assert "compile 33 kernel TUs:" in out  # 12 variants (plain and local+softcap), 21 kernel TUs (4 decode tiles, 1 over pairs of K/V heads)
    for variant in ("splitkv_hdim64_fp16_sm90", "splitkv_hdim64_fp16_causal_sm90_local_softcap"):  # split-KV's
        # forward kernel (one split or several), device-only in a TU of its own
        assert families[f"{variant}_kernel"] == f"hopper; the split-KV kernel of {variant} alone, device-only " \
                                                f"(nvcc -fatbin; {variant} launches it from this TU's object)"
    assert "from templates/splitkv_kernel.cu.j2" in out
    # The Hopper backward's plain kernels hold the deterministic mode: no deterministic call of this build
    # needs the feature variants.
    assert "features   local, softcap: each plain variant has a *_local_softcap variant for the calls with " \
           "window_size or softcap (other calls run the plain one)" in out
    assert re.search(r"key\s+sm90-fp16-h64-fwd\+bwd\+splitkv-c01-fLS-[0-9a-f]{8}", out)
    assert "jobs" in out
    assert not (tmp_path / "bd").exists() and not cache.exists()


def test_dry_run_names_the_hopper_backward_and_what_it_hands_to_the_ampere_path(cache):
    result = run_cli("--hdim", "32,64", "--dtype", "fp16", "--arch", "sm90", "--direction", "bwd", "--causal", "off",
                     "--dry-run")
    assert result.exit_code == 0, result.output
    families = {line.split()[0]: " ".join(line.split()[1:]) for line in result.stdout.splitlines()
                if line.startswith("  ")}
    assert families["bwd_hdim64_fp16_sm90"] == families["bwd_hdim64_fp16_sm90_local_softcap"] == (
        "hopper; local windows and softcap (the feature TUs), packed (varlen) and deterministic calls run on the "
        "Hopper kernel")
    assert "bwd_hdim32_fp16_sm90_kernel" not in result.stdout  # no Hopper tile: the Ampere path in its one TU
    assert "bwd_hdim64_fp16_sm90_local_softcap_kernel_ordered" in families  # the feature TU: the Hopper kernels
    assert families["bwd_hdim32_fp16_sm90"] == (
        "ampere; head dim 32 has no Hopper backward tile: the Ampere-path kernel compiled for sm_90a")


def test_dry_run_into_the_cache_writes_nothing(cache):
    result = run_cli("--config", "ci-compile", "--dry-run")
    assert result.exit_code == 0
    assert "fwd_hdim64_fp16_sm80" in result.stdout and "compute_80" in result.stdout
    assert not cache.exists()


# ---------------------------------------------------------------- ninja output and log

NVCC_FAILURE = """\
@@flashbuild 1/3 12.5@@ fwd_hdim64_fp16_sm80
@@flashbuild 2/3 14.0@@ fwd_hdim64_fp16_sm90
FAILED: [code=2] obj/fwd_hdim64_fp16_sm90.o
/usr/local/bin/nvcc -std=c++17 -O3 -Werror=all-warnings -c /b/generated/fwd_hdim64_fp16_sm90.cu -o obj/fwd_hdim64_fp16_sm90.o
/work/main/kernels/ampere/softmax.h(42): warning #177-D: variable "x" was declared but never referenced
/work/main/kernels/ampere/softmax.h(57): error: identifier "kLog2e" is undefined
/work/main/kernels/ampere/softmax.h(60): error: expected a ";"
2 errors detected in the compilation of "/b/generated/fwd_hdim64_fp16_sm90.cu".
@@flashbuild 3/3 20.1@@ binding
FAILED: obj/flash_api.o
c++ -O2 -std=c++17 -c /work/main/kernels/binding/flash_api.cpp -o obj/flash_api.o
In file included from /work/main/kernels/binding/flash_api.cpp:14:
/b/generated/flashbuild_dispatch.h:12:3: error: 'kArch' was not declared in this scope
ninja: build stopped: subcommand failed.
"""


def test_failures_name_the_variant_and_the_first_error_with_file_and_line():
    variants = select(hdim=64, dtype="fp16", arch="sm80,sm90", causal="off").variants
    messages = []
    out = NinjaOutput(variants, on_message=messages.append)
    for line in NVCC_FAILURE.splitlines():
        out.feed(line)
    out.finish(1)
    assert out.failed
    assert [(f.target, f.output) for f in out.failures] == [("fwd_hdim64_fp16_sm90", "obj/fwd_hdim64_fp16_sm90.o"),
                                                            ("binding", "obj/flash_api.o")]
    assert out.failures[0].error == '/work/main/kernels/ampere/softmax.h:57: error: identifier "kLog2e" is undefined'
    assert out.failures[1].error == "/b/generated/flashbuild_dispatch.h:12: error: 'kArch' was not declared in this scope"
    assert "[1/3] fwd_hdim64_fp16_sm80 (elapsed 12.5s)" in messages
    assert any(m.startswith("  FAILED fwd_hdim64_fp16_sm90 (fwd, hdim 64, fp16, not causal, sm90): "
                            "/work/main/kernels/ampere/softmax.h:57") for m in messages)
    summary = out.summary(Path("/b/build.log"), "flashbuild --hdim 64")
    assert "\n" not in summary
    assert summary.startswith("build failed: 2 targets failed: fwd_hdim64_fp16_sm90 (")
    assert "binding: /b/generated/flashbuild_dispatch.h:12" in summary
    assert "full log: /b/build.log" in summary and "`flashbuild --hdim 64`" in summary


def test_link_failures_and_errors_without_a_location():
    out = NinjaOutput()
    for line in ["@@flashbuild 1/1 1.0@@ link", "FAILED: _flashbuild_0123abcd.so",
                 "nvcc -shared obj/a.o -o _flashbuild_0123abcd.so.tmp && mv ...",
                 "/usr/bin/ld: cannot find -lc10_cuda: No such file or directory",
                 "collect2: error: ld returned 1 exit status"]:
        out.feed(line)
    out.finish(1)
    assert out.failures[0].target == "link"
    assert out.failures[0].error == "collect2: error: ld returned 1 exit status"


def test_ninja_errors_outside_any_edge_fail_the_build():
    out = NinjaOutput()
    out.feed("ninja: error: '/src/kernels/binding/flash_api.cpp', needed by 'obj/flash_api.o', missing")
    out.finish(1)
    assert out.failed and not out.failures
    assert "flash_api.cpp" in out.summary(Path("log"), "flashbuild")


def test_first_error_reads_nvcc_and_gcc_styles():
    assert first_error(["a.h(3): catastrophic error: cannot open source file \"x.h\""]) == \
        'a.h:3: error: cannot open source file "x.h"'
    assert first_error(["dir/b.cpp:7:12: fatal error: torch/extension.h: No such file"]) == \
        "dir/b.cpp:7: error: torch/extension.h: No such file"
    assert first_error(["c.cu(9): error #20: identifier \"q\" is undefined"]) == 'c.cu:9: error: identifier "q" is undefined'
    assert first_error(["all fine"]) is None


def test_timings_come_from_the_log_entries_this_run_added(tmp_path):
    log = tmp_path / ".ninja_log"
    log.write_text("# ninja log v7\n0\t41000\t111\tobj/a.o\tdeadbeef\n0\t2000\t112\tobj/b.o\tfeedface\n")
    before = read_ninja_log(log)
    assert len(before) == 2
    # ninja may recompact the log at startup: the old entries are rewritten, new ones appended.
    log.write_text("# ninja log v7\n0\t2000\t112\tobj/b.o\tfeedface\n0\t41000\t111\tobj/a.o\tdeadbeef\n"
                   "5\t39005\t222\tobj/a.o\tdeadbeef\n100\t1300\t223\t_flashbuild_x.so\tcafe\n")
    assert new_log_entries(before, log) == {"obj/a.o": 39.0, "_flashbuild_x.so": 1.2}
    assert NinjaOutput.target_name("obj/a.o") == "a" and NinjaOutput.target_name("_flashbuild_x.so") == "link"


def test_timings_table_lists_each_target():
    table = builder.timings_table({"binding": 30.0, "fwd_hdim64_fp16_sm90": 95.5}, 126.0)
    lines = table.splitlines()
    assert lines[0] == "compiled 2 targets in 126.0s:"
    assert [line.split() for line in lines[1:]] == [["fwd_hdim64_fp16_sm90", "95.5s"], ["binding", "30.0s"]]
    assert "nothing to compile" in builder.timings_table({}, 0.1)


# ---------------------------------------------------------------- no CUDA torch, and the load contract

def fake_ninja_success(plan):
    out = NinjaOutput(plan.selection.variants)
    out.finish(0)
    return out, {v.name: 1.0 for v in plan.selection.variants}


def test_plain_build_without_cuda_torch_compiles_then_stops_with_the_reason(monkeypatch, cache, fake_root):
    monkeypatch.setattr(env, "torch_info", lambda: env.TorchInfo("2.13.0+cpu", None, Path("/t")))
    monkeypatch.setattr(builder, "run_ninja", fake_ninja_success)
    monkeypatch.setattr(builder, "torch_link_spec", lambda plan: pytest.fail("must not touch torch"))
    selection, options = builder.parse_request(hdim=64, dtype="fp16", arch="sm90", direction="fwd", causal="off",
                                               no_softcap=True)
    with pytest.raises(BuildError) as info:
        builder.build(selection, options)
    message = str(info.value)
    assert "compiled 4 kernel objects" in message  # 2 Hopper variants: each a launch and a kernel TU
    assert "torch 2.13.0+cpu has no CUDA" in message
    assert "install a CUDA build of torch" in message and "--compile-only" in message
    assert "`flashbuild --hdim 64 --dtype fp16 --arch sm90 --direction fwd --causal off --no-softcap`" in message
    build_dir = next(cache.iterdir())
    assert (build_dir / "generated" / "fwd_hdim64_fp16_sm90.cu").is_file()
    assert (build_dir / "generated" / "fwd_hdim64_fp16_sm90_local.cu").is_file()
    manifest = json.loads((build_dir / "manifest.json").read_text())
    assert manifest["extension"] is None
    assert manifest["selection"]["features"] == ["local"]
    assert "flash_api" not in (build_dir / "build.ninja").read_text()


def test_compile_only_needs_no_torch(monkeypatch, cache, fake_root):
    monkeypatch.setattr(env, "torch_info", lambda: None)
    monkeypatch.setattr(builder, "run_ninja", fake_ninja_success)
    selection, options = builder.parse_request(hdim=64, dtype="fp16", arch="sm90", compile_only=True)
    result = builder.build(selection, options)
    assert result.extension is None and result.key.startswith("sm90-fp16-h64-fwd+bwd+splitkv-c01-fLS-")
    assert result.manifest["variants"] == [f"{d}_hdim64_fp16{c}_sm90{f}" for d in ("fwd", "bwd", "splitkv")
                                           for c in ("", "_causal") for f in ("", "_local_softcap")]
    assert result.manifest["selection"] == {"hdim": [64], "dtype": ["fp16"], "arch": ["sm90"],
                                            "direction": ["fwd", "bwd", "splitkv"], "causal": "both",
                                            "features": ["local", "softcap"]}
    assert json.loads((result.build_dir / "manifest.json").read_text()) == result.manifest


def test_load_without_cuda_torch_says_why(monkeypatch, cache, fake_root):
    monkeypatch.setattr(env, "torch_info", lambda: None)
    selection, options = builder.parse_request(hdim=64, dtype="fp16", arch="sm90")
    with pytest.raises(BuildError, match="torch is not installed.*--compile-only"):
        builder.load(selection, options)


@pytest.mark.parametrize("ready_on_second_try", [False, True])
def test_load_follows_try_lock_try_build_load(monkeypatch, tmp_path, fake_root, ready_on_second_try):
    calls = []
    tries = iter([None, "module" if ready_on_second_try else None])
    monkeypatch.setattr(env, "torch_info", lambda: env.TorchInfo("2.11.0+cu130", "13.0", Path("/t")))
    monkeypatch.setattr(builder, "torch_link_spec", lambda plan: "link-spec")

    def try_load(plan, tools, link):
        calls.append("try load")
        return next(tries)

    class Lock:
        def __init__(self, path):
            calls.append("lock")

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            calls.append("unlock")

    monkeypatch.setattr(builder, "_try_load", try_load)
    monkeypatch.setattr(builder, "build_lock", Lock)
    monkeypatch.setattr(builder, "_build_locked", lambda plan, tools, link: calls.append(f"build with {link}"))
    monkeypatch.setattr(builder.loader, "load_extension", lambda path, name, fresh: calls.append(f"load {name}") or "built")
    monkeypatch.setattr(builder.cache, "check_loadable", lambda path: None)  # nothing was really built
    selection, options = builder.parse_request(hdim=64, dtype="fp16", arch="sm90", build_dir=tmp_path)
    module = builder.load(selection, options)
    if ready_on_second_try:
        assert calls == ["try load", "lock", "try load", "unlock"] and module == "module"
    else:
        assert calls[:5] == ["try load", "lock", "try load", "build with link-spec", "unlock"]
        assert calls[5].startswith("load _flashbuild_") and module == "built"


def test_load_refuses_compile_only():
    selection, options = builder.parse_request(hdim=64, dtype="fp16", arch="sm90", compile_only=True)
    with pytest.raises(Exception, match="compile_only=True builds none"):
        builder.load(selection, options)


def test_successful_build_prints_where_what_and_how_to_load(monkeypatch, cache):
    import ast

    def fake_build(selection, options):
        names = [v.name for v in selection.variants]
        return builder.BuildResult(build_dir=cache / "k", extension=cache / "k" / "_flashbuild_0123abcd.so",
                                   manifest={"variants": names}, timings={}, key="k-0123abcd",
                                   module_name="_flashbuild_0123abcd")

    monkeypatch.setattr(builder, "build", fake_build)
    monkeypatch.setattr(env, "gpus", lambda: [("NVIDIA H200", "9.0")])  # without one: tests/test_first_hour.py
    result = run_cli("--hdim", "64", "--dtype", "fp16", "--arch", "sm90", "--lineinfo", "--no-softcap")
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    assert lines[0] == f"extension  {cache / 'k' / '_flashbuild_0123abcd.so'}"
    assert lines[2] == ("holds      12 variants: fwd_hdim64_fp16_sm90, fwd_hdim64_fp16_sm90_local, "
                        "fwd_hdim64_fp16_causal_sm90, fwd_hdim64_fp16_causal_sm90_local, "
                        "bwd_hdim64_fp16_sm90, bwd_hdim64_fp16_sm90_local, "
                        "bwd_hdim64_fp16_causal_sm90, bwd_hdim64_fp16_causal_sm90_local, "
                        "splitkv_hdim64_fp16_sm90, splitkv_hdim64_fp16_sm90_local, "
                        "splitkv_hdim64_fp16_causal_sm90, splitkv_hdim64_fp16_causal_sm90_local")
    assert lines[3].startswith("load it    python3 -c '")  # shell-quoted: pasted as it is
    snippet = shlex.split(lines[3].removeprefix("load it    "))[2]
    call = ast.parse(snippet).body[1].value  # m = flashbuild.load(...)
    assert ast.unparse(call.func) == "flashbuild.load"
    kwargs = {k.arg: ast.literal_eval(k.value) for k in call.keywords}
    assert kwargs == {"hdim": 64, "dtype": "fp16", "arch": "sm90", "direction": ["fwd", "bwd", "splitkv"],
                      "causal": "both", "features": ["local"], "lineinfo": True}
    assert builder.parse_request(**kwargs)[0] == builder.parse_request(hdim=64, dtype="fp16", arch="sm90",
                                                                       no_softcap=True)[0]


# ---------------------------------------------------------------- list, clean, doctor

def fake_cached_build(cache: Path, key: str, extension: bool) -> Path:
    path = cache / key
    (path / "obj").mkdir(parents=True)
    (path / "obj" / "a.o").write_bytes(b"x" * 1000)
    (path / "build.ninja").write_text("")
    manifest = {"key": key, "variants": ["fwd_hdim64_fp16_sm90"], "extension": "m.so" if extension else None}
    (path / "manifest.json").write_text(json.dumps(manifest))
    if extension:
        (path / "m.so").write_bytes(b"y")
    return path


def test_list_shows_the_space_and_the_cache(cache):
    fake_cached_build(cache, "sm90-fp16-h64-fwd-c01-aaaaaaaa", extension=True)
    (cache / "not-a-build").mkdir()
    text = run_cli("list")
    assert text.exit_code == 0
    assert "32, 64, 96, 128, 192, 256" in text.stdout and "sm80 ampere" in text.stdout
    assert "bwd        sm80 ampere" in text.stdout and "splitkv    sm80 ampere" in text.stdout
    assert "sm90-fp16-h64-fwd-c01-aaaaaaaa  1 variant  " in text.stdout and "not-a-build" not in text.stdout
    assert "features   local, softcap (each compiled in by default" in text.stdout and "--no-local" in text.stdout
    data = json.loads(run_cli("list", "--json").stdout)
    assert data["axes"]["hdim"] == [32, 64, 96, 128, 192, 256]
    assert data["axes"]["features"] == ["local", "softcap"]
    assert {"direction": "bwd", "arch": "sm90", "family": "hopper",
            "note": "local windows and softcap (the feature TUs), packed (varlen) and deterministic calls run on "
                    "the Hopper kernel"} in data["families"]
    assert [f["family"] for f in data["families"] if (f["direction"], f["arch"]) == ("fwd", "sm90")] == ["hopper"]
    assert [n["hdim"] for n in data["head_dim_notes"] if (n["direction"], n["arch"]) == ("fwd", "sm90")] == []
    assert [n["hdim"] for n in data["head_dim_notes"] if (n["direction"], n["arch"]) == ("bwd", "sm90")] == [32]
    assert [(b["key"], b["variants"], b["has_extension"]) for b in data["builds"]] == [
        ("sm90-fp16-h64-fwd-c01-aaaaaaaa", 1, True)]


def test_clean_removes_named_builds_or_all(cache):
    a = fake_cached_build(cache, "k-aaaaaaaa", extension=True)
    b = fake_cached_build(cache, "k-bbbbbbbb", extension=False)
    c = fake_cached_build(cache, "k-cccccccc", extension=False)
    result = run_cli("clean", "k-aaaaaaaa")
    assert result.exit_code == 0 and f"removed {a}" in result.stdout
    assert not a.exists() and b.exists()
    unknown = run_cli("clean", "k-zzzzzzzz")
    assert unknown.exit_code == 2
    assert "no cached build k-zzzzzzzz" in unknown.stderr and "k-bbbbbbbb" in unknown.stderr
    assert run_cli("clean").exit_code == 2
    assert run_cli("clean", "--all").exit_code == 0
    assert not b.exists() and not c.exists()


def test_clean_racing_another_clean_that_renames_the_entry_away(cache, monkeypatch):
    """filelock makes the lock's directory (mkdir with exist_ok): when another `clean` renames the entry away between
    that mkdir and its is_dir check, the mkdir fails as if a file stood there (FileExistsError; once in CI, two
    `clean --all` at once). The entry is gone: not an error. A file standing where the build dir was is refused by
    name instead."""
    import contextlib
    import errno
    import shutil

    from flashbuild.pipeline import cache as cache_module

    entry = fake_cached_build(cache, "k-aaaaaaaa", extension=False)

    @contextlib.contextmanager
    def raced(path):
        shutil.rmtree(path)  # the other clean's rename and removal
        raise FileExistsError(errno.EEXIST, "File exists", str(path))
        yield  # pragma: no cover

    monkeypatch.setattr(cache_module, "build_lock", raced)
    result = run_cli("clean", "--all")
    assert result.exit_code == 0, result.output
    assert not entry.exists()

    monkeypatch.undo()
    other = cache / "k-bbbbbbbb"
    other.write_text("not a dir")
    with pytest.raises(BuildError, match="a file stands where the dir was"):
        cache_module.remove_build(cache_module.CachedBuild("k-bbbbbbbb", other, 0, 0, False), root=cache)
    assert other.is_file()


def test_doctor_reports_each_tool_and_fails_without_nvcc(monkeypatch, cache):
    ok = run_cli("doctor")
    for name in ("nvcc", "CUTLASS", "kernels", "ninja", "host c++", "torch", "GPU", "cache"):
        assert re.search(rf"^(OK|MISSING)\s+{re.escape(name)}\s", ok.stdout, re.M), name
    monkeypatch.setattr(env, "find_nvcc", lambda: None)
    missing = run_cli("doctor")
    assert missing.exit_code == 1
    assert re.search(r"^MISSING\s+nvcc .*fix: install the CUDA toolkit or `pip install nvidia-cuda-nvcc`",
                     missing.stdout, re.M)
    assert "cannot build: missing nvcc" in missing.stderr


def test_nvcc_discovery_order(monkeypatch, tmp_path):
    fake = tmp_path / "cuda" / "bin" / "nvcc"
    fake.parent.mkdir(parents=True)
    fake.write_text("#!/bin/sh\necho 'Cuda compilation tools, release 12.8, V12.8.93'\n")
    fake.chmod(0o755)
    monkeypatch.setenv("CUDA_HOME", str(tmp_path / "cuda"))
    found = env.find_nvcc()
    assert found.path == fake and found.source == "CUDA_HOME"
    assert env.nvcc_version(fake) == "12.8.93"
    monkeypatch.setenv("CUDA_HOME", str(tmp_path / "nothing"))
    monkeypatch.setenv("PATH", str(fake.parent))
    found = env.find_nvcc()
    assert found.source == "PATH" and "has no bin/nvcc" in found.reason


def test_torch_facts_come_from_its_version_file_without_importing_it():
    info = env.torch_info()
    assert info is not None and info.version
    probe = subprocess.run([sys.executable, "-c", "import sys, flashbuild.pipeline.builder, flashbuild.cli; "
                            "from flashbuild import env; env.torch_info(); print('torch' in sys.modules)"],
                           capture_output=True, text=True, check=True)
    assert probe.stdout.strip() == "False"


def test_an_extension_that_links_but_does_not_import_is_one_clear_error(monkeypatch):
    """An undefined symbol at import (FA3's slice before it linked torch_cuda) names the build and
    where the link line is; it is still an ImportError for code that catches those."""
    from flashbuild.errors import ExtensionImportError, FlashbuildError

    selection, options = builder.parse_request(hdim="64", dtype="fp16", arch="sm90")
    plan = builder.make_plan(selection, options)

    def undefined(extension, module_name, fresh=True):
        raise ImportError(f"{extension}: undefined symbol: aoti_torch_get_current_cuda_stream")

    monkeypatch.setattr(builder, "import_extension", undefined)
    with pytest.raises(ExtensionImportError) as caught:
        builder.import_build(plan)
    assert isinstance(caught.value, ImportError) and isinstance(caught.value, FlashbuildError)
    message = str(caught.value)
    assert "linked but does not import" in message and "aoti_torch_get_current_cuda_stream" in message
    assert plan.key in message and "-v` shows the link line" in message
