"""Real nvcc, no GPU: the whole pipeline on a tiny synthetic kernel (seconds), compile errors, two
processes building one key, and the real forward kernel compiled for sm_80 and sm_90a."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

from flashbuild.pipeline import builder
from flashbuild import env
from helpers import BWD_MEASURED_SPILLS, REPO, make_root, plain_selection, requires_nvcc, shared_build

pytestmark = [requires_nvcc, pytest.mark.compile]

SLICE = ["--hdim", "64", "--dtype", "fp16", "--direction", "fwd", "--no-local", "--no-softcap"]  # plain TUs only


def flashbuild(*args: str, cache: Path, root: Path | None = None) -> subprocess.CompletedProcess:
    """`python -m flashbuild ARGS` with its own cache dir (and kernel tree)."""
    environ = {**os.environ, "FLASHBUILD_CACHE_DIR": str(cache)}
    environ.pop("FLASHBUILD_ROOT", None)
    if root is not None:
        environ["FLASHBUILD_ROOT"] = str(root)
    return subprocess.run([sys.executable, "-m", "flashbuild", *args], capture_output=True, text=True, env=environ,
                          cwd=REPO)


def objects(cache: Path) -> dict[str, bytes]:
    (build_dir,) = [p for p in cache.iterdir() if p.is_dir()]
    return {p.stem: p.read_bytes() for p in sorted((build_dir / "obj").glob("*.o"))}


def test_pipeline_compiles_each_arch_then_rebuilds_only_what_changed(tmp_path):
    root, cache = make_root(tmp_path), tmp_path / "cache"
    args = [*SLICE, "--arch", "sm80,sm90", "--causal", "off", "--compile-only"]
    first = flashbuild(*args, cache=cache, root=root)
    assert first.returncode == 0, first.stderr
    built = objects(cache)
    # sm90's Hopper forward has its kernel in a TU of its own
    assert sorted(built) == ["fwd_hdim64_fp16_sm80", "fwd_hdim64_fp16_sm90", "fwd_hdim64_fp16_sm90_kernel"]
    assert b"-arch sm_80 " in built["fwd_hdim64_fp16_sm80"]    # ptxas options embedded with the cubin
    assert all(b"-arch sm_90a " in built[f"fwd_hdim64_fp16_sm90{part}"] for part in ("", "_kernel"))
    assert "[1/3] fwd_hdim64_fp16_sm" in first.stderr and "[3/3] fwd_hdim64_fp16_sm" in first.stderr
    assert "compiled 3 targets in" in first.stderr
    assert "compiled 3 kernel objects in" in first.stdout

    started = time.monotonic()
    again = flashbuild(*args, cache=cache, root=root)
    assert again.returncode == 0 and "nothing to compile: up to date" in again.stderr
    assert time.monotonic() - started < 10

    (root / "kernels" / "ampere" / "unrelated.h").write_text("#pragma once\n")
    assert "nothing to compile" in flashbuild(*args, cache=cache, root=root).stderr
    (build_dir,) = cache.iterdir()
    assert builder._ninja_has_no_work(build_dir)  # load()'s fast-path check
    # The depfiles see an edit, and only the TUs that include the edited header recompile: sm80's
    # forward is the Ampere path's, sm90's the Hopper family's (its launch header: the launch and the kernel
    # TU; its kernel header: the kernel TU alone).
    for header, rebuilt in (("ampere/fwd_launch.h", ["fwd_hdim64_fp16_sm80"]),
                            ("hopper/fwd_launch.h", ["fwd_hdim64_fp16_sm90", "fwd_hdim64_fp16_sm90_kernel"]),
                            ("hopper/fwd_kernel.h", ["fwd_hdim64_fp16_sm90_kernel"])):
        launch = root / "kernels" / header
        launch.write_text(launch.read_text() + "// edited\n")
        assert not builder._ninja_has_no_work(build_dir)
        edited = flashbuild(*args, cache=cache, root=root)
        count = len(rebuilt)
        assert edited.returncode == 0 and f"compiled {count} target{'s' if count > 1 else ''} in" in edited.stderr, \
            edited.stderr
        assert sorted(re.findall(rf"\[\d/{count}\] (\S+) ", edited.stderr)) == rebuilt


def test_compile_error_names_every_failed_variant_and_file_line(tmp_path):
    broken = "#pragma once\n#include \"common/params.h\"\nnamespace flashbuild { this is not C++; }\n"
    root, cache = make_root(tmp_path, broken, hopper_fwd_launch_header=broken), tmp_path / "cache"
    result = flashbuild(*SLICE, "--arch", "sm90", "--causal", "both", "--compile-only", cache=cache, root=root)
    assert result.returncode == 1
    assert "Traceback" not in result.stderr
    last = result.stderr.strip().splitlines()[-1]
    assert last.startswith("flashbuild: error: build failed: 4 targets failed: ")  # each variant's launch and kernel
    for name, words in [("fwd_hdim64_fp16_sm90", "not causal"), ("fwd_hdim64_fp16_causal_sm90", "causal")]:
        assert f"{name} (fwd, hdim 64, fp16, {words}, sm90): " in last
        assert f"{name}_kernel (fwd, hdim 64, fp16, {words}, sm90: its hopper kernel alone, device-only): " in last
        assert f"  FAILED {name} (" in result.stderr and f"  FAILED {name}_kernel (" in result.stderr  # as it happened
    assert f"{root}/kernels/hopper/fwd_launch.h:3: error:" in last  # sm90's forward: the Hopper family
    assert "build.log" in last


def test_two_processes_building_one_key_build_it_once(tmp_path):
    root, cache = make_root(tmp_path), tmp_path / "cache"
    args = [sys.executable, "-m", "flashbuild", *SLICE, "--arch", "sm80", "--causal", "both", "--compile-only"]
    environ = {**os.environ, "FLASHBUILD_CACHE_DIR": str(cache), "FLASHBUILD_ROOT": str(root)}
    procs = [subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=environ)
             for _ in range(2)]
    results = [p.communicate(timeout=300) for p in procs]
    assert [p.returncode for p in procs] == [0, 0], results
    stderrs = sorted(err for _, err in results)
    assert sum("compiled 2 targets" in err for err in stderrs) == 1  # one built ...
    assert sum("nothing to compile" in err for err in stderrs) == 1  # ... the other waited, then found it done
    assert len(objects(cache)) == 2


@pytest.mark.skipif(env.torch_info() is None or env.torch_info().cuda is not None,
                    reason="needs a torch without CUDA (the CI machine's)")
def test_plain_build_with_cpu_torch_compiles_then_stops(tmp_path):
    root, cache = make_root(tmp_path), tmp_path / "cache"
    result = flashbuild(*SLICE, "--arch", "sm80", "--causal", "off", cache=cache, root=root)
    assert result.returncode == 1
    message = result.stderr.strip().splitlines()[-1]
    assert "compiled 1 kernel object" in message and "has no CUDA" in message and "--compile-only" in message
    assert list(objects(cache)) == ["fwd_hdim64_fp16_sm80"]


def test_a_feature_tu_instantiates_the_kernel_with_its_features_mask(tmp_path):
    """The synthetic kernel with one feature compiled in: the plain TU and the *_local TU, each
    instantiating run_fwd with its mask as the last template argument (0 and 1)."""
    root, cache = make_root(tmp_path), tmp_path / "cache"
    result = flashbuild("--hdim", "64", "--dtype", "fp16", "--direction", "fwd", "--no-softcap", "--arch", "sm80",
                        "--causal", "off", "--compile-only", cache=cache, root=root)
    assert result.returncode == 0, result.stderr
    assert sorted(objects(cache)) == ["fwd_hdim64_fp16_sm80", "fwd_hdim64_fp16_sm80_local"]
    (build_dir,) = cache.iterdir()
    for name, mask in (("fwd_hdim64_fp16_sm80", 0), ("fwd_hdim64_fp16_sm80_local", 1)):
        symbols = subprocess.run(["nm", "-C", str(build_dir / "obj" / f"{name}.o")], capture_output=True, text=True,
                                 check=True).stdout
        assert re.search(rf"flashbuild::run_fwd<80, 64, \(flashbuild::DType\)\d, false, {mask}>", symbols), name


def test_real_forward_kernel_compiles_for_sm80_and_sm90(real_fwd_build):
    """The repo's own kernels/ (not a stand-in): one forward TU per arch, in parallel (the session's
    shared build, which the inspect tests read too)."""
    if not (REPO / "kernels" / "ampere" / "fwd_launch.h").is_file():
        pytest.fail("kernels/ampere/fwd_launch.h is missing: the forward kernel has not landed")
    result = real_fwd_build.process
    assert result.returncode == 0, result.stderr[-3000:]
    built = objects(real_fwd_build.cache)
    assert sorted(built) == ["fwd_hdim64_fp16_sm80", "fwd_hdim64_fp16_sm90", "fwd_hdim64_fp16_sm90_kernel"]
    assert b"-arch sm_80 " in built["fwd_hdim64_fp16_sm80"]
    assert all(b"-arch sm_90a " in built[f"fwd_hdim64_fp16_sm90{part}"] for part in ("", "_kernel"))
    print(f"real forward TUs (sm80 + sm90, 2 jobs): {real_fwd_build.seconds:.1f}s\n{result.stderr}")


def test_real_backward_of_large_head_dims_compiles_for_sm86(tmp_path):
    """sm86 (and sm89, the same limit) gives a block 99 KB of shared memory: hdim 192 and 256 take
    the 32-row backward tiles there (32 x 64 and 32 x 32, kernels/ampere/bwd_traits.h), which no GPU
    here runs; their static_asserts (shared memory, MMA tiles dividing the blocks) must hold and the
    TUs compile."""
    cache = tmp_path / "cache"
    args = ["--hdim", "192,256", "--dtype", "fp16", "--direction", "bwd", "--no-local", "--no-softcap",
            "--causal", "off", "--compile-only", "--jobs", "2"]
    started = time.monotonic()
    result = flashbuild(*args, "--arch", "sm86", cache=cache)
    assert result.returncode == 0, result.stderr[-3000:]
    built = objects(cache)
    assert sorted(built) == ["bwd_hdim192_fp16_sm86", "bwd_hdim256_fp16_sm86"]
    assert all(b"-arch sm_86 " in obj for obj in built.values())
    print(f"sm86 backward TUs, hdim 192 + 256 (2 jobs): {time.monotonic() - started:.1f}s")


# ---------------------------------------------------------------- the Hopper TUs and their kernel TUs

NM_LINE = re.compile(r"^(?:[0-9a-f]+| +) (\S) (.*)$")


def ninja_deps(build_dir: Path, target: str) -> str:
    """What ninja recorded from the target's depfile (the headers whose edit recompiles it)."""
    return subprocess.run([str(env.find_ninja()), "-C", str(build_dir), "-t", "deps", target], capture_output=True,
                          text=True, check=True).stdout


def check_kernel_tus(build_dir: Path, variant: str, direction: str) -> None:
    """Each of the variant's kernel TUs (the forward's one; the backward's main kernel and its ordered twin)
    alone defines the fatbin symbol the variant's object needs, with its one Hopper kernel inside (cuobjdump
    reads it from .nv_fatbin); the variant's object holds no main kernel (the forward's: none at all; the
    backward's: at most its head dim and dtype's small kernels), and its depfile has the descriptors' header and not the
    main loop. No TU of the variant reaches an Ampere-path kernel (the binding answers what the Hopper
    kernel cannot take)."""
    from flashbuild.debug import inspection

    parts = {"fwd": ["kernel"], "bwd": ["kernel", "kernel_ordered"]}[direction]
    names = [variant] + [f"{variant}_{part}" for part in parts]
    symbols = {}
    for name in names:
        lines = subprocess.run(["nm", str(build_dir / "obj" / f"{name}.o")], capture_output=True, text=True,
                               check=True).stdout.splitlines()
        symbols[name] = {(entry.group(2), entry.group(1)) for entry in map(NM_LINE.match, lines)
                         if entry and entry.group(2).startswith("flashbuild_fatbin_")}
    assert symbols == {variant: {(f"flashbuild_fatbin_{variant}_{part}", "U") for part in parts},
                       **{f"{variant}_{part}": {(f"flashbuild_fatbin_{variant}_{part}", "R")} for part in parts}}, symbols
    launch = re.findall(r"Function : (\S+)", inspection.sass_text(build_dir / "obj" / f"{variant}.o"))
    assert not [k for k in launch if f"hopper10{direction}_kernel" in k], launch
    for part in parts:
        sass = inspection.sass_text(build_dir / "obj" / f"{variant}_{part}.o")
        (kernel,) = re.findall(r"Function : (\S+)", sass)
        assert f"hopper10{direction}_kernel" in kernel and "HGMMA" in sass
        assert kernel.endswith("ELb1EEEvNS0_9BwdKernelIT_XT0_EXT1_EE6ParamsE") == (part == "kernel_ordered") or \
            direction == "fwd", kernel
        deps = ninja_deps(build_dir, f"obj/{variant}_{part}.o")
        assert f"hopper/{direction}_kernel.h" in deps and f"ampere/{direction}_kernel.h" not in deps, deps
    if direction == "fwd":
        assert not launch
    launch_deps = ninja_deps(build_dir, f"obj/{variant}.o")  # the launch: descriptors, no main kernel code
    mainloop = {"fwd": "hopper/fwd_mainloop.h", "bwd": "hopper/bwd_mainloop.h"}[direction]
    assert f"hopper/{direction}_params.h" in launch_deps and mainloop not in launch_deps, launch_deps
    assert f"ampere/{direction}_kernel.h" not in launch_deps, launch_deps


def test_the_hopper_forward_launches_the_kernel_its_kernel_tu_embeds(real_fwd_build):
    """The objects of an sm90 forward variant, on the session's real build (no link possible without a CUDA
    torch): fwd_hdim64_fp16_sm90.o needs the fatbin fwd_hdim64_fp16_sm90_kernel.o alone defines."""
    assert real_fwd_build.process.returncode == 0, real_fwd_build.process.stderr[-3000:]
    check_kernel_tus(real_fwd_build.build_dir, "fwd_hdim64_fp16_sm90", "fwd")


def test_the_hopper_backward_launches_the_kernels_its_kernel_tus_embed():
    """The same for the backward (plain hdim 64, causal and not: 6 TUs). Its small kernels (the Ampere path's
    dsum kernels, common/bwd_dsum.h, and the dQ conversion) compile once, in the first launch TU of the head dim
    and dtype (the non-causal one): the causal launch is host code alone and calls the launches defined there.
    The build is the session's shared one (helpers.shared_build; test_compile_bwd_uniform.py reads it too)."""
    started = time.monotonic()
    build_dir, _ = shared_build(plain_selection("bwd", 64, "both"))
    assert sorted(p.stem for p in (build_dir / "obj").glob("*.o")) == [
        f"bwd_hdim64_fp16{c}_sm90{part}" for c in ("_causal", "") for part in ("", "_kernel", "_kernel_ordered")]
    for variant in ("bwd_hdim64_fp16_sm90", "bwd_hdim64_fp16_causal_sm90"):
        check_kernel_tus(build_dir, variant, "bwd")
    from flashbuild.debug import inspection

    def symbols(name: str) -> set[tuple[str, str]]:
        lines = subprocess.run(["nm", str(build_dir / "obj" / f"{name}.o")], capture_output=True, text=True,
                               check=True).stdout.splitlines()
        return {(entry.group(2), entry.group(1)) for entry in map(NM_LINE.match, lines) if entry}

    first, other = symbols("bwd_hdim64_fp16_sm90"), symbols("bwd_hdim64_fp16_causal_sm90")
    needed = {name for name, kind in other if kind == "U" and "BwdSmallKernels" in name}
    assert len(needed) == 2 and needed <= {name for name, kind in first if kind in "TW"}, (needed, first)
    kernels = {name: re.findall(r"Function : (\S+)", inspection.sass_text(build_dir / "obj" / f"{name}.o"))
               for name in ("bwd_hdim64_fp16_sm90", "bwd_hdim64_fp16_causal_sm90")}
    assert kernels["bwd_hdim64_fp16_causal_sm90"] == [], kernels
    assert {"dot_do_o", "convert_dq"} <= {word for k in kernels["bwd_hdim64_fp16_sm90"]
                                          for word in ("dot_do_o", "convert_dq") if word in k}, kernels
    # hdim 64's step is FlashAttention-3's (bwd_tile: kDsFirst and kDqFirst; benchmarks/hopper_bwd_fa3/): dS^T
    # is stored (STSM) before dV's product, the first HGMMA with its A operand in registers, is issued; and
    # neither kernel spills more than the 4 bytes of its warpgroup's dQ hand-off barrier id (kDqHalves: one
    # store, one load a step, in the kernel timed in benchmarks/hopper_bwd_hand_off/; the step itself is compiled
    # as a lambda so that it does not spill: hopper/bwd_mainloop.h, mma_keys); the causal kernel's measured spills are
    # BWD_MEASURED_SPILLS'.
    for name in [f"bwd_hdim64_fp16{c}_sm90{part}" for c in ("", "_causal") for part in ("_kernel", "_kernel_ordered")]:
        obj = build_dir / "obj" / f"{name}.o"
        main = [r for r in inspection.inspect_object(name, obj) if "bwd_kernel" in r.kernel]
        stored, loaded = BWD_MEASURED_SPILLS.get(name, (4, 4))
        assert len(main) == 1 and main[0].spill_store_bytes <= stored and main[0].spill_load_bytes <= loaded, main
        sass = inspection.sass_text(obj)
        first_rs = re.search(r"HGMMA\.64x64x16\.F32 R\d+, R\d+, gdesc", sass)
        assert first_rs and 0 <= sass.find("STSM") < first_rs.start(), name
    print(f"sm90 backward hdim 64, 2 Hopper launch + 4 kernel TUs (2 jobs; 0 s if another test built it): "
          f"{time.monotonic() - started:.1f}s")


def test_the_hopper_splitkv_launches_the_kernels_its_kernel_tus_embed(tmp_path):
    """The Hopper split-KV at hdim 64 (4 TUs): the launch TU (descriptors, the append, index-check and combine
    kernels; no main loop) needs the fatbins of three kernel TUs, the 64-row split kernel's, the decode tile's and the
    decode tile's over pairs of K/V heads (hopper/splitkv_decode_*.h), each of which alone defines its own, with its
    one kernel inside and no spill. The only CPU test that compiles the split-KV's launch code, which no other tier
    reaches without a GPU."""
    from flashbuild.debug import inspection

    cache, variant = tmp_path / "cache", "splitkv_hdim64_fp16_sm90"
    started = time.monotonic()
    result = flashbuild("--hdim", "64", "--dtype", "fp16", "--arch", "sm90", "--direction", "splitkv", "--causal", "off",
                        "--no-local", "--no-softcap", "--compile-only", "--jobs", "2", cache=cache)
    assert result.returncode == 0, result.stderr[-3000:]
    (build_dir,) = [p for p in cache.iterdir() if p.is_dir()]
    parts = {"kernel": "hopper10fwd_kernel", "kernel_decode": "hopper21splitkv_decode_kernel",
             "kernel_decode_pairs": "hopper21splitkv_decode_kernel"}
    assert sorted(objects(cache)) == [variant] + [f"{variant}_{part}" for part in parts]
    symbols = {}
    for name in [variant] + [f"{variant}_{part}" for part in parts]:
        lines = subprocess.run(["nm", str(build_dir / "obj" / f"{name}.o")], capture_output=True, text=True,
                               check=True).stdout.splitlines()
        symbols[name] = {(entry.group(2), entry.group(1)) for entry in map(NM_LINE.match, lines)
                         if entry and entry.group(2).startswith("flashbuild_fatbin_")}
    assert symbols == {variant: {(f"flashbuild_fatbin_{variant}_{part}", "U") for part in parts},
                       **{f"{variant}_{part}": {(f"flashbuild_fatbin_{variant}_{part}", "R")} for part in parts}}, symbols
    launch = re.findall(r"Function : (\S+)", inspection.sass_text(build_dir / "obj" / f"{variant}.o"))
    assert {"splitkv_combine_kernel", "append_kv_kernel", "cache_index_check_kernel"} == \
        {word for k in launch for word in ("splitkv_combine_kernel", "append_kv_kernel", "cache_index_check_kernel")
         if word in k}, launch
    assert not [k for k in launch if any(marker in k for marker in parts.values())], launch
    launch_deps = ninja_deps(build_dir, f"obj/{variant}.o")
    assert "hopper/splitkv_launch.h" in launch_deps and "hopper/fwd_mainloop.h" not in launch_deps, launch_deps
    for part, marker in parts.items():
        name = f"{variant}_{part}"
        (report,) = inspection.inspect_object(name, build_dir / "obj" / f"{name}.o")
        assert marker in report.kernel and report.arch == "sm_90a", report
        assert report.spill_store_bytes == 0 and report.spill_load_bytes == 0, report
        if part == "kernel_decode_pairs":  # the head-dim-128 tile's traits over pairs of K/V heads
            assert "FwdTraitsILi128E" in report.kernel, report
    for part in ("kernel_decode", "kernel_decode_pairs"):
        assert "hopper/splitkv_decode_kernel.h" in ninja_deps(build_dir, f"obj/{variant}_{part}.o")
    assert "hopper/splitkv_decode_kernel.h" not in ninja_deps(build_dir, f"obj/{variant}_kernel.o")
    print(f"sm90 split-KV hdim 64, 1 launch + 3 kernel TUs (2 jobs): {time.monotonic() - started:.1f}s")
