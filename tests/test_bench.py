"""`flashbuild bench` without a GPU: problem sizes and FLOPs by the benchmark standard (benchmarks/README.md), the table,
CSV/JSON, --compare (and its errors for a file of the wrong format), the plot, and the command
reporting an earlier --json file."""

from __future__ import annotations

import csv
import io
import json

import click
import pytest

from flashbuild.debug import bench
from flashbuild.debug.bench import Result, problem
from flashbuild.selection.variants import Variant
from helpers import run_cli

FWD = Variant("fwd", 128, "fp16", False, "sm90")
FWD_CAUSAL = Variant("fwd", 64, "bf16", True, "sm90")
BWD = Variant("bwd", 128, "fp16", True, "sm90")


def fake_results(speed: float = 1.0) -> list[Result]:
    rows = []
    for variant in (FWD, FWD_CAUSAL, BWD):
        for seqlen in (1024, 4096):
            for i, backend in enumerate(bench.BACKENDS):
                p = problem(variant, seqlen)
                na = backend == "sdpa-cudnn" and variant is FWD_CAUSAL
                ms = None if na else (1.0 + 0.1 * i) * seqlen / 1024 / speed
                rows.append(bench.result(variant, p, backend, ms, 10, "No available kernel" if na else ""))
    return rows


def test_problem_sizes_follow_16k_tokens_and_model_dim_2048():
    p = problem(FWD, 1024)
    assert (p.batch, p.nheads, p.seqlen, p.hdim) == (16, 16, 1024, 128)
    p = problem(Variant("fwd", 64, "fp16", False, "sm80"), 16384)
    assert (p.batch, p.nheads) == (1, 32)
    assert problem(Variant("fwd", 256, "fp16", False, "sm80"), 2048).nheads == 8


def test_flops_fwd_halved_when_causal_bwd_two_and_a_half_times():
    p = problem(FWD, 4096)                       # b 4, h 16, s 4096, d 128
    assert bench.flops(p) == 4 * 4 * 16 * 4096 ** 2 * 128
    causal = problem(Variant("fwd", 128, "fp16", True, "sm90"), 4096)
    assert bench.flops(causal) == bench.flops(p) / 2
    assert bench.flops(problem(BWD, 4096)) == 2.5 * bench.flops(causal)
    assert bench.tflops(p, 1.0) == pytest.approx(bench.flops(p) / 1e-3 / 1e12)


def test_seqlens_parse_and_reject_bad_values():
    assert bench.parse_seqlens("1024, 4k,16k,1024") == (1024, 4096, 16384)
    for bad in ("", "0", "1x", "-4"):
        with pytest.raises(ValueError):
            bench.parse_seqlens(bad)


def test_enough_input_sets_to_rotate_past_l2():
    p = problem(FWD, 1024)
    per_set = 16 * 1024 * 16 * 128 * 2 * 4
    n = bench.input_sets(p, None, l2_bytes=60 << 20, with_grad=False)
    assert n >= 2 and n * per_set > 2 * (60 << 20)
    assert bench.input_sets(p, None, l2_bytes=1 << 10, with_grad=True) == 2  # never fewer than 2


def test_table_has_a_line_per_variant_and_seqlen_and_marks_na():
    text = bench.table(fake_results())
    lines = text.splitlines()
    assert lines[0].split()[:3] == ["variant", "seqlen", "b"] and all(b in lines[0] for b in bench.BACKENDS)
    row = next(line for line in lines if line.startswith("fwd_hdim128_fp16_sm90") and " 1024 " in line)
    assert "16x16" in row and "(1.000 ms)" in row
    assert "n/a" in next(line for line in lines if line.startswith("fwd_hdim64_bf16_causal_sm90"))
    assert "sdpa-cudnn fwd_hdim64_bf16_causal_sm90 seqlen 1024: No available kernel" in text


def test_json_and_csv_round_trip(tmp_path):
    results = fake_results()
    path = tmp_path / "r.json"
    path.write_text(bench.results_json(results, command="flashbuild bench --hdim 128", device="H200"))
    info, back = bench.load_results(path)
    assert back == results and info["command"] == "flashbuild bench --hdim 128" and info["format"] == "flashbuild-bench"
    rows = list(csv.DictReader(io.StringIO(bench.results_csv(results))))
    assert len(rows) == len(results) and rows[0]["backend"] == "flashbuild" and float(rows[0]["tflops"]) > 0


def test_compare_marks_regressions_per_row():
    old, new = fake_results(), fake_results()
    slower = next(r for r in new if r.backend == bench.OURS and r.variant == BWD.name and r.seqlen == 4096)
    slower.tflops *= 0.9
    faster = next(r for r in new if r.backend == bench.OURS and r.variant == FWD.name and r.seqlen == 1024)
    faster.tflops *= 1.2
    new.append(bench.result(FWD, problem(FWD, 16384), bench.OURS, 5.0, 10))
    changes, only_new, only_old = bench.compare(old, new)
    assert len(changes) == len(old) and [r.seqlen for r in only_new] == [16384] and not only_old
    regressions = [c for c in changes if c.regression]
    assert [(c.new.variant, c.new.seqlen) for c in regressions] == [(BWD.name, 4096)]
    text = bench.compare_table(changes, only_new, only_old, "old.json")
    line = next(line for line in text.splitlines() if line.startswith(BWD.name) and " 4096 " in line
                and bench.OURS in line)
    assert "-10.0%" in line and line.endswith("REGRESSION")
    assert "+20.0%" in next(line for line in text.splitlines() if line.startswith(FWD.name) and " 1024 " in line
                            and bench.OURS in line)
    assert "1 regression (1 of flashbuild) in" in text and "not in old.json: 1 rows" in text


def test_a_row_that_was_measured_and_is_now_na_is_a_regression():
    """Our kernel refusing (or failing) a problem it ran before is the worst regression there is:
    --compare must count it, not show '-' and report 0 regressions."""
    old, new = fake_results(), fake_results()
    broken = next(r for r in new if r.backend == bench.OURS and r.variant == FWD.name and r.seqlen == 4096)
    broken.ms, broken.tflops, broken.note = None, None, "CUDA error: invalid configuration argument"
    changes, only_new, only_old = bench.compare(old, new)
    (gone,) = [c for c in changes if c.regression]
    assert gone.new is broken and gone.pct is None
    text = bench.compare_table(changes, only_new, only_old, "old.json")
    line = next(line for line in text.splitlines() if line.startswith(FWD.name) and " 4096 " in line
                and bench.OURS in line)
    assert "n/a" in line and line.endswith("REGRESSION")
    assert "1 regression (1 of flashbuild) in" in text
    assert not any(c.regression for c in bench.compare(new, old)[0])  # n/a then a number: no regression


@pytest.mark.parametrize("content, message", [
    ("not json at all", "not JSON"),
    ('{"format": "flashbuild-test", "rows": []}', "not flashbuild bench results (format 'flashbuild-test'"),
    ("[1, 2]", "not flashbuild bench results (format 'list'"),
    ('{"format": "flashbuild-bench"}', 'no "results" list'),
    ('{"format": "flashbuild-bench", "results": [{"variant": "x"}]}', "result 0 lacks backend"),
])
def test_compare_rejects_a_file_of_the_wrong_format_with_exit_2(tmp_path, content, message):
    bad = tmp_path / "old.json"
    bad.write_text(content)
    result = run_cli("bench", "--arch", "sm90", "--compare", str(bad))  # checked before the GPU is
    assert result.exit_code == 2
    (line,) = result.stderr.strip().splitlines()
    assert line.startswith(f"flashbuild: error: --compare {bad}: ") and message in line
    assert "flashbuild bench ... --json FILE" in line and "Traceback" not in result.output


@pytest.mark.parametrize("field, value, expected", [
    ("ms", "fast", '"ms": "fast", expected a number of milliseconds > 0, or null'),
    ("ms", -1.0, '"ms": -1.0'),
    ("ms", True, '"ms": true'),
    ("tflops", "x", '"tflops": "x"'),
    ("seqlen", "4k", '"seqlen": "4k", expected a positive integer'),
    ("causal", "yes", '"causal": "yes", expected true or false'),
    ("backend", 5, '"backend": 5'),
    ("window_left", "a", '"window_left": "a"'),
])
def test_a_results_field_of_the_wrong_type_is_named_with_the_file(tmp_path, field, value, expected):
    rows = json.loads(bench.results_json(fake_results()[:2]))
    rows["results"][1][field] = value
    bad = tmp_path / "old.json"
    bad.write_text(json.dumps(rows))
    for flag in ("--results", "--compare"):
        args = ["--results", str(bad)] if flag == "--results" else ["--arch", "sm90", "--compare", str(bad)]
        result = run_cli("bench", *args)
        assert result.exit_code == 2, result.output
        (line,) = result.stderr.strip().splitlines()
        assert line.startswith(f"flashbuild: error: {flag} {bad}: result 1 has {expected}"), line


def test_a_results_file_that_is_empty_or_binary_is_named(tmp_path):
    for content, expected in ((b"", "not JSON (the file is empty)"), (b"\x89PNG\x00\xff", "not a text file")):
        bad = tmp_path / "r.json"
        bad.write_bytes(content)
        result = run_cli("bench", "--results", str(bad))
        assert result.exit_code == 2 and expected in result.stderr and "Traceback" not in result.output


@pytest.mark.parametrize("flag, name, expected", [
    ("--plot", "f/p.png", "f is a file, not a directory"),
    ("--csv", "f/r.csv", "f is a file, not a directory"),
    ("--json", "f/r.json", "f is a file, not a directory"),
    ("--plot", "p.txt", "its suffix '.txt' names no image format"),
])
def test_an_output_path_that_cannot_be_written_is_refused_before_any_work(tmp_path, flag, name, expected):
    earlier = tmp_path / "new.json"
    earlier.write_text(bench.results_json(fake_results()))
    (tmp_path / "f").write_text("a file")
    result = run_cli("bench", "--results", str(earlier), flag, str(tmp_path / name))
    assert result.exit_code == 2, result.output
    assert result.stdout == ""  # refused before the table
    (line,) = result.stderr.strip().splitlines()
    assert line.startswith(f"flashbuild: error: Invalid value for {flag}: ") and expected in line


def test_non_finite_softcap_and_interval_are_usage_errors():
    for args in (["bench", "--arch", "sm90", "--softcap", "nan"], ["bench", "--arch", "sm90", "--softcap", "inf"],
                 ["watch", "--arch", "sm90", "--interval", "nan"], ["watch", "--arch", "sm90", "--interval", "inf"],
                 ["bench", "--seqlens", "²"]):
        result = run_cli(*args)
        assert result.exit_code == 2 and args[-2] in result.stderr and "Traceback" not in result.output, args


def test_compare_with_a_missing_file_is_a_clear_error(tmp_path):
    result = run_cli("bench", "--compare", str(tmp_path / "nope.json"))
    assert result.exit_code == 2 and "cannot read it" in result.stderr


def test_plot_has_a_panel_per_head_dim_and_a_row_per_direction(tmp_path):
    import matplotlib.image

    path = bench.plot(fake_results(), tmp_path / "sub" / "p.png", title="H200 flashbuild bench")
    height, width = matplotlib.image.imread(path).shape[:2]
    assert width > 800 and height > 600  # 2 head dims wide, 2 directions high


def test_bench_reports_an_earlier_results_file_without_a_gpu(tmp_path):
    earlier, old = tmp_path / "new.json", tmp_path / "old.json"
    earlier.write_text(bench.results_json(fake_results(speed=0.9), command="flashbuild bench x", device="H200"))
    old.write_text(bench.results_json(fake_results(), command="flashbuild bench x", device="H200"))
    out = {name: tmp_path / name for name in ("r.csv", "r.png")}
    result = run_cli("bench", "--results", str(earlier), "--csv", str(out["r.csv"]), "--plot", str(out["r.png"]),
                     "--compare", str(old))
    assert result.exit_code == 0, result.output
    assert result.stdout.startswith("variant") and "change vs" in result.stdout
    assert result.stdout.count("REGRESSION") == sum(1 for r in fake_results() if r.ms)  # all 10% slower
    assert all(p.is_file() and p.stat().st_size > 0 for p in out.values())
    assert run_cli("bench", "--results", str(earlier), "--hdim", "64").exit_code == 2  # no selection with --results


def test_bad_seqlens_and_reps_are_usage_errors():
    for args in (["--seqlens", "1k,abc"], ["--reps", "0"]):
        result = run_cli("bench", "--arch", "sm90", *args)
        assert result.exit_code == 2 and "Traceback" not in result.output


# ---------------------------------------------------------------- feature variants: window and softcap

LOCAL = Variant("fwd", 64, "fp16", True, "sm90", ("local", "softcap"))


@pytest.mark.parametrize("sq, sk", [(9, 9), (5, 12), (12, 5), (1, 30)])
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("window", [(-1, -1), (3, 0), (0, 0), (-1, 2), (4, -1), (2, 3), (100, 100)])
def test_visible_pairs_count_the_reference_mask_exactly(sq, sk, causal, window):
    pytest.importorskip("torch")  # for the reference's mask; visible_pairs itself needs no torch
    from flashbuild.reference import hidden_keys

    hidden = hidden_keys(sq, sk, causal, window)
    want = sq * sk if hidden is None else int((~hidden).sum())
    assert bench.visible_pairs(sq, sk, causal, window) == want


def test_flops_with_a_window_count_4d_per_visible_pair():
    p = problem(LOCAL, 4096, window=(256, 0))  # b 4, h 32, d 64, causal
    pairs = sum(min(i, 256) + 1 for i in range(4096))
    assert bench.visible_pairs(4096, 4096, True, (256, 0)) == pairs
    assert bench.flops(p) == 4 * 4 * 32 * 64 * pairs
    assert bench.flops(problem(Variant("bwd", 64, "fp16", True, "sm90", ("local",)), 4096, (256, 0))) == \
        2.5 * bench.flops(p)
    assert bench.flops(problem(LOCAL, 4096, softcap=30.0)) == bench.flops(problem(FWD_CAUSAL, 4096))  # the standard
    assert p.feature_kwargs() == {"window_size_left": 256, "window_size_right": 0}
    assert problem(LOCAL, 1024, (256, 0), 30.0).feature_kwargs() == {"window_size_left": 256, "window_size_right": 0,
                                                                     "softcap": 30.0}
    assert problem(FWD, 1024).feature_kwargs() == {}


def test_window_option_parses_and_rejects_bad_values():
    assert bench.parse_window("256,0") == (256, 0) and bench.parse_window(" -1, 5") == (-1, 5)
    for bad in ("256", "a,b", "-1,-1", "-2,0", "1,2,3", ""):
        with pytest.raises(ValueError, match="expected LEFT,RIGHT"):
            bench.parse_window(bad)
    result = run_cli("bench", "--arch", "sm90", "--window", "256")
    assert result.exit_code == 2 and "--window" in result.stderr and "Traceback" not in result.output
    assert run_cli("bench", "--arch", "sm90", "--softcap", "-3").exit_code == 2


def test_feature_variants_are_measured_with_the_features_they_hold():
    assert bench.features_asked((256, 0), 0.0) == ("local",) and bench.features_asked((-1, -1), 30.0) == ("softcap",)
    assert bench.features_for(FWD, (256, 0), 30.0) == {"window": (-1, -1), "softcap": 0.0}  # plain: plain calls
    assert bench.features_for(LOCAL, (256, 0), 30.0) == {"window": (256, 0), "softcap": 30.0}
    assert bench.features_for(Variant("fwd", 64, "fp16", True, "sm90", ("softcap",)), (256, 0), 30.0) == {
        "window": (-1, -1), "softcap": 30.0}


def test_results_name_their_window_and_softcap_and_old_files_still_load(tmp_path):
    rows = [bench.result(LOCAL, problem(LOCAL, 1024, (256, 0), 30.0), bench.OURS, 1.0, 10),
            bench.result(FWD_CAUSAL, problem(FWD_CAUSAL, 1024), bench.OURS, 1.0, 10)]
    assert rows[0].label == "fwd_hdim64_fp16_causal_sm90_local_softcap (window 256,0, softcap 30)"
    assert rows[1].label == FWD_CAUSAL.name
    assert rows[0].tflops < rows[1].tflops  # the same time over fewer FLOPs
    text = bench.table(rows)
    assert "fwd_hdim64_fp16_causal_sm90_local_softcap (window 256,0, softcap 30)  " in text
    path = tmp_path / "r.json"
    path.write_text(bench.results_json(rows))
    assert bench.load_results(path)[1] == rows
    old = json.loads(path.read_text())
    for row in old["results"]:
        for name in ("window_left", "window_right", "softcap"):
            del row[name]
    path.write_text(json.dumps(old))
    assert [r.asked for r in bench.load_results(path)[1]] == ["", ""]  # a file from before features loads
    bench.plot(rows, tmp_path / "p.png")


def test_one_variant_measured_with_a_window_and_with_a_softcap_keeps_two_rows():
    windowed = bench.result(LOCAL, problem(LOCAL, 2048, (256, 0)), bench.OURS, 0.5, 10)
    capped = bench.result(LOCAL, problem(LOCAL, 2048, softcap=30.0), bench.OURS, 2.0, 10)
    assert windowed.key != capped.key
    lines = bench.table([windowed, capped]).splitlines()
    assert "(window 256,0)" in lines[2] and "(0.500 ms)" in lines[2]
    assert "(softcap 30)" in lines[3] and "(2.000 ms)" in lines[3]
    changes, only_new, only_old = bench.compare([windowed], [windowed, capped])
    assert len(changes) == 1 and only_new == [capped] and not only_old  # another window is another problem


def test_a_peer_slice_gets_a_column_between_ours_and_sdpa():
    """--peer-source: the peer's rows (backend = its profile name) sit beside ours, before SDPA's."""
    results = fake_results()
    ours = next(r for r in results if r.backend == bench.OURS)
    peer = Result(**{**ours.__dict__, "backend": "flash-attn-3", "ms": ours.ms / 2, "tflops": ours.tflops * 2})
    head = bench.table([*results, peer]).splitlines()[0].split()
    assert head.index("flashbuild") < head.index("flash-attn-3") < head.index("sdpa-flash")


def test_one_backend_order_for_the_turns_the_table_and_the_plot(tmp_path, monkeypatch):
    """flashbuild, peers by name, SDPA's backends: measure() times them in this order, the table's
    columns and the plot's legend follow it."""
    order = ["flashbuild", "flash-attn-2", "flash-attn-3", "sdpa-flash", "sdpa-cudnn", "sdpa-efficient"]
    assert bench.backend_order(["sdpa-cudnn", "flash-attn-3", "sdpa-efficient", "flashbuild", "flash-attn-2",
                                "sdpa-flash"]) == order
    assert bench.backend_order(["sdpa-flash", "flash-attn-3"]) == ["flash-attn-3", "sdpa-flash"]  # only those given
    results = fake_results()
    results += [Result(**{**r.__dict__, "backend": peer}) for peer in ("flash-attn-3", "flash-attn-2")
                for r in results if r.backend == bench.OURS]
    assert bench.table(results).splitlines()[0].split()[5:] == order  # after variant, seqlen, b x h
    import matplotlib.figure

    legends = []
    monkeypatch.setattr(matplotlib.figure.Figure, "legend", lambda self, handles, labels, **kw: legends.append(labels))
    bench.plot([r for r in results if r.variant == FWD.name], tmp_path / "p.png")
    assert list(dict.fromkeys(label.split()[0] for label in legends[0])) == order


def test_peer_flags_go_together_and_the_peer_takes_our_selection(tmp_path):
    from flashbuild.commands import bench as cli

    half = run_cli("bench", "--hdim", "64", "--peer-source", str(tmp_path))
    assert half.exit_code == 2 and "--peer-source needs --peer-profile" in half.stderr
    request = cli._peer_request({"hdim": "64", "dtype": "fp16", "direction": None, "features": "local",
                                 "no_local": True, "build_dir": "/x", "config": "c"},
                                (str(tmp_path), "flash-attn-3"), ("fwd", "bwd", "splitkv"))
    assert request["source"] == str(tmp_path) and request["profile"] == "flash-attn-3"
    assert (request["direction"], request["features"], request["build_dir"], request["hdim"]) == (
        "fwd,bwd", "cluster", None, "64")  # FA3's speed-only switch feature (docs/switches.md)
    with pytest.raises(click.UsageError, match="--direction splitkv has neither: use --direction fwd,bwd"):
        cli._peer_request({}, (str(tmp_path), "flash-attn-3"), ("splitkv",))


def test_a_peer_is_built_with_the_features_the_bench_calls_it_with(tmp_path):
    """Without --window/--softcap the bench calls plain attention: the peer has its features compiled
    out, but for its speed-only switch features. With them, it has our selection's features that its
    profile names, so its feature variants carry our feature variants' names."""
    from flashbuild.commands import bench as cli

    kwargs = {"hdim": "64", "dtype": "fp16", "direction": None}
    # the peer keeps its speed-only switch features (FA3 cluster, FA2 even_mn: docs/switches.md)
    plain = cli._peer_request(kwargs, (str(tmp_path), "flash-attn-3"), ("fwd",))
    assert plain["features"] == "cluster"
    ours = ("local", "softcap")
    assert cli._peer_request(kwargs, (str(tmp_path), "flash-attn-3"), ("fwd",), features=ours)["features"] == \
        "softcap,local,cluster"
    assert cli._peer_request(kwargs, (str(tmp_path), "flash-attn-2"), ("fwd",), features=ours)["features"] == \
        "local,softcap,even_mn"
    assert cli._peer_request(kwargs, (str(tmp_path), "flash-attn-3"), ("fwd",), features=("local",))["features"] == \
        "local,cluster"


def test_a_bad_peer_profile_is_named_as_peer_profile(tmp_path):
    """Checked before anything is built or a GPU is looked for; the error names --peer-profile, not --profile."""
    result = run_cli("bench", "--hdim", "64", "--peer-source", str(tmp_path), "--peer-profile", "flash-attn-9")
    assert result.exit_code == 2, result.output
    assert "--peer-profile flash-attn-9: no such profile" in result.stderr and "--profile flash-attn-9" not in \
        result.stderr.replace("--peer-profile", "")
    assert "use --peer-profile flash-attn-2" in result.stderr
    own = run_cli("bench", "--hdim", "64", "--peer-source", str(tmp_path), "--peer-profile", "flashbuild")
    assert own.exit_code == 2 and "--peer-profile flashbuild: flashbuild's own kernels" in own.stderr


def test_alone_is_checked_and_a_compare_across_timings_says_so(tmp_path):
    """--alone takes seconds in (0, 60]; with --results it is a usage error (the file was timed already). A
    --compare of runs timed differently (alone against in turns: a file without "timing" was timed in turns)
    says so: the clocks differ between the two, beyond any change of the kernels."""
    for value in ("0", "-1", "61", "nan", "inf", "x"):
        result = run_cli("bench", "--arch", "sm90", "--alone", value)
        assert result.exit_code == 2 and "--alone" in result.output and "Traceback" not in result.output, value
    alone, turns = tmp_path / "alone.json", tmp_path / "turns.json"
    alone.write_text(bench.results_json(fake_results(), command="flashbuild bench x --alone 1", device="H200",
                                        timing=bench.timing_name(1.0)))
    turns.write_text(bench.results_json(fake_results(), command="flashbuild bench x", device="H200"))
    result = run_cli("bench", "--results", str(alone), "--alone", "1")
    assert result.exit_code == 2 and "drop --alone" in result.output
    result = run_cli("bench", "--results", str(alone), "--compare", str(turns))
    assert result.exit_code == 0, result.output
    assert f"was timed {bench.IN_TURNS}, this run alone, 3 windows of 1 s" in result.output
    result = run_cli("bench", "--results", str(turns), "--compare", str(turns))
    assert result.exit_code == 0 and "was timed" not in result.output
