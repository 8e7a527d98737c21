"""Hostile round 3 (issue 48): profiles, shards, the cache and the pytest plugin as attack surfaces,
and the tracebacks and silent answers the round found on the old surfaces. Data only: each case is a
test_hostile_inputs.Case, run and judged there (and listed in docs/hostile-inputs.md).

A case marked `danger` is one where the old code ran a command, wrote or deleted outside its roots:
its check failing is the outcome "dangerous". Builds run a fake nvcc; the danger cases about flags
run one that, as the real nvcc does for its steps, expands each -D/-I argument inside double quotes
in a shell (`sh_nvcc`), so an injection that would reach nvcc's shell creates the marker file.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any, Callable

from helpers import REPO
from test_hostile_inputs import (KEY, MARKER, TMP, Case, Run, absent, both, build, cache_entry, dry, exists,
                                 mkdir, no_marker, real_build, results, results_case, row, sel, steps, symlink,
                                 write)

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib

PROFILE = REPO / "configs" / "profiles" / "flashbuild.toml"
SRC = ("--source", str(REPO))


# ---------------------------------------------------------------- building blocks

def toml_text(data: dict, prefix: str = "") -> str:
    """A small TOML writer for profile copies: scalars and lists first, then tables, then arrays of tables."""
    def value(v: Any) -> str:
        if isinstance(v, bool):
            return "true" if v else "false"
        if isinstance(v, (int, float)):
            return repr(v)
        if isinstance(v, str):
            return json.dumps(v)
        if isinstance(v, list):
            return "[" + ", ".join(value(i) for i in v) + "]"
        if isinstance(v, dict):
            return "{" + ", ".join(f"{json.dumps(k)} = {value(i)}" for k, i in v.items()) + "}"
        raise TypeError(v)
    plain = {k: v for k, v in data.items() if not isinstance(v, dict) and not (
        isinstance(v, list) and v and all(isinstance(i, dict) for i in v))}
    lines = [f"{json.dumps(k)} = {value(v)}" for k, v in plain.items()]
    for k, v in data.items():
        name = f"{prefix}{json.dumps(k)}"
        if isinstance(v, dict):
            lines += ["", f"[{name}]", toml_text(v, name + ".")]
        elif isinstance(v, list) and v and all(isinstance(i, dict) for i in v):
            for item in v:
                lines += ["", f"[[{name}]]", toml_text(item, name + ".")]
    return "\n".join(lines)


def profile_copy(edit: Callable[[dict], Any] | None = None, name: str = "copy.toml", raw: str | bytes | None = None,
                 replace: tuple[str, str] | None = None) -> Callable[[Path], None]:
    """configs/profiles/flashbuild.toml, edited (a function of its parsed table), at tmp/<name>."""
    def setup(tmp: Path) -> None:
        data = tomllib.loads(PROFILE.read_text())
        if edit is not None:
            edit(data)
        path = tmp / name
        path.parent.mkdir(parents=True, exist_ok=True)
        text = raw if raw is not None else toml_text(data)
        if replace:
            original = PROFILE.read_text()
            # a replace that finds nothing would test the unchanged profile (it did once: the axes moved)
            assert replace[0] in original, f"the profile no longer holds {replace[0]!r}: update the case"
            text = original.replace(*replace)
        path.write_bytes(text if isinstance(text, bytes) else text.replace(TMP, str(tmp)).encode())
    return setup


def put(*keys: str, value: Any) -> Callable[[dict], None]:
    def edit(data: dict) -> None:
        table = data
        for key in keys[:-1]:
            table = table.setdefault(key, {})
        table[keys[-1]] = value
    return edit


def add_flag(key: str, flag: str) -> Callable[[dict], None]:
    def edit(data: dict) -> None:
        data.setdefault("flags", {}).setdefault(key, []).append(flag)
    return edit


def profile_case(id: str, edit: Callable[[dict], Any] | None, must: tuple[str, ...] = ("copy.toml",),
                 name: str = "copy.toml", expect: str = "error", **kw: Any) -> Case:
    shown = kw.pop("input", None)
    copy = profile_copy(edit, name, kw.pop("raw", None), kw.pop("replace", None))
    return Case(f"profile-{id}", "profile", (*SRC, "--profile", f"{TMP}/{name}", *dry()),
                setup=steps(copy, *kw.pop("more", ())), expect=expect, must_name=must,
                input=shown or f"--profile {name} (a copy of flashbuild.toml) with {id}", **kw)


SH_NVCC = r'''
case " $* " in *" --version "*) echo "Cuda compilation tools, release 13.0, V13.0.88"; exit 0;; esac
for a in "$@"; do case "$a" in -D*|-I*|-U*) eval "x=\"$a\"";; esac; done
prev=""; out=""; mf=""
for a in "$@"; do [ "$prev" = "-o" ] && out="$a"; [ "$prev" = "-MF" ] && mf="$a"; prev="$a"; done
[ -n "$mf" ] && printf '%s:\n' "$out" > "$mf"
[ -n "$out" ] && printf object > "$out"
exit 0'''


def sh_nvcc(tmp: Path) -> None:
    """tmp/cuda/bin/nvcc: expands -D/-I/-U arguments in double quotes in a shell, as nvcc's steps do."""
    write("cuda/bin/nvcc", "#!/bin/sh\n" + SH_NVCC + "\n", 0o755)(tmp)


SH_ENV = {"CUDA_HOME": f"{TMP}/cuda"}


def injection_case(id: str, edit: Callable[[dict], Any], **kw: Any) -> Case:
    """The issue's danger 1: a profile value reaching nvcc's shell, built for real (compile only)."""
    return Case(f"profile-danger-{id}", "profile", (*SRC, "--profile", f"{TMP}/copy.toml", *build()),
                setup=steps(sh_nvcc, profile_copy(edit)), env=SH_ENV, must_name=("copy.toml",), check=no_marker,
                danger=True, input=kw.pop("input", f"--profile copy.toml --compile-only, {id} = $(touch TMP/pwned)"),
                **kw)


def outside(*rels: str) -> Callable[[Path, Run], str | None]:
    """None of these paths (relative to tmp, outside the cache) was created."""
    def check(tmp: Path, run: Run) -> str | None:
        made = [rel for rel in rels if os.path.lexists(tmp / rel)]
        return f"{made[0]} was written outside the build dir" if made else None
    return check


def escape_case(id: str, edit: Callable[[dict], Any], made: str = "escaped", **kw: Any) -> Case:
    """The issue's danger 2: a profile name or path leading outside the build dir, built for real."""
    return Case(f"profile-danger-{id}", "profile", (*SRC, "--profile", f"{TMP}/copy.toml", *build()),
                setup=profile_copy(edit), must_name=("copy.toml",), check=outside(made), danger=True,
                input=kw.pop("input", f"--profile copy.toml --compile-only with {id}"), **kw)


def shard_build(target: str = "art", count: int = 1, index: int = 1) -> Callable[[Path], None]:
    """A real shard artifact (fake nvcc) at tmp/<target>."""
    def setup(tmp: Path) -> None:
        from click.testing import CliRunner

        from flashbuild.cli import cli
        result = CliRunner().invoke(cli, [*build(), "--shard", f"{index}/{count}", "--artifact-dir",
                                          str(tmp / target)])
        assert result.exit_code == 0, result.output
    return setup


def edit_shard(change: Callable[[dict], Any], target: str = "art") -> Callable[[Path], None]:
    def setup(tmp: Path) -> None:
        path = tmp / target / "manifest.json"
        data = json.loads(path.read_text())
        change(data)
        path.write_text(json.dumps(data))
    return setup


def link_case(id: str, change: Callable[[dict], Any] | None, must: tuple[str, ...] = ("manifest.json",),
              **kw: Any) -> Case:
    return Case(f"shard-link-{id}", "shard", ("link", f"{TMP}/art"),
                setup=steps(shard_build(), *([edit_shard(change)] if change else []), *kw.pop("more", ())),
                must_name=must, input=kw.pop("input", f"link art: its manifest with {id}"), **kw)


def costs_case(id: str, content: str | bytes | None, setup: Callable | None = None, **kw: Any) -> Case:
    steps_ = [write("costs.json", content)] if content is not None else []
    return Case(f"shard-costs-{id}", "shard", (*dry(), "--shard", "1/1", "--costs", f"{TMP}/costs.json"),
                setup=steps(*steps_, *([setup] if setup else [])), must_name=kw.pop("must", ("--costs",)),
                input=kw.pop("input", f"--costs costs.json: {id}"), **kw)


def put_file(rel: str, content: str | bytes) -> Callable[[Path], None]:
    """write(), with TMP in a text replaced by the case's directory."""
    def setup(tmp: Path) -> None:
        write(rel, content if isinstance(content, bytes) else content.replace(TMP, str(tmp)))(tmp)
    return setup


def fifo(rel: str) -> Callable[[Path], None]:
    def setup(tmp: Path) -> None:
        (tmp / rel).parent.mkdir(parents=True, exist_ok=True)
        os.mkfifo(tmp / rel)
    return setup


def deep(n: int = 100_000) -> str:
    return "[" * n + "]" * n


def planted_manifest(content: str | bytes | None = None, link_to: str | None = None) -> Callable[[Path], None]:
    """A cache entry (with the marker) whose manifest.json is this content, or a link to `link_to`."""
    def setup(tmp: Path) -> None:
        cache_entry(manifest=None)(tmp)
        target = tmp / "cache" / KEY / "manifest.json"
        if link_to:
            os.symlink(link_to, target)
        elif content is not None:
            target.write_bytes(content if isinstance(content, bytes) else content.encode())
    return setup


def foreign(rel: str = "cache/my-chrome-ext", manifest: str = '{"name": "my extension", "version": "1.0"}',
            ninja: bool = False) -> Callable[[Path], None]:
    def setup(tmp: Path) -> None:
        (tmp / "cache").mkdir(mode=0o700, exist_ok=True)
        write(f"{rel}/manifest.json", manifest)(tmp)
        write(f"{rel}/obj/important.bin", "data")(tmp)
        if ninja:
            write(f"{rel}/build.ninja", "rule cc\n")(tmp)
    return setup


TEST_MODULE = '''import pytest
@pytest.mark.parametrize("dtype", ["fp16", "bf16"])
@pytest.mark.parametrize("head_dim", [64, 128])
def test_case(dtype, head_dim):
    pass
'''
OWN_MANIFEST = {"key": "k", "profile": "flashbuild", "source": None,
                "selection": {"hdim": [64], "dtype": ["fp16"], "features": []}}


def plugin_case(id: str, manifest: Any = OWN_MANIFEST, env: dict | None = None, expect: str = "error",
                must: tuple[str, ...] = ("FLASHBUILD_SLICE",), extra: tuple[str, ...] = ("-p", "no:cacheprovider"),
                setup: Callable | None = None, **kw: Any) -> Case:
    """pytest -p flashbuild.sources.pytest_slice on a four-case test module, FLASHBUILD_SLICE=m.json."""
    content = manifest if isinstance(manifest, (str, bytes)) else json.dumps(manifest)
    steps_ = [write("test_mod.py", TEST_MODULE)] + ([put_file("m.json", content)] if manifest is not None else [])
    return Case(f"plugin-{id}", "plugin", ("-q", *extra, f"{TMP}/test_mod.py"), pytest=True,
                env={"FLASHBUILD_SLICE": f"{TMP}/m.json", **(env or {})},
                setup=steps(*steps_, *([setup] if setup else [])), expect=expect, must_name=must,
                input=kw.pop("input", f"pytest -p flashbuild.sources.pytest_slice: {id}"), **kw)


def with_selection(**over: Any) -> dict:
    return {**OWN_MANIFEST, "selection": {**OWN_MANIFEST["selection"], **over}}


def matrix_case(id: str, content: str, expect: str = "error", must: tuple[str, ...] = ("m.toml",),
                args: tuple[str, ...] | None = None, **kw: Any) -> Case:
    return Case(f"shard-matrix-{id}", "shard", args or ("matrix", f"{TMP}/m.toml"), setup=write("m.toml", content),
                expect=expect, must_name=must, input=kw.pop("input", f"matrix m.toml: {content[:80]!r}"), **kw)


def both_cleans(tmp: Path) -> None:
    """Two `flashbuild clean --all` at once over three entries (their races end in FileNotFoundError, or in
    FileExistsError from filelock's mkdir of the lock's directory: pipeline/cache.py, remove_build)."""
    for n in range(3):
        cache_entry(name=f"{KEY}{n}")(tmp)


def two_cleans(tmp: Path, run: Run) -> str | None:
    procs = [subprocess.Popen([sys.executable, "-m", "flashbuild", "clean", "--all"], cwd=tmp, text=True,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=dict(os.environ)) for _ in range(2)]
    outs = [p.communicate(timeout=120) for p in procs]
    bad = [(p.returncode, err) for p, (_, err) in zip(procs, outs) if p.returncode != 0 or "Traceback" in err]
    if bad:
        return f"a concurrent clean failed (exit {bad[0][0]}): {bad[0][1].strip()[-200:]}"
    left = [p.name for p in (tmp / "cache").iterdir()]
    return f"left in the cache: {left}" if left else None


# ---------------------------------------------------------------- the cases

ROW_A = row()[0]
FWD = "fwd_hdim{hdim}_{dtype}{causal}_{arch}{features}"
NAME = ("instantiation", "fwd", "name")
SOME_MATRIX = '[matrix]\nhdim = [64]\ndtype = ["fp16"]\narch = ["sm80"]\ndirection = ["fwd"]\ncausal = ["off"]\n'


def moved_out(sub: str, target: str, keep_files: bool = False) -> Callable[[Path], None]:
    """A real build whose <sub> (generated, obj, .ninja_log, .lock) is a link to tmp/<target> (emptied)."""
    def setup(tmp: Path) -> None:
        import shutil
        entry = real_build(tmp) / sub
        if entry.is_dir():
            shutil.rmtree(entry)
            (tmp / target).mkdir()
        elif entry.exists():
            entry.unlink()
        os.symlink(tmp / target, entry)
    return setup


def empty(rel: str) -> Callable[[Path, Run], str | None]:
    def check(tmp: Path, run: Run) -> str | None:
        path = tmp / rel
        found = sorted(p.name for p in path.iterdir()) if path.is_dir() else ([rel] if path.exists() else [])
        return f"written outside the build dir, into {rel}: {found[:3]}" if found else None
    return check


def build_dir_gone(tmp: Path, run: Run) -> str | None:
    left = [p.name for p in (tmp / "cache").iterdir() if not p.name.startswith(".")]
    return f"not removed: {left}" if left else None


def unchanged(rel: str, text: str) -> Callable[[Path, Run], str | None]:
    def check(tmp: Path, run: Run) -> str | None:
        return None if (tmp / rel).read_text() == text else f"{rel} was overwritten"
    return check


def lock_loop(tmp: Path) -> None:
    entry = real_build(tmp)
    (entry / ".lock").unlink(missing_ok=True)
    os.symlink(entry / ".lock", entry / ".lock")


def lock_dir(tmp: Path) -> None:
    entry = real_build(tmp)
    (entry / ".lock").unlink(missing_ok=True)
    (entry / ".lock").mkdir()


def huge_file(rel: str, size: int) -> Callable[[Path], None]:
    def setup(tmp: Path) -> None:
        with open(tmp / rel, "wb") as f:
            f.truncate(size)
    return setup


def no_cell_split(tmp: Path, run: Run) -> str | None:
    return None if "-fL " in run.stdout and "-fS " in run.stdout else "features = [\"local\", \"softcap\"] made one cell"


def obj_to_link(tmp: Path) -> None:
    obj = next((tmp / "art" / "obj").glob("*.o"))
    data = obj.read_bytes()
    obj.unlink()
    (tmp / "elsewhere.o").write_bytes(data)
    os.symlink(tmp / "elsewhere.o", obj)


def delete_objects(tmp: Path) -> None:
    for obj in (tmp / "art" / "obj").glob("*.o"):
        obj.unlink()


ROUND3 = [
    # ---- danger 1: a profile's values reach nvcc's shell
    injection_case("defines", add_flag("defines", f"-DFB_X=$(touch {MARKER})")),
    injection_case("nvcc-backtick", add_flag("nvcc", f"-DFB_Y=`touch {MARKER}`")),
    injection_case("nvcc-include", add_flag("nvcc", f"-I$(touch {MARKER})")),
    injection_case("undefine", add_flag("nvcc", f"-UFB_$(touch {MARKER})")),
    injection_case("gencode", put("axes", "gencode", "sm80", value=f"-gencode arch=compute_80,code=sm_80 -DX=$(touch {MARKER})")),
    injection_case("xcompiler", add_flag("nvcc", f"-Xcompiler=-O2;touch {MARKER}")),
    injection_case("cxx", add_flag("cxx", f"-DZ=$(touch {MARKER})")),
    # ---- danger 2: names and paths of a profile leave the build dir
    escape_case("name-dotdot", put(*NAME, value="../../../escaped/" + FWD)),
    escape_case("name-absolute", put(*NAME, value=f"{TMP}/abs/" + FWD), made="abs"),
    escape_case("name-dotdot-flat", put(*NAME, value="../../../escaped" + FWD), made="escaped" + "fwd_hdim64_fp16_sm80.cu"),
    escape_case("generated-beside-dotdot", lambda d: d["generated"].append({"file": "../../escaped.py",
                                                                            "template": "dispatch.h.j2",
                                                                            "beside_extension": True}),
                made="escaped.py"),
    escape_case("template-dotdot", put("instantiation", "fwd", "template", value="../../../etc/passwd"), made="none"),
    profile_case("name-subdir", put(*NAME, value="sub/" + FWD)),
    profile_case("name-format-spec", put(*NAME, value="fwd_hdim{hdim:>9999999}_{dtype}{causal}_{arch}{features}")),
    profile_case("name-conversion", put(*NAME, value="fwd_{hdim!r}_{dtype}{causal}_{arch}{features}")),
    profile_case("name-attribute", put(*NAME, value="fwd_{hdim.real}_{dtype}{causal}_{arch}{features}")),
    profile_case("name-space", put(*NAME, value="fwd hdim{hdim}_{dtype}{causal}_{arch}{features}")),
    profile_case("name-dollar", put(*NAME, value="fwd$x_{hdim}_{dtype}{causal}_{arch}{features}")),
    profile_case("name-semicolon", put(*NAME, value="fwd;x_{hdim}_{dtype}{causal}_{arch}{features}")),
    profile_case("name-too-long", put(*NAME, value="x" * 300 + FWD)),
    profile_case("name-hidden", put(*NAME, value="." + FWD)),
    profile_case("name-unbalanced", put(*NAME, value="fwd_{hdim_{dtype}")),
    profile_case("template-missing", put("instantiation", "fwd", "template", value="nope.cu.j2")),
    profile_case("template-absolute", put("instantiation", "fwd", "template", value="/etc/passwd")),
    profile_case("generated-dollar", lambda d: d["generated"].append({"file": "x$y.h", "template": "dispatch.h.j2"})),
    profile_case("support-name-dotdot", put("support", value=[{"file": "kernels/common/params.h", "name": "../x",
                                                               "template": "dispatch.h.j2"}])),
    profile_case("include-dir-subshell", put("tree", "include_dirs", value=["kernels", "$(touch x)"])),
    profile_case("include-dir-option", put("tree", "include_dirs", value=["kernels", "-Ifoo"])),
    profile_case("api-source-semicolon", put("extension", "sources", value=["kernels/binding/flash_api.cpp;x"])),
    profile_case("cutlass-dir-space", put("tree", "cutlass", value="my cutlass")),
    profile_case("required-quote", put("tree", "required", value=['kernels/"x".h'])),
    profile_case("flag-newline", add_flag("nvcc", "-O3\n-DX=1")),
    profile_case("flag-double-quote", add_flag("nvcc", '-DX="a"')),
    profile_case("flag-backslash", add_flag("nvcc", "-DX=a\\b")),
    profile_case("define-variable", add_flag("defines", "-DX=$HOME")),
    profile_case("cxx-backtick", add_flag("cxx", "-DX=`id`")),
    profile_case("xcompiler-next-value", lambda d: d["flags"]["nvcc"].extend(["-Xcompiler", "-O2 -DX"])),
    profile_case("gencode-extra-flag", put("axes", "gencode", "sm80", value="-gencode arch=compute_80,code=sm_80 -G")),
    profile_case("gencode-two", put("axes", "gencode", "sm80", value="-gencode arch=compute_80,code=sm_80 -gencode arch=compute_86,code=sm_86")),
    profile_case("version-pattern-backtracking", put("tree", "version", value={"file": "README.md", "pattern": "^(a+)+$",
                                                                             "accepts": "0.1"}),
                 must=("copy.toml", "tree.version.pattern")),
    Case("env-root-no-such-user", "env", dry(), env={"FLASHBUILD_ROOT": "~flashbuild-no-such-user/tree"},
         must_name=("FLASHBUILD_ROOT",)),
    profile_case("tests-env-ld-preload", put("tests", "env", value={"always": "LD_PRELOAD"})),
    profile_case("tests-env-path", put("tests", "env", value={"always": "PATH"})),
    profile_case("tests-env-pythonpath", put("tests", "env", value={"always": "PYTHONPATH"})),
    profile_case("tests-functions-injection", put("tests", "functions", value={"bwd": ["test_x; touch pwned"]}),
                 must=("copy.toml", "tests.functions")),
    profile_case("tests-known-failures-injection", put("tests", "known_failures", value={"test_x; touch pwned": "why"}),
                 must=("copy.toml", "tests.known_failures")),
    profile_case("tests-known-failures-newline", put("tests", "known_failures", value={"test_x": "one\ntwo"}),
                 must=("copy.toml", "tests.known_failures")),
    profile_case("tests-known-failures-not-a-table", put("tests", "known_failures", value=["test_x"]),
                 must=("copy.toml", "tests.known_failures")),
    # [[switches.device]] (issue 43): its traits are written into a generated C++ header
    *(profile_case(f"switches-device-{id}", put("switches", value={
        "header": "common/params.h", "overlay": "flashbuild_switches.h",
        "device": [{"launcher": "run_mha_fwd_hdim128", "call": "run_flash_fwd", "hdim": 128,
                    "traits": "Flash_fwd_kernel_traits<{hdim}, 64, 64, 4, false, false, {T}>", "devices": ["8.6"],
                    **entry}]}), must=("copy.toml", f"switches.device[0].{key}"))
      for id, key, entry in (
          ("traits-injection", "traits", {"traits": "X<{hdim}, {T}>() { system(\"touch pwned\"); } void f<int"}),
          ("traits-newline", "traits", {"traits": "X<{hdim},\n{T}>"}),
          ("launcher-shell", "launcher", {"launcher": "f; touch pwned"}),
          ("call-unknown", "call", {"call": "system"}),
          ("devices-shell", "devices", {"devices": ["8.6; touch pwned"]}),
          ("hdim-bool", "hdim", {"hdim": True}),
          ("args-unknown", "args", {"args": ["dropout", "causal", "evil"]}),
          ("unknown-key", "when", {"when": "always"}))),
    profile_case("causal-runtime-injection", put("axes", "causal_runtime", value=["bwd; touch pwned"])),
    profile_case("causal-runtime-string", put("axes", "causal_runtime", value="bwd")),
    profile_case("causal-runtime-with-runtime-axis", lambda d: d["axes"].update(causal="runtime",
                                                                               causal_runtime=["bwd"])),
    profile_case("named-flashbuild", add_flag("defines", "-DMINE"), must=("flashbuild.toml",), name="mine/flashbuild.toml",
                 input="--profile mine/flashbuild.toml (a user's profile named as the built-in one)"),
    profile_case("file-name-space", None, must=("my tree",), name="my tree.toml"),
    profile_case("file-name-dollar", None, must=("x$y",), name="x$y.toml"),
    profile_case("deep-toml", None, raw="description = 'x'\nx = " + deep(60_000), input="--profile copy.toml: 60,000 nested arrays"),
    profile_case("hdim-5000-digits", None, replace=("[axes]\n", "[axes]\nhdim = [" + "9" * 5000 + ", 32]\n"),
                 input="--profile copy.toml: a 5000-digit head dim"),
    profile_case("binary", None, raw=b"\xff\xfe\x00description", input="--profile copy.toml: binary"),
    profile_case("empty", None, raw="", input="--profile copy.toml: an empty file"),
    Case("profile-fifo", "profile", (*SRC, "--profile", f"{TMP}/f.toml", *dry()), setup=fifo("f.toml"),
         must_name=("f.toml",), input="--profile f.toml: a FIFO"),
    Case("profile-dir", "profile", (*SRC, "--profile", f"{TMP}/d.toml", *dry()), setup=mkdir("d.toml"),
         must_name=("d.toml",), input="--profile d.toml: a directory"),
    Case("profile-empty-with-source", "profile", ("--source", f"{TMP}/other", "--profile", "", *dry()),
         setup=mkdir("other"), must_name=("--profile",), input="--source ./other --profile ''"),
    Case("profile-blank-with-source", "profile", ("--source", f"{TMP}/other", "--profile", "  ", *dry()),
         setup=mkdir("other"), must_name=("--profile",), input="--source ./other --profile '  '"),
    profile_case("own-copy-builds", None, expect="ok", must=("plan:",), input="--profile copy.toml: an unchanged copy"),
    # ---- the plugin
    plugin_case("own-build-selects", expect="ok", must=("1 passed, 3 deselected",)),
    plugin_case("own-build-with-cache", expect="ok", must=("1 passed",), extra=()),
    plugin_case("source-no-cacheprovider", {**OWN_MANIFEST, "source": TMP}, expect="ok", must=("1 passed",)),
    plugin_case("source-with-cacheprovider", {**OWN_MANIFEST, "source": TMP}, expect="ok", must=("1 passed",),
                extra=(), check=lambda tmp, run: ".pytest_cache written into the tree" if (tmp / ".pytest_cache").exists()
                else None),
    plugin_case("fa2-profile-selects", {**OWN_MANIFEST, "profile": "flash-attn-2"}, expect="ok",
                must=("2 passed, 2 deselected",)),
    plugin_case("unset", None, env={"FLASHBUILD_SLICE": None}),
    plugin_case("empty", None, env={"FLASHBUILD_SLICE": ""}),
    plugin_case("missing-file", None),
    plugin_case("directory", None, setup=mkdir("m.json")),
    plugin_case("fifo", None, setup=fifo("m.json")),
    plugin_case("dev-zero", None, setup=symlink("m.json", "/dev/zero")),
    plugin_case("json-list", [1, 2]),
    plugin_case("not-json", "{oops"),
    plugin_case("binary", b"\xff\xfe"),
    plugin_case("deep-json", deep()),
    plugin_case("no-hdim", {"key": "k", "profile": "flashbuild", "selection": {"dtype": ["fp16"], "features": []}}),
    plugin_case("hdim-strings", with_selection(hdim=["64"])),
    plugin_case("hdim-huge-number", '{"key": "k", "selection": {"hdim": [' + "9" * 5000 + '], "dtype": [], "features": []}}'),
    plugin_case("selection-list", {**OWN_MANIFEST, "selection": [64]}),
    plugin_case("profile-etc-passwd", {**OWN_MANIFEST, "profile": "../../etc/passwd"}),
    plugin_case("profile-unknown", {**OWN_MANIFEST, "profile": "nope"}),
    plugin_case("profile-int", {**OWN_MANIFEST, "profile": 5}),
    plugin_case("profile-without-tests", {**OWN_MANIFEST, "profile": f"{TMP}/notests.toml"}, must=("[tests]",),
                setup=profile_copy(lambda d: d.pop("tests", None), "notests.toml")),
    plugin_case("profile-bad-toml", {**OWN_MANIFEST, "profile": f"{TMP}/bad.toml"}, setup=write("bad.toml", "[x")),
    plugin_case("hdims-abc", env={"FLASHBUILD_SLICE_HDIMS": "abc"}, must=("FLASHBUILD_SLICE_HDIMS",)),
    plugin_case("hdims-huge", env={"FLASHBUILD_SLICE_HDIMS": "9" * 5000}, must=("FLASHBUILD_SLICE_HDIMS",)),
    plugin_case("hdims-64", env={"FLASHBUILD_SLICE_HDIMS": "64"}, expect="ok", must=("1 passed",)),
    plugin_case("shard-3-of-2", env={"FLASHBUILD_SLICE_SHARD": "3/2"}, must=("FLASHBUILD_SLICE_SHARD",)),
    plugin_case("shard-digits", env={"FLASHBUILD_SLICE_SHARD": "1/" + "9" * 5000}, must=("FLASHBUILD_SLICE_SHARD",)),
    # ---- danger 3: --artifact-dir
    Case("shard-danger-artifact-foreign", "shard", (*build(), "--shard", "1/1", "--artifact-dir", f"{TMP}/webext"),
         setup=foreign("webext"), check=exists("webext/obj/important.bin"), danger=True, must_name=("--artifact-dir",),
         input="--shard 1/1 --artifact-dir webext (a dir with its own manifest.json and obj/important.bin)"),
    Case("shard-danger-artifact-stray-file", "shard", (*build(), "--shard", "1/1", "--artifact-dir", f"{TMP}/art"),
         setup=steps(shard_build(), write("art/notes.txt", "mine")), check=exists("art/notes.txt"), danger=True,
         must_name=("notes.txt",), input="--artifact-dir art: a shard artifact plus a file of the user's"),
    Case("shard-danger-artifact-obj-foreign", "shard", (*build(), "--shard", "1/1", "--artifact-dir", f"{TMP}/art"),
         setup=steps(shard_build(), write("art/obj/keep.txt", "mine")), check=exists("art/obj/keep.txt"), danger=True,
         must_name=("keep.txt",), input="--artifact-dir art: a shard artifact whose obj/ holds a file of the user's"),
    Case("shard-danger-artifact-obj-symlink", "shard", (*build(), "--shard", "1/1", "--artifact-dir", f"{TMP}/art"),
         setup=steps(shard_build(), write("precious/data", "keep"),
                     lambda tmp: __import__("shutil").rmtree(tmp / "art" / "obj"), symlink("art/obj", f"{TMP}/precious")),
         check=exists("precious/data"), danger=True, must_name=("obj",),
         input="--artifact-dir art: its obj/ a link to a dir of the user's"),
    Case("shard-danger-artifact-is-cache", "shard", (*build(), "--shard", "1/1", "--artifact-dir", f"{TMP}/cache"),
         setup=real_build, danger=True, must_name=("cache",), check=lambda tmp, run: None if any(
             (tmp / "cache").glob("*/obj/*.o")) else "the cache's objects were deleted",
         input="--artifact-dir = the cache dir"),
    Case("shard-artifact-inside-cache", "shard", (*build(), "--shard", "1/1", "--artifact-dir", f"{TMP}/cache/art"),
         must_name=("cache",), input="--artifact-dir inside the cache dir"),
    Case("shard-artifact-a-file", "shard", (*build(), "--shard", "1/1", "--artifact-dir", f"{TMP}/af"),
         setup=write("af", "x"), must_name=("af",), input="--artifact-dir af: a file"),
    Case("shard-artifact-rebuilt", "shard", (*build(), "--shard", "1/1", "--artifact-dir", f"{TMP}/art"),
         setup=shard_build(), expect="ok", must_name=("shard 1/1",), input="--artifact-dir art: the same shard's artifact"),
    # ---- shard counts and the dry run
    Case("shard-dry-billion", "shard", (*dry(), "--shard", "1/1000000000"), must_name=("--shard",)),
    Case("shard-dry-ten-million", "shard", (*dry(), "--shard", "1/10000000"), must_name=("--shard",)),
    Case("shard-5000-digits", "shard", (*dry(), "--shard", "1/" + "9" * 5000), must_name=("--shard",),
         input="--shard 1/99...9 (5000 digits)"),
    Case("shard-256", "shard", (*dry(), "--shard", "1/256"), expect="ok", must_name=("shard 256/256",)),
    Case("shard-dry-lists-its-own", "shard", (*dry(causal="both"), "--shard", "1/2"), expect="ok",
         must_name=("(1 kernel TU)",), check=absent("(2 kernel TUs)"), input="--causal both --shard 1/2 --dry-run"),
    costs_case("deep-object", '{"a":' * 100_000 + "1" + "}" * 100_000),
    costs_case("deep-array-value", '{"a": ' + deep() + "}"),
    costs_case("fifo", None, setup=fifo("costs.json")),
    costs_case("dev-zero", None, setup=symlink("costs.json", "/dev/zero")),
    costs_case("huge-int", '{"fwd_hdim64_fp16_sm80": ' + "9" * 5000 + "}"),
    costs_case("ninja-log-huge", "# ninja log v5\n0\t" + "9" * 5000 + "\t0\tobj/fwd_hdim64_fp16_sm80.o\t0\n"),
    costs_case("binary", b"\xff\xfe\x00"),
    costs_case("object-of-lists", '{"fwd_hdim64_fp16_sm80": [1]}'),
    costs_case("ok", '{"fwd_hdim64_fp16_sm80": 12.5}', expect="ok", must=("--costs",)),
    # ---- link over tampered manifests
    link_case("selection-empty", lambda m: m.update(selection={}), must=("selection",)),
    link_case("flags-empty", lambda m: m.update(flags={}), must=("flags",)),
    link_case("hdim-strings", lambda m: m["selection"].update(hdim=["64"]), must=("selection.hdim",)),
    link_case("profile-without-source", lambda m: m["selection"].update(profile="flash-attn-2"), must=("cli_args",)),
    link_case("objects-empty-deleted", lambda m: m.update(objects={}), must=("'objects'",), more=(delete_objects,)),
    link_case("object-deleted", None, must=("missing",), more=(delete_objects,)),
    link_case("object-symlink", None, must=("missing",), more=(obj_to_link,)),
    link_case("tu-name-dotdot", lambda m: m.update(units=["../../../x"], objects={"../../../x": "0" * 64}),
              must=("TU name",)),
    link_case("key-edited", lambda m: m.update(key="sm80-edited"), must=("edited",)),
    link_case("nvcc-flags-edited", lambda m: m["flags"].update(nvcc_flags=["-DX=1"]), must=("edited",)),
    link_case("no-command-shard-missing", None, must=("missing shard 2/2",),
              more=(shard_build(count=2), edit_shard(lambda m: m.pop("command")))),
    link_case("deep-json", None, more=(put_file("art/manifest.json", deep()),)),
    link_case("fifo", None, more=(lambda tmp: os.unlink(tmp / "art" / "manifest.json"), fifo("art/manifest.json"))),
    link_case("dev-zero", None, more=(lambda tmp: os.unlink(tmp / "art" / "manifest.json"),
                                      symlink("art/manifest.json", "/dev/zero"))),
    link_case("shard-index-text", lambda m: m["shard"].update(index="1"), must=("'shard'",)),
    Case("shard-build-lock-dir", "shard", (*build(), "--shard", "1/1", "--artifact-dir", f"{TMP}/art"), setup=lock_dir,
         must_name=("is damaged", "flashbuild clean"), input="--shard 1/1 over a build dir whose .lock is a directory"),
    # ---- matrices
    matrix_case("shards-billion", SOME_MATRIX + "shards = 1000000000\n", must=("matrix.shards",)),
    matrix_case("shards-257", SOME_MATRIX + "shards = 257\n", must=("matrix.shards",)),
    matrix_case("shards-5000-digits", SOME_MATRIX + "shards = " + "9" * 5000 + "\n"),
    matrix_case("cell-shards-billion", '[[cells]]\nname = "x"\nhdim = 64\nshards = 1000000000\n', must=("cells[0].shards",)),
    matrix_case("deep", SOME_MATRIX + "exclude = " + deep(60_000) + "\n"),
    matrix_case("features-two-sets", SOME_MATRIX + 'features = ["local", "softcap"]\n', expect="ok", must=("-fL", "-fS"),
                check=no_cell_split),
    Case("shard-cell-case", "shard", ("--config", "ci", "--cell", "SMOKE-SM80", "--dry-run"),
         must_name=("--cell smoke-sm80",), input="--config ci --cell SMOKE-SM80"),
    # ---- danger 4: clean and list touch only flashbuild's entries
    Case("cache-danger-clean-all-foreign", "cache", ("clean", "--all"), setup=foreign(), expect="ok", danger=True,
         check=exists("cache/my-chrome-ext/obj/important.bin"),
         input="FLASHBUILD_CACHE_DIR=ws, ws/my-chrome-ext/manifest.json; clean --all"),
    Case("cache-danger-clean-all-foreign-ninja", "cache", ("clean", "--all"), setup=foreign(ninja=True), expect="ok",
         danger=True, check=exists("cache/my-chrome-ext/obj/important.bin"),
         input="clean --all: a foreign dir with a build.ninja and a manifest.json"),
    Case("cache-danger-clean-foreign-key", "cache", ("clean", "my-chrome-ext"), setup=foreign(), danger=True,
         must_name=("my-chrome-ext",), check=exists("cache/my-chrome-ext/obj/important.bin")),
    Case("cache-danger-clean-all-other-key", "cache", ("clean", "--all"), danger=True, expect="ok",
         setup=foreign(manifest='{"key": "another-key", "variants": []}'),
         check=exists("cache/my-chrome-ext/obj/important.bin"), input="clean --all: a dir whose manifest names another key"),
    Case("cache-list-foreign", "cache", ("list",), setup=foreign(), expect="ok", must_name=("not a flashbuild build dir",),
         check=absent("my-chrome-ext  0 variants")),
    Case("cache-list-entry-without-marker", "cache", ("list",), expect="ok", must_name=(KEY,),
         setup=cache_entry(manifest=json.dumps({"key": KEY, "variants": []}), marker=False),
         input="list: an entry made before the marker (its manifest names its key)"),
    # ---- danger 5: links inside a cache entry
    Case("cache-danger-generated-symlink", "cache", build(), setup=moved_out("generated", "elsewhere"), danger=True,
         check=empty("elsewhere"), must_name=("symbolic link",), input="KEY/generated -> a dir outside; build"),
    Case("cache-danger-obj-symlink", "cache", build(), setup=moved_out("obj", "elsewhere"), danger=True,
         check=empty("elsewhere"), must_name=("symbolic link",), input="KEY/obj -> a dir outside; build"),
    Case("cache-danger-ninja-log-symlink", "cache", build(), setup=moved_out(".ninja_log", "log.txt"), danger=True,
         check=outside("log.txt"), must_name=("symbolic link",), input="KEY/.ninja_log -> a file outside; build"),
    Case("cache-danger-lock-symlink", "cache", build(), setup=moved_out(".lock", "lockfile"), danger=True,
         check=outside("lockfile"), must_name=("symbolic link",), input="KEY/.lock -> a file outside; build"),
    Case("cache-danger-build-ninja-symlink", "cache", build(), setup=moved_out("build.ninja", "b.ninja"), danger=True,
         check=outside("b.ninja"), must_name=("symbolic link",), input="KEY/build.ninja -> a file outside; build"),
    # ---- the cache: odd locks, manifests, races
    Case("cache-clean-lock-loop", "cache", ("clean", "--all"), setup=lock_loop, expect="ok", check=build_dir_gone,
         input="clean --all: KEY/.lock a symlink to itself"),
    Case("cache-clean-lock-dir", "cache", ("clean", "--all"), setup=lock_dir, expect="ok", check=build_dir_gone,
         input="clean --all: KEY/.lock a directory"),
    Case("cache-list-manifest-dev-zero", "cache", ("list",), setup=planted_manifest(link_to="/dev/zero"), expect="ok",
         must_name=(KEY,), input="list: KEY/manifest.json -> /dev/zero"),
    Case("cache-list-manifest-fifo", "cache", ("list",), setup=steps(planted_manifest(), fifo(f"cache/{KEY}/manifest.json")),
         expect="ok", must_name=(KEY,), input="list: KEY/manifest.json a FIFO"),
    Case("cache-clean-manifest-fifo", "cache", ("clean", "--all"), expect="ok", check=build_dir_gone,
         setup=steps(planted_manifest(), fifo(f"cache/{KEY}/manifest.json")), input="clean --all: manifest.json a FIFO"),
    Case("cache-list-manifest-deep", "cache", ("list",), setup=planted_manifest(deep()), expect="ok", must_name=(KEY,),
         input="list: a 100,000-deep manifest.json"),
    Case("cache-clean-manifest-deep", "cache", ("clean", "--all"), setup=planted_manifest(deep()), expect="ok",
         check=build_dir_gone, input="clean --all: a 100,000-deep manifest.json"),
    Case("cache-list-manifest-huge", "cache", ("list",), setup=steps(planted_manifest(""),
                                                                     huge_file(f"cache/{KEY}/manifest.json", 40 * 2**20)),
         expect="ok", must_name=(KEY,), input="list: a 40 MiB manifest.json"),
    Case("cache-clean-all-twice-at-once", "cache", ("list",), setup=both_cleans, expect="ok", check=two_cleans,
         input="two `clean --all` at once over three entries"),
    # ---- environment
    Case("env-cache-dir-leading-space", "env", build(), env={"FLASHBUILD_CACHE_DIR": f" {TMP}/c2"},
         must_name=("FLASHBUILD_CACHE_DIR",), check=outside(" ")),
    Case("env-cache-dir-trailing-space", "env", build(), env={"FLASHBUILD_CACHE_DIR": f"{TMP}/c2 "},
         must_name=("FLASHBUILD_CACHE_DIR",), check=outside("c2 ")),
    Case("env-cache-dir-not-utf8", "env", build(), env={"FLASHBUILD_CACHE_DIR": f"{TMP}/c\udcff"},
         must_name=("FLASHBUILD_CACHE_DIR",), check=outside("c\udcff"), input="FLASHBUILD_CACHE_DIR=TMP/c$'\\xff'"),
    Case("env-cache-dir-unknown-user", "env", build(), env={"FLASHBUILD_CACHE_DIR": "~no-such-user-48/c"},
         must_name=("FLASHBUILD_CACHE_DIR",)),
    Case("env-cache-dir-unknown-user-list", "env", ("list",), env={"FLASHBUILD_CACHE_DIR": "~no-such-user-48/c"},
         must_name=("FLASHBUILD_CACHE_DIR",)),
    # ---- the CLI
    Case("cli-artifact-dir-unknown-user", "cli", (*dry(), "--shard", "1/1", "--artifact-dir", "~no-such-user-48/a"),
         must_name=("--artifact-dir",)),
    Case("cli-build-dir-unknown-user", "cli", build("--build-dir", "~no-such-user-48/b"), must_name=("--build-dir",)),
    Case("cli-csv-unknown-user", "cli", ("bench", "--results", f"{TMP}/r.json", "--csv", "~no-such-user-48/o.csv"),
         setup=write("r.json", results()), must_name=("--csv",)),
    *[Case(f"cli-{flag}-twice", "cli", (*dry(), f"--{flag}", value), must_name=(f"--{flag}",))
      for flag, value in (("hdim", "128"), ("dtype", "bf16"), ("arch", "sm90"), ("direction", "bwd"), ("causal", "on"))],
    Case("cli-hdim-twice-same", "cli", (*dry(), "--hdim", "64"), expect="ok", must_name=("hdim 64",)),
    Case("cli-features-twice", "cli", (*dry(), "--features", "local", "--features", "softcap"), must_name=("--features",)),
    Case("cli-config-twice", "cli", ("--config", "ci-compile", "--config", "dev-hdim64-sm90", "--dry-run"),
         must_name=("--config",)),
    Case("cli-build-dir-twice", "cli", (*dry(), "--build-dir", f"{TMP}/a", "--build-dir", f"{TMP}/b"),
         must_name=("--build-dir",)),
    Case("cli-features-comma", "cli", (*sel(), "--features", ",", "--dry-run"), must_name=("--features",)),
    Case("cli-features-commas-spaces", "cli", (*sel(), "--features", " , , ", "--dry-run"), must_name=("--features",)),
    Case("cli-features-none-none", "cli", (*sel(), "--features", "none,none", "--dry-run"), must_name=("none",),
         check=absent("combined with ;")),
    Case("cli-features-none-local", "cli", ("--hdim", "64", "--dtype", "fp16", "--arch", "sm80", "--direction", "fwd",
                                            "--features", "none,local", "--dry-run"), must_name=("local",)),
    Case("cli-config-300", "cli", ("--config", "x" * 300, "--dry-run"), must_name=("--config",),
         input="--config xxx...x (300 characters)"),
    Case("cli-config-300-toml", "cli", ("--config", "x" * 300 + ".toml", "--dry-run"), must_name=("--config",),
         input="--config xxx...x.toml (300 characters)"),
    Case("cli-source-300", "cli", ("--source", "s" * 300, "--profile", "flash-attn-2", "--dry-run"),
         must_name=("--source",), input="--source sss...s (300 characters)"),
    Case("cli-build-dir-loop", "cli", build("--build-dir", f"{TMP}/loop"), setup=symlink("loop", f"{TMP}/loop"),
         must_name=("loop",), input="--build-dir loop (a symlink to itself)"),
    Case("cli-build-dir-not-utf8", "cli", build("--build-dir", f"{TMP}/b\udcff"), must_name=("--build-dir",),
         check=outside("b\udcff"), input="--build-dir TMP/b$'\\xff'"),
    Case("cli-build-dir-300", "cli", build("--build-dir", f"{TMP}/" + "b" * 300), must_name=("--build-dir",),
         input="--build-dir bbb...b (300 characters)"),
    Case("cli-artifact-dir-not-utf8", "cli", (*build(), "--shard", "1/1", "--artifact-dir", f"{TMP}/a\udcff"),
         must_name=("--artifact-dir",), input="--artifact-dir TMP/a$'\\xff'"),
    Case("cli-costs-300", "cli", (*dry(), "--shard", "1/1", "--costs", "c" * 300), must_name=("--costs",),
         input="--costs ccc...c (300 characters)"),
    Case("cli-hdim-5000-digits", "cli", dry(hdim="9" * 5000), must_name=("--hdim",), input="--hdim 99...9 (5000 digits)"),
    Case("cli-jobs-5000-digits", "cli", build("--jobs", "9" * 5000), must_name=("--jobs",), input="--jobs 99...9 (5000 digits)"),
    Case("cli-run-not-executable", "cli", ("run", *sel(), "--", "./noexec.py"), setup=write("noexec.py", "print(1)\n", 0o644),
         must_name=("not executable",), check=absent("not found on PATH")),
    Case("cli-run-no-such-file", "cli", ("run", *sel(), "--", "./nope.py"), must_name=("no such file",),
         check=absent("not found on PATH")),
    Case("cli-csv-is-the-results-file", "cli", ("bench", "--results", f"{TMP}/r.json", "--csv", f"{TMP}/r.json"),
         setup=write("r.json", results()), must_name=("--csv",), check=unchanged("r.json", results())),
    Case("cli-json-is-the-compare-file", "cli", ("bench", "--results", f"{TMP}/r.json", "--compare", f"{TMP}/r.json",
                                                 "--json", f"{TMP}/r.json"),
         setup=write("r.json", results()), must_name=("--json",), check=unchanged("r.json", results())),
    Case("cli-shard-digits-index", "cli", (*dry(), "--shard", "9" * 5000 + "/1"), must_name=("--shard",),
         input="--shard 99...9/1 (5000 digits)"),
    # ---- presets
    Case("config-hdim-5000-digits", "config", ("--config", f"{TMP}/c.toml", "--dry-run"),
         setup=write("c.toml", '[selection]\nhdim = [' + "9" * 5000 + ']\ndtype = ["fp16"]\n'), must_name=("c.toml",),
         input="c.toml: hdim = [99...9 (5000 digits)]"),
    Case("config-deep-array", "config", ("--config", f"{TMP}/c.toml", "--dry-run"),
         setup=write("c.toml", "[selection]\nhdim = " + deep(60_000) + "\n"), must_name=("c.toml",),
         input="c.toml: hdim = 60,000 nested arrays"),
    # ---- results files
    results_case("seqlen-huge-plot", results(row(seqlen=10**400)), extra=("--plot", f"{TMP}/p.png"), must_name=("r.json",),
                 input="--results r.json (seqlen 10**400) --plot p.png"),
    Case("results-fifo", "results", ("bench", "--results", f"{TMP}/r.json"), setup=fifo("r.json"), must_name=("r.json",),
         input="--results r.json: a FIFO"),
    Case("results-compare-dev-zero", "results", ("bench", "--results", f"{TMP}/good.json", "--compare", f"{TMP}/r.json"),
         setup=steps(write("good.json", results()), symlink("r.json", "/dev/zero")), must_name=("r.json",),
         input="--compare r.json -> /dev/zero"),
    results_case("duplicate-rows", results([ROW_A, {**ROW_A, "ms": 3.0}]), must_name=("same",),
                 input="--results r.json: two rows of the same variant, seqlen and backend"),
    results_case("ansi-escapes", results(row(variant="fwd_hdim64_fp16_sm80\x1b[2J\x1b[31mred")), expect="ok",
                 must_name=("fwd_hdim64",), check=absent("\x1b["), input="--results r.json: a variant name holding ANSI escapes"),
]
