"""build.ninja: exactly the selected TUs, depfiles, binding and link edges only when linking, flags."""

from __future__ import annotations

import re
import shlex
import subprocess
from pathlib import Path

import pytest

from flashbuild import env
from flashbuild.pipeline import costs, graph
from flashbuild.selection.variants import CompileFlags, select
from flashbuild.sources import profile, units

GEN = Path("/b/generated")
BUILTIN = profile.load("flashbuild")
TOOLS = graph.Toolchain(nvcc=Path("/cuda/bin/nvcc"),
                        include_dirs=(Path("/src/kernels"), Path("/site/cutlass/include")),
                        gencodes=BUILTIN.gencodes, flags=BUILTIN.nvcc_flags)
LINK = graph.LinkSpec(module_name="_flashbuild_0123abcd", cxx=Path("/usr/bin/c++"), cxx_std="c++17",
                      include_dirs=(Path("/torch/include"), Path("/py/include"), Path("/cuda/include")),
                      defines=("-DTORCH_EXTENSION_NAME=_flashbuild_0123abcd", '-DPYBIND11_COMPILER_TYPE="_gcc"'),
                      torch_lib=Path("/torch/lib"), api_sources=(Path("/src/kernels/binding/flash_api.cpp"),),
                      tree_include_dirs=(Path("/src/kernels"),), cxx_flags=BUILTIN.cxx_flags)


def text_for(link=None, flags=CompileFlags(), tools=TOOLS, **selection):
    tus = units.units(select(**selection), BUILTIN)
    return tus, graph.graph_text(tus, toolchain=tools, gen_dir=GEN, flags=flags, link=link)


def edges(text: str) -> dict[str, str]:
    """output -> rule, for every build statement."""
    return dict(re.findall(r"^build (\S+): (\w+)", text, re.M))


def variable(text: str, name: str) -> str:
    """A top-level variable's value, with ninja's `$\\n` line continuations joined."""
    joined = re.sub(r" \$\n\s+", " ", text)
    return re.search(rf"^{name} = (.*)$", joined, re.M).group(1)


def test_exactly_one_nvcc_edge_per_selected_tu():
    variants, text = text_for(hdim="64,128", dtype="fp16", arch="sm80,sm90", direction="fwd", causal="off")
    nvcc_edges = {out for out, rule in edges(text).items() if rule == "nvcc"}
    fatbin_edges = {out for out, rule in edges(text).items() if rule == "fatbin"}
    assert nvcc_edges | fatbin_edges == {f"obj/{v.name}.o" for v in variants}
    assert len(nvcc_edges) == 8  # 4 plain TUs and their local+softcap TUs (sm90's: the Hopper launches)
    # sm90's Hopper kernels, device-only: one fatbin edge each (the plain hdim-128 one's 128-key kernel too)
    kernels = {f"obj/fwd_hdim{h}_fp16_sm90{f}_kernel.o" for h in (64, 128) for f in ("", "_local_softcap")}
    assert fatbin_edges == kernels | {"obj/fwd_hdim128_fp16_sm90_kernel_keys128.o"}
    for v in variants:
        rule = "fatbin" if v.part in ("kernel", "kernel_keys128") else "nvcc"
        assert f"build obj/{v.name}.o: {rule} {GEN}/{v.name}.cu\n" in text
    assert "hdim32" not in text and "bf16" not in text
    _, narrowed = text_for(hdim="64,128", dtype="fp16", arch="sm80,sm90", direction="fwd", causal="off", features=[])
    assert len([rule for rule in edges(narrowed).values() if rule == "nvcc"]) == 4 and "_local" not in narrowed


def test_a_cold_build_starts_the_longest_tus_first():
    """ninja starts edges in the file's order when no .ninja_log times rank them: after the binding
    (test_a_cold_build_starts_the_binding_first), the estimated longest TUs come first (the launches that compile
    their group's small kernels, costs.HOPPER_SECONDS), the launches of host code alone last."""
    tus, text = text_for(link=LINK, hdim=64, dtype="fp16", arch="sm90", causal="off")
    order = [out for out, rule in edges(text).items() if rule in ("nvcc", "fatbin", "cxx")]
    by_name = {u.name: u for u in tus}
    kernel_order = [out[len("obj/"):-len(".o")] for out in order if out[len("obj/"):-len(".o")] in by_name]
    estimates = [costs.estimate(by_name[name]) for name in kernel_order]
    assert estimates == sorted(estimates, reverse=True) and len(set(estimates)) > 2
    assert kernel_order[:2] == ["bwd_hdim64_fp16_sm90", "splitkv_hdim64_fp16_sm90"]
    assert kernel_order[-1] == "fwd_hdim64_fp16_sm90"


def test_each_edge_compiles_for_its_own_arch_with_a_depfile():
    _, text = text_for(hdim=64, dtype="fp16", arch="sm80,sm90", causal="off")
    blocks = dict(re.findall(r"^build (obj/\S+): nvcc \S+\n((?:  .*\n)+)", text, re.M))
    assert "gencode = -gencode arch=compute_80,code=sm_80" in blocks["obj/fwd_hdim64_fp16_sm80.o"]
    assert "gencode = -gencode arch=compute_90a,code=sm_90a" in blocks["obj/fwd_hdim64_fp16_sm90.o"]
    rule = re.search(r"^rule nvcc\n((?:  .*\n)+)", text, re.M).group(1)
    assert "command = $nvcc $nvcc_flags $gencode -MD -MF $out.d -c $in -o $out" in rule
    assert "depfile = $out.d" in rule and "deps = gcc" in rule
    # A kernel TU: device code alone, its fatbin kept beside the object, which embeds it with nvcc and no
    # launcher (a compiler cache would not see the .incbin's file)
    kernel_block = re.search(r"^build obj/fwd_hdim64_fp16_sm90_kernel.o: fatbin \S+\n((?:  .*\n)+)", text, re.M)
    assert "gencode = -gencode arch=compute_90a,code=sm_90a" in kernel_block.group(1)
    rule = re.sub(r" \$\n\s+", " ", re.search(r"^rule fatbin\n((?:  .*\n)+)", text, re.M).group(1))
    assert "command = $nvcc $nvcc_flags $gencode -MD -MF $out.d -fatbin $in -o $out && mv -f $out $out.fatbin && " \
           "$nvcc_embed -Xcompiler -fPIC -x c++ -DFLASHBUILD_EMBED_FATBIN -c $in -o $out" in rule
    assert "depfile = $out.d" in rule and "deps = gcc" in rule
    assert graph.fatbin_path("fwd_hdim64_fp16_sm90_kernel") == "obj/fwd_hdim64_fp16_sm90_kernel.o.fatbin"


def test_nvcc_flags_match_the_contract():
    _, text = text_for(hdim=64, dtype="fp16", arch="sm90")
    flags = shlex.split(variable(text, "nvcc_flags"))
    for flag in ["-std=c++17", "-O3", "--use_fast_math", "--expt-relaxed-constexpr", "--expt-extended-lambda",
                 "-fPIC", "-I/src/kernels", f"-I{GEN}", "-I/site/cutlass/include", "-DNDEBUG"]:
        assert flag in flags
    assert flags[flags.index("-fPIC") - 1] == "-Xcompiler"
    assert flags[flags.index("-fvisibility=hidden") - 1] == "-Xcompiler"
    assert "-G" not in flags and "-lineinfo" not in flags
    assert variable(text, "nvcc") == "/cuda/bin/nvcc"


def test_debug_and_lineinfo_flags():
    _, debug = text_for(flags=CompileFlags(debug=True), hdim=64, dtype="fp16", arch="sm90")
    flags = shlex.split(variable(debug, "nvcc_flags"))
    assert "-G" in flags and "-lineinfo" in flags and "-DNDEBUG" not in flags
    _, lineinfo = text_for(flags=CompileFlags(lineinfo=True, nvcc_flags=("-Xptxas=-v",)), hdim=64, dtype="fp16",
                           arch="sm90")
    flags = shlex.split(variable(lineinfo, "nvcc_flags"))
    assert "-lineinfo" in flags and "-G" not in flags and "-DNDEBUG" in flags
    assert flags[-1] == "-Xptxas=-v"


def test_launcher_prefixes_the_compile_commands_not_the_link():
    tools = graph.Toolchain(nvcc=TOOLS.nvcc, include_dirs=TOOLS.include_dirs, gencodes=TOOLS.gencodes,
                            flags=TOOLS.flags, launcher="ccache")
    _, text = text_for(link=LINK, tools=tools, hdim=64, dtype="fp16", arch="sm90")
    assert variable(text, "nvcc") == "ccache /cuda/bin/nvcc"
    assert variable(text, "cxx") == "ccache /usr/bin/c++"
    assert variable(text, "nvcc_embed") == "/cuda/bin/nvcc"  # a kernel TU's fatbin embedding: never cached
    link_rule = re.search(r"^rule link\n  command = (.*)$", text, re.M).group(1)
    assert link_rule.startswith("$linker -shared") and variable(text, "linker") == "/cuda/bin/nvcc"


def test_no_binding_or_link_edges_without_linking():
    _, text = text_for(hdim=64, dtype="fp16", arch="sm90")
    assert set(edges(text).values()) == {"nvcc", "fatbin"}
    assert "rule link" not in text and "rule cxx" not in text and "flash_api" not in text


def test_binding_and_link_edges_when_linking():
    variants, text = text_for(link=LINK, hdim=64, dtype="fp16", arch="sm90", causal="both")
    e = edges(text)
    assert e["obj/flash_api.o"] == "cxx"
    assert e["_flashbuild_0123abcd.so"] == "link"
    link_inputs = re.search(r"^build _flashbuild_0123abcd\.so: link (.*)$", re.sub(r" \$\n\s+", " ", text), re.M)
    assert sorted(link_inputs.group(1).split()) == sorted([f"obj/{v.name}.o" for v in variants] + ["obj/flash_api.o"])
    cxx_flags = shlex.split(variable(text, "cxx_flags"))
    assert "-std=c++17" in cxx_flags and "-fPIC" in cxx_flags
    assert "-fvisibility=hidden" in cxx_flags  # an extension exports only its PyInit
    assert {"-I/torch/include", "-I/py/include", "-I/cuda/include", "-I/src/kernels", f"-I{GEN}"} <= set(cxx_flags)
    assert '-DPYBIND11_COMPILER_TYPE="_gcc"' in cxx_flags  # survives shell quoting as a string literal
    rule = re.search(r"^rule cxx\n((?:  .*\n)+)", text, re.M).group(1)
    assert "depfile = $out.d" in rule and "-MD -MF $out.d" in rule
    link_rule = re.search(r"^rule link\n  command = (.*)$", text, re.M).group(1)
    assert "-shared -cudart shared $in $link_flags -o $out.tmp && mv -f $out.tmp $out" in link_rule
    link_flags = shlex.split(variable(text, "link_flags"))
    for flag in ["-L/torch/lib", "-lc10", "-lc10_cuda", "-ltorch", "-ltorch_cpu", "-ltorch_cuda", "-ltorch_python"]:
        assert flag in link_flags
    assert link_flags[link_flags.index("-rpath,/torch/lib") - 1] == "-Xlinker"


@pytest.mark.skipif(env.find_ninja() is None, reason="ninja not installed")
def test_ninja_accepts_the_file(tmp_path):
    variants, text = text_for(link=LINK, hdim="64,128", dtype="fp16", arch="sm80,sm90", causal="both")
    (tmp_path / "build.ninja").write_text(text)
    out = subprocess.run([str(env.find_ninja()), "-C", str(tmp_path), "-t", "targets", "all"],
                         capture_output=True, text=True, check=True).stdout
    targets = {line.split(":")[0] for line in out.splitlines()}
    assert {f"obj/{v.name}.o" for v in variants} <= targets
    assert "_flashbuild_0123abcd.so" in targets


@pytest.mark.skipif(env.find_ninja() is None, reason="ninja not installed")
def test_a_cold_build_starts_the_binding_first(tmp_path):
    """With no .ninja_log to rank edges by, ninja starts ready edges in file order: the binding's
    edge comes first, so it compiles beside the kernel TUs instead of after the first one when the
    edges outnumber the jobs (the sm90 main job: 18 kernel TUs and the binding on 16 jobs)."""
    gen = tmp_path / "generated"
    gen.mkdir()
    source = tmp_path / "flash_api.cpp"
    source.touch()
    link = graph.LinkSpec(**{**LINK.__dict__, "api_sources": (source,)})
    tus = units.units(select(hdim=64, dtype="fp16", arch="sm90"), BUILTIN)
    for unit in tus:
        (gen / f"{unit.name}.cu").touch()
    (tmp_path / "build.ninja").write_text(graph.graph_text(tus, toolchain=TOOLS, gen_dir=gen, flags=CompileFlags(),
                                                           link=link))
    dry_run = subprocess.run([str(env.find_ninja()), "-C", str(tmp_path), "-n", "-j", "1"], capture_output=True,
                             text=True, check=True).stdout
    started = re.findall(r"^\[\d+/\d+\] (\S+)", dry_run, re.M)
    assert started[0] == "binding" and started[-1] == "link", started
    assert started[1:-1] == [u.name for u in costs.longest_first(tus)]  # then the kernel TUs, longest first


def test_the_abi_probe_gates_the_binding_alone():
    """Without torch imported by the plan, a probe edge writes torch's ABI macros (restat), first in
    the file; the API source's compile force-includes them and waits for it; no kernel TU does."""
    probe = graph.AbiProbe(python=Path("/py/bin/python3"), script=Path("/src/flashbuild/pipeline/torch_abi.py"),
                           torch_root=Path("/torch"), torch_version="2.13.0+cpu")
    link = graph.LinkSpec(**{**LINK.__dict__, "abi_probe": probe})
    _, text = text_for(link=link, hdim=(64,), dtype=("fp16",), arch=("sm90",), direction=("fwd",))
    builds = re.findall(r"^build (\S+): (\w+)(.*)$", text, re.M)
    assert builds[0] == (graph.TORCH_ABI_FILE, "torch_abi", " | /torch/version.py")
    assert builds[1] == (graph.BINDING_OBJECT, "cxx", f" /src/kernels/binding/flash_api.cpp | {graph.TORCH_ABI_FILE}")
    assert all(graph.TORCH_ABI_FILE not in rest for out, rule, rest in builds[2:] if rule in ("nvcc", "fatbin"))
    assert variable(text, "cxx_flags").endswith(f"-include {graph.TORCH_ABI_FILE}")
    assert variable(text, "torch") == "/torch 2.13.0+cpu"  # in the command: a moved or new torch reruns it
    assert re.search(r"^rule torch_abi\n  command = \$python \$torch_abi_script \$out \$torch\n(  .*\n)*  restat = 1",
                     text, re.M)
    _, plain = text_for(link=LINK, hdim=(64,), dtype=("fp16",), arch=("sm90",), direction=("fwd",))
    assert "torch_abi" not in plain and "-include" not in variable(plain, "cxx_flags")
