"""Shards and link (flashbuild/ci/shard.py, link.py): the cost-balanced split, shard artifacts built
end to end over real ninja and the stand-in nvcc of tests/helpers.py, and every check `flashbuild
link` makes before linking: a mismatch names the shard and the field."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from flashbuild.pipeline import builder, costs, graph
from flashbuild.ci import shard as sharding
from flashbuild.errors import SelectionError
from flashbuild.selection.variants import select
from helpers import make_fake_cuda, run_cli

SELECTION = ["--hdim", "64,128", "--dtype", "fp16", "--arch", "sm90", "--direction", "fwd,bwd", "--causal", "both",
             "--no-local"]
# 41 TUs: fwd/bwd x 2 hdims x causal both x plain/softcap, 8 fwd kernel TUs (and the plain non-causal hdim-128
# forward's 128-key kernel), 16 bwd kernel TUs
SELECTION_TUS = 41


CPU_TORCH = "2.13.0+cpu"


def cpu_torch(monkeypatch) -> None:
    """Mock a CPU-only torch for a whole test, whichever torch is installed: set before the shards are
    built, since each records the torch version that `link` then compares with this machine's."""
    from flashbuild import env

    monkeypatch.setattr(env, "torch_info", lambda: env.TorchInfo(CPU_TORCH, None, Path("/t")))


def units(**selection):
    plan = builder.make_plan(select(**selection), builder.BuildOptions())
    return plan.units


# ---------------------------------------------------------------- the split

def test_the_split_puts_each_tu_in_one_shard_balanced_by_cost():
    tus = units(hdim="64,128", dtype="fp16,bf16", arch="sm90", direction="fwd,bwd,splitkv")
    result = sharding.split(tus, 4)
    names = [n for shard in result.shards for n in shard]
    assert sorted(names) == sorted(u.name for u in tus) and len(names) == 48 + 16 + 32 + 16 + 2 + 16 + 2
    # + fwd kernel TUs, bwd kernel TUs (and their ordered twins), split-KV's kernel TUs, the plain non-causal
    # hdim-128 forwards' 128-key kernels, split-KV's decode tiles
    assert max(result.seconds) - min(result.seconds) <= costs.ESTIMATE_SECONDS["bwd"] * costs.FEATURE_FACTOR
    assert sharding.split(tus, 4) == result  # every machine computes the same split


def test_the_estimate_orders_kinds_as_measured():
    by_name = {u.name: costs.estimate(u) for u in units(hdim=64, dtype="fp16", arch="sm80,sm90", causal="off")}
    assert by_name["bwd_hdim64_fp16_sm80"] > by_name["fwd_hdim64_fp16_sm80"]
    splitkv = [by_name[f"splitkv_hdim64_fp16_sm80{part}"] for part in ("", "_kernel")]
    assert max(splitkv) < costs.ESTIMATE_SECONDS["splitkv"]  # split: each part less than the whole
    assert by_name["fwd_hdim64_fp16_sm80_local_softcap"] > by_name["fwd_hdim64_fp16_sm80"]
    for variant in ("fwd_hdim64_fp16_sm90", "bwd_hdim64_fp16_sm90"):  # split: each part less than the whole
        whole = by_name[variant.replace("sm90", "sm80")]
        parts = [by_name[name] for name in (variant, f"{variant}_kernel", f"{variant}_kernel_ordered")
                 if name in by_name]
        assert len(parts) == (2 if variant.startswith("fwd") else 3) and max(parts) < whole
    # The Hopper TUs in the order one build measured them (costs.HOPPER_SECONDS): the launch that compiles its group's
    # small kernels, the backward's kernels, the forward's (and split-KV's, the same kernel), the launches of host
    # code alone.
    assert by_name["bwd_hdim64_fp16_sm90"] > by_name["bwd_hdim64_fp16_sm90_kernel"] > by_name["fwd_hdim64_fp16_sm90_kernel"]
    assert by_name["splitkv_hdim64_fp16_sm90_kernel"] == by_name["fwd_hdim64_fp16_sm90_kernel"]
    assert by_name["fwd_hdim64_fp16_sm90_kernel"] > by_name["fwd_hdim64_fp16_sm90"]
    both = {u.name: costs.estimate(u) for u in units(hdim=64, dtype="fp16", arch="sm90", causal="both",
                                                     direction="bwd")}
    assert both["bwd_hdim64_fp16_causal_sm90"] < both["bwd_hdim64_fp16_sm90"]  # host code alone: its group's first
    # compiles the small kernels


def test_a_split_variants_tus_have_kinds_of_their_own():
    kinds = {u.name: u.kind for u in units(hdim="32,64", dtype="fp16", arch="sm90", causal="off")}
    assert kinds["fwd_hdim64_fp16_sm90"] == "fwd/launch"
    assert kinds["fwd_hdim64_fp16_sm90_kernel"] == "fwd/kernel"
    assert kinds["bwd_hdim64_fp16_sm90"] == "bwd/launch"
    assert kinds["bwd_hdim64_fp16_sm90_kernel"] == "bwd/kernel"
    assert kinds["bwd_hdim64_fp16_sm90_kernel_ordered"] == "bwd/kernel_ordered"
    assert kinds["bwd_hdim32_fp16_sm90"] == "bwd" and kinds["bwd_hdim64_fp16_sm90_local_softcap"] == "bwd/launch"
    assert kinds["fwd_hdim32_fp16_sm90"] == "fwd/launch" and kinds["fwd_hdim32_fp16_sm90_kernel"] == "fwd/kernel"
    assert kinds["splitkv_hdim64_fp16_sm90"] == "splitkv/launch" and kinds["splitkv_hdim64_fp16_sm90_kernel"] == "splitkv/kernel"
    # every kind a Hopper variant's TUs have is costed (and the Ampere path's split-KV parts)
    hopper = {u.kind for u in units(hdim="64", dtype="fp16", arch="sm90", causal="off") if u.variant.family.name == "hopper"}
    assert hopper - {"bwd/launch", "splitkv/launch"} <= set(costs.HOPPER_SECONDS)  # the launches: by small kernels
    assert set(costs.SPLIT_SHARE) == {"splitkv/kernel", "splitkv/launch"}


def test_measured_costs_change_the_split(tmp_path):
    tus = units(hdim=64, dtype="fp16", arch="sm80", direction="fwd", features=[])  # 2 TUs
    log = tmp_path / ".ninja_log"
    log.write_text("# ninja log v7\n0\t90000\t1\tobj/fwd_hdim64_fp16_causal_sm80.o\tabc\n"
                   "0\t1000\t1\tobj/fwd_hdim64_fp16_sm80.o\tdef\n0\t5\t1\tobj/flash_api.o\t1\n")
    costs = sharding.read_costs(log)
    assert costs == {"fwd_hdim64_fp16_causal_sm80": 90.0, "fwd_hdim64_fp16_sm80": 1.0, "flash_api": 0.005}
    result = sharding.split(tus, 2, costs, "log")
    assert result.seconds == (90.0, 1.0)
    (tmp_path / "c.json").write_text('{"fwd_hdim64_fp16_sm90": "slow"}')
    with pytest.raises(SelectionError, match=r"fwd_hdim64_fp16_sm90: expected seconds .* found 'slow'"):
        sharding.read_costs(tmp_path / "c.json")


@pytest.mark.parametrize("text", ["3", "0/4", "5/4", "1/0", "a/b", ""])
def test_a_bad_shard_is_refused_with_the_form(text):
    with pytest.raises(SelectionError, match=r"--shard .*use --shard 1/"):
        sharding.parse_shard(text)


# ---------------------------------------------------------------- shards end to end (stand-in nvcc)

@pytest.fixture
def fake_cuda(tmp_path, fake_root, cache, monkeypatch) -> Path:
    home = make_fake_cuda(tmp_path)
    monkeypatch.setenv("CUDA_HOME", str(home))
    monkeypatch.setenv("FAKE_NVCC_LOG", str(tmp_path / "nvcc.log"))
    return home


def build_shards(tmp_path: Path, count: int, *extra: str) -> list[Path]:
    out = []
    for i in range(1, count + 1):
        target = tmp_path / f"art{i}"
        result = run_cli(*SELECTION, *extra, "--shard", f"{i}/{count}", "--artifact-dir", str(target))
        assert result.exit_code == 0, result.output
        assert f"shard {i}/{count} of " in result.stdout
        out.append(target)
    return out


def compiled(log: Path) -> list[str]:
    """The TU names the stand-in nvcc compiled (the -o of each kernel compile)."""
    calls = [json.loads(line) for line in log.read_text().splitlines()] if log.is_file() else []
    return [Path(c[c.index("-o") + 1]).stem for c in calls if "-c" in c]


def test_each_shard_compiles_only_its_part_and_writes_objects_and_a_manifest(tmp_path, fake_cuda):
    artifacts = build_shards(tmp_path, 3)
    manifests = [json.loads((a / "manifest.json").read_text()) for a in artifacts]
    units_per_shard = [m["units"] for m in manifests]
    assert sorted(sum(units_per_shard, [])) == sorted(manifests[0]["variants"])
    assert len(manifests[0]["variants"]) == SELECTION_TUS
    assert sorted(compiled(tmp_path / "nvcc.log")) == sorted(manifests[0]["variants"])  # nothing compiled twice
    first = manifests[0]
    assert first["shard"] == {"index": 1, "count": 3} and first["split"]["costs"] == "estimate"
    assert first["versions"]["nvcc"].startswith("13.0") and first["toolkit"]["cutlass"] != "missing"
    assert first["selection"]["features"] == ["softcap"] and first["flags"]["nvcc_flags"] == []
    assert len(first["tree_digest"]) == 16
    for artifact, manifest in zip(artifacts, manifests):
        assert sorted(p.stem for p in (artifact / "obj").glob("*.o")) == sorted(manifest["units"])


def test_link_checks_then_stops_where_torch_has_no_cuda(tmp_path, fake_cuda, monkeypatch):
    cpu_torch(monkeypatch)
    artifacts = build_shards(tmp_path, 2)
    result = run_cli("link", *map(str, artifacts))
    assert result.exit_code == 1
    assert "checked 2 shards of sm90-fp16-h64+128-fwd+bwd-c01-fS-" in result.stderr
    assert f"they fit, but cannot link the extension: torch {CPU_TORCH} has no CUDA" in result.stderr
    assert "install a CUDA build of torch" in result.stderr and "Traceback" not in result.output


def edit_manifest(artifact: Path, change) -> None:
    path = artifact / "manifest.json"
    manifest = json.loads(path.read_text())
    change(manifest)
    path.write_text(json.dumps(manifest))


@pytest.mark.parametrize("change, words", [
    (lambda m: m["flags"].update(nvcc_flags=["-DX=1"]), "shard 3/3 (art3) does not fit shard 1/3 (art1): "
                                                        "flags.nvcc_flags differs"),
    (lambda m: m["versions"].update(torch="2.11.0+cu130"), "versions.torch differs (\"2.11.0+cu130\" vs"),
    (lambda m: m["toolkit"].update(cutlass="3.9.0"), "toolkit.cutlass differs"),
    (lambda m: m.update(tree_digest="0" * 16), "tree_digest differs"),
    (lambda m: m["split"].update(digest="x", costs="--costs other.json"), "split differs (its costs: --costs "
                                                                          "other.json"),
    (lambda m: m["shard"].update(index=1), "shard 1/3 given twice"),
    (lambda m: m.update(units=m["units"] + ["fwd_hdim64_fp16_sm90"]), "fwd_hdim64_fp16_sm90 is in two shards"),
])
def test_a_shard_that_does_not_fit_is_named_with_the_field(tmp_path, fake_cuda, change, words):
    artifacts = build_shards(tmp_path, 3)
    edit_manifest(artifacts[2], change)
    result = run_cli("link", *map(str, artifacts))
    assert result.exit_code == 1, result.output
    assert words in result.stderr.replace(f"{tmp_path}/", ""), result.stderr


def test_missing_shards_tampered_objects_and_odd_dirs_are_named(tmp_path, fake_cuda):
    artifacts = build_shards(tmp_path, 3)
    missing = run_cli("link", str(artifacts[0]), str(artifacts[2]))
    assert "missing shard 2/3 of sm90-fp16-h64+128-fwd+bwd-c01-fS-" in missing.stderr
    assert "--shard 2/3` and link all 3" in missing.stderr
    obj = next((artifacts[1] / "obj").glob("*.o"))
    obj.write_bytes(b"tampered")
    tampered = run_cli("link", *map(str, artifacts))
    assert f"shard 2/3 ({artifacts[1]}): obj/{obj.name} is not the object its manifest hashed" in tampered.stderr
    (tmp_path / "empty").mkdir()
    odd = run_cli("link", str(tmp_path / "empty"))
    assert odd.exit_code == 1 and "no manifest.json, so not a shard artifact" in odd.stderr


def test_link_refuses_a_machine_whose_tree_differs(tmp_path, fake_cuda, fake_root):
    artifacts = build_shards(tmp_path, 2)
    header = fake_root / "kernels" / "ampere" / "bwd_launch.h"
    header.write_text(header.read_text() + "// edited after the shards were built\n")
    result = run_cli("link", *map(str, artifacts))
    assert result.exit_code == 1
    assert "this machine does not fit the shards: tree_digest is" in result.stderr


def cuda_torch_standin(tmp_path: Path, fake_cuda: Path, monkeypatch) -> None:
    """A CUDA torch, stood in for: the link spec and the host compiler are the stand-in nvcc."""
    api = tmp_path / "flash_api.cpp"
    api.write_text("// the binding\n")
    monkeypatch.setattr(builder, "why_no_link", lambda options: "--compile-only" if options.compile_only else "")
    monkeypatch.setattr(builder, "torch_link_spec", lambda plan: graph.LinkSpec(
        module_name=plan.module_name, cxx=fake_cuda / "bin" / "nvcc", cxx_std="c++20", include_dirs=(),
        defines=("-DTORCH_EXTENSION_NAME=" + plan.module_name,), torch_lib=Path("/torch/lib"), api_sources=(api,)))


def test_linked_shards_equal_a_one_machine_build(tmp_path, fake_cuda, monkeypatch):
    """With a CUDA torch (cuda_torch_standin), the link runs the same binding and link commands over the same objects
    as a one-machine build."""
    cuda_torch_standin(tmp_path, fake_cuda, monkeypatch)
    artifacts = build_shards(tmp_path, 4)
    log = tmp_path / "nvcc.log"
    log.unlink()
    linked = run_cli("link", *map(str, artifacts), "--build-dir", str(tmp_path / "linked"))
    assert linked.exit_code == 0, linked.output
    assert compiled(log) == ["flash_api"]  # the binding only: no kernel TU compiled again
    link_calls = [json.loads(line) for line in log.read_text().splitlines()]
    one = run_cli(*SELECTION, "--build-dir", str(tmp_path / "one"))
    assert one.exit_code == 0, one.output
    calls = [json.loads(line) for line in log.read_text().splitlines()][len(link_calls):]

    def link_line(all_calls, build_dir):
        (call,) = [c for c in all_calls if "-shared" in c]
        return [a.replace(str(build_dir), "BUILD") for a in call]

    assert link_line(link_calls, tmp_path / "linked") == link_line(calls, tmp_path / "one")
    assert [line for line in linked.stdout.splitlines() if line.startswith("module")] == \
           [line.replace("holds", "module") for line in one.stdout.splitlines() if line.startswith("module")]
    manifest = json.loads((tmp_path / "linked" / "manifest.json").read_text())
    assert manifest["extension"] and len(manifest["linked_from"]) == 4
    assert (tmp_path / "linked" / manifest["extension"]).is_file()
    for name in manifest["variants"]:
        assert (tmp_path / "linked" / "obj" / f"{name}.o").read_bytes() == \
               (tmp_path / "one" / "obj" / f"{name}.o").read_bytes()


def test_a_linked_build_loads_without_compiling_until_its_sources_change(tmp_path, fake_cuda, fake_root,
                                                                          monkeypatch):
    """load() of the linked selection in the linked build dir imports the extension link wrote (ninja
    has no records of the adopted objects: the digests recorded at link time stand in for them);
    after a kernel header changes, it builds again, as it would anywhere."""
    api = tmp_path / "flash_api.cpp"
    api.write_text("// the binding\n")
    monkeypatch.setattr(builder, "why_no_link", lambda options: "--compile-only" if options.compile_only else "")
    monkeypatch.setattr(builder, "torch_link_spec", lambda plan: graph.LinkSpec(
        module_name=plan.module_name, cxx=fake_cuda / "bin" / "nvcc", cxx_std="c++20", include_dirs=(),
        defines=("-DTORCH_EXTENSION_NAME=" + plan.module_name,), torch_lib=Path("/torch/lib"), api_sources=(api,)))
    imported = []
    monkeypatch.setattr(builder, "import_build", lambda plan: imported.append(plan.extension_path) or "module")
    artifacts = build_shards(tmp_path, 2)
    linked_dir = tmp_path / "linked"
    assert run_cli("link", *map(str, artifacts), "--build-dir", str(linked_dir)).exit_code == 0
    log = tmp_path / "nvcc.log"
    log.unlink()
    selection, options = builder.parse_request(hdim="64,128", dtype="fp16", arch="sm90", direction="fwd,bwd",
                                               causal="both", no_local=True, build_dir=linked_dir)
    assert builder.load(selection, options) == "module"
    assert compiled(log) == [] and imported == [builder.make_plan(selection, options).extension_path]
    header = fake_root / "kernels" / "ampere" / "bwd_launch.h"
    header.write_text(header.read_text() + "// edited after the link\n")
    assert builder.load(selection, options) == "module"
    assert len(compiled(log)) == SELECTION_TUS  # not current any more: every TU compiled here, as a fresh build would


def test_an_external_tree_matrix_shards_and_links_with_its_stubs_once(tmp_path, fake_cuda, monkeypatch):
    """A [matrix] with source + profile (a flash-attn 2 layout of empty files): its cells are slices of
    that tree; each shard compiles its TUs plus the stubs TU (what the slice leaves out), which the link
    takes once."""
    from test_profiles import fake_fa2_tree

    monkeypatch.delenv("FLASHBUILD_ROOT")
    cpu_torch(monkeypatch)  # before the shards: they record the torch they were built with, and link compares
    tree = fake_fa2_tree(tmp_path)
    config = tmp_path / "fa2.toml"
    config.write_text(f'[matrix]\nsource = "{tree}"\nprofile = "flash-attn-2"\nhdim = [64, 128]\ndtype = "fp16"\n'
                      f'arch = "sm80"\ndirection = "fwd"\ngroup_by = ["hdim"]\nshards = 2\n')
    cells = json.loads(run_cli("matrix", str(config), "--format", "json").stdout)
    assert [c["name"] for c in cells] == ["h64", "h128"]
    assert cells[0]["args"].startswith(f"--source {tree} --profile flash-attn-2 --hdim 64")
    artifacts = []
    for i in (1, 2):
        artifacts.append(tmp_path / f"fa{i}")
        built = run_cli("build", "--config", str(config), "--cell", "h64", "--shard", f"{i}/2", "--artifact-dir",
                        str(artifacts[-1]))
        assert built.exit_code == 0, built.output
    manifests = [json.loads((a / "manifest.json").read_text()) for a in artifacts]
    assert [m["extra_objects"] for m in manifests] == [["flashbuild_missing"]] * 2
    assert sorted(manifests[0]["units"] + manifests[1]["units"]) == sorted(manifests[0]["variants"])
    linked = run_cli("link", *map(str, artifacts))
    assert "checked 2 shards of flash-attn-2-2.8-sm80-fp16-h64-fwd-c01-" in linked.stderr
    assert f"cannot link the extension: torch {CPU_TORCH} has no CUDA" in linked.stderr


@pytest.mark.compile
def test_real_nvcc_shards_of_the_synthetic_kernel_fit(tmp_path, fake_root, cache, monkeypatch):
    """The same with real nvcc (seconds): real objects, the toolkit read from the real CUTLASS."""
    from flashbuild import env

    if env.find_nvcc() is None:
        pytest.skip("nvcc not found")
    monkeypatch.delenv("CUDA_HOME", raising=False)
    cpu_torch(monkeypatch)
    args = ["--hdim", "64", "--dtype", "fp16", "--arch", "sm80,sm90", "--direction", "fwd", "--causal", "off",
            "--features", "none", "--jobs", "1"]
    artifacts, names = [], []
    for i in (1, 2):
        artifacts.append(tmp_path / f"real{i}")
        built = run_cli(*args, "--shard", f"{i}/2", "--artifact-dir", str(artifacts[-1]))
        assert built.exit_code == 0, built.output
        objs = sorted((artifacts[-1] / "obj").glob("*.o"))
        assert objs and all(obj.read_bytes()[:4] == b"\x7fELF" for obj in objs)
        names += [obj.stem for obj in objs]
    assert sorted(names) == ["fwd_hdim64_fp16_sm80", "fwd_hdim64_fp16_sm90", "fwd_hdim64_fp16_sm90_kernel"]
    linked = run_cli("link", *map(str, artifacts))
    assert f"they fit, but cannot link the extension: torch {CPU_TORCH} has no CUDA" in linked.stderr


@pytest.mark.parametrize("step", ["shard", "link"])
def test_a_damaged_build_dir_is_a_clear_error_for_shards_and_link(tmp_path, fake_cuda, cache, monkeypatch, step):
    """A shard or a link whose build dir was damaged (its lock file a directory: a dir where a file belongs) is the
    build's named error with the command that removes it, as a one-machine build's is, not a traceback."""
    cuda_torch_standin(tmp_path, fake_cuda, monkeypatch)  # so that the link gets as far as the build dir
    artifacts = build_shards(tmp_path, 2)
    (build_dir,) = [p for p in cache.iterdir() if p.is_dir()]
    lock = build_dir / ".lock"
    lock.unlink(missing_ok=True)
    lock.mkdir()
    if step == "shard":
        result = run_cli(*SELECTION, "--shard", "1/2", "--artifact-dir", str(tmp_path / "again"))
    else:
        result = run_cli("link", *map(str, artifacts))
    assert result.exit_code == 1, result.output
    assert "Traceback" not in result.output and isinstance(result.exception, SystemExit), result.output
    assert f"build dir {build_dir} is damaged" in result.output and "flashbuild clean" in result.output, result.output
