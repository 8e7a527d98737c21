"""Fuzz every command-line option (issue 48): each option's value from hostile strings, random text,
numbers and lists of valid words, on a dry run (and, for the values that reach a command line, a real
compile with the fake nvcc). The property is assert_cli_property's: a clear error naming the option or its
value, or success; never a traceback, an injected command, a write outside the build dir, a hang."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings, strategies as st

from fuzzing import MARK, assert_cli_property, examples, sandbox, values

SEL = ["--hdim", "64", "--dtype", "fp16", "--arch", "sm80", "--direction", "fwd", "--causal", "off", "--no-local",
       "--no-softcap"]
OPTIONS = {  # option -> the words that are valid for it
    "--hdim": ("32", "64", "96", "128", "192", "256", "80"), "--dtype": ("fp16", "bf16"),
    "--arch": ("sm80", "sm86", "sm89", "sm90", "native"), "--direction": ("fwd", "bwd", "splitkv"),
    "--causal": ("on", "off", "both"), "--features": ("local", "softcap", "none"),
    "--config": ("ci-compile", "ci", "dev-hdim64-sm90", "configs/ci.toml"),
    "--profile": ("flash-attn-2", "flash-attn-3", "flashbuild"), "--source": (".", "/tmp"),
    "--jobs": ("1", "4"), "--launcher": ("ccache", "sccache"), "--nvcc-flag": ("-O2", "-lineinfo", "-Xptxas=-v"),
    "--build-dir": ("b", "../b"), "--shard": ("1/2", "2/2", "1/1"), "--costs": ("c.json",),
    "--artifact-dir": ("art",), "--cell": ("smoke-sm80", "sm80-fp16"),
}


def args_for(option: str, value: str) -> tuple[list[str], tuple[str, ...]]:
    """The command line of one example, and the options that may legitimately be named in its error."""
    base = [a for i, a in enumerate(SEL) if not (SEL[i - 1 if a not in ("--no-local", "--no-softcap") else i] == option
                                                 or a == option)]
    if option in ("--features",):
        base = [a for a in base if a not in ("--no-local", "--no-softcap")]
    if option in ("--config", "--cell"):
        base = []
    extra = ["--config", "ci"] if option == "--cell" else []
    extra += ["--shard", "1/1"] if option in ("--costs", "--artifact-dir") else []
    extra += ["--profile", "flash-attn-2"] if option == "--source" else []
    return [*base, *extra, option, value, "--dry-run"], (option, value, "--config", "--shard", "--profile", "--source")


@pytest.mark.parametrize("option", sorted(OPTIONS))
@settings(max_examples=examples(12))
@given(data=st.data())
def test_every_option_value_on_a_dry_run(option, data):
    value = data.draw(values(*OPTIONS[option]), label=option)
    args, names = args_for(option, value)
    with sandbox() as box:
        out = box.cli(args)
        assert_cli_property(box, out, names, "w1/w2/cwd/b", "w1/b")


@settings(max_examples=examples(8))
@given(st.sampled_from(["--nvcc-flag", "--build-dir", "--launcher"]).flatmap(
    lambda o: st.tuples(st.just(o), values(*OPTIONS[o]) | st.sampled_from([f"-DX=$(touch {MARK})", f"b/`touch {MARK}`",
                                                                           f"ccache;touch {MARK}"]))))
def test_values_that_reach_a_command_line_on_a_real_compile(option_value):
    """Compiled with the fake nvcc: ninja runs the commands these values reach."""
    option, value = option_value
    with sandbox() as box:
        out = box.cli([*SEL, option, value, "--compile-only"], seconds=120)
        allowed = [p for p in box.files() if p.startswith("w1/")]  # a --build-dir the example named
        assert_cli_property(box, out, (option, value, "--launcher", "nvcc"), *allowed)


BENCH = {"--window": ("256,0", "-1,-1"), "--softcap": ("30", "0"), "--seqlens": ("1024", "4k"),
         "--reps": ("1", "30"), "--csv": ("out.csv",), "--json": ("out.json",), "--compare": ("r.json",),
         "--plot": ("p.png", "p.svg")}
ROW = {"variant": "fwd_hdim64_fp16_sm80", "direction": "fwd", "hdim": 64, "dtype": "fp16", "causal": False,
       "seqlen": 1024, "batch": 16, "nheads": 32, "backend": "flashbuild", "ms": 1.5, "tflops": 91.6, "reps": 10,
       "note": "", "window_left": -1, "window_right": -1, "softcap": 0.0}
RESULTS = {"format": "flashbuild-bench", "version": 1, "command": "flashbuild bench", "device": "H200",
           "results": [ROW]}


@settings(max_examples=examples(15))
@given(st.sampled_from(sorted(BENCH)).flatmap(lambda o: st.tuples(st.just(o), values(*BENCH[o]))))
def test_bench_options_over_a_results_file(option_value):
    option, value = option_value
    with sandbox() as box:
        (box.cwd / "r.json").write_text(json.dumps(RESULTS))
        out = box.cli(["bench", "--results", "r.json", option, value])
        written = [p for p in box.files() - box.before if p.startswith("w1/")]  # --csv/--json/--plot's file
        assert_cli_property(box, out, (option, value, "--results"), *written)


# The values that broke an option in issue 48's round, tried on every option (a sweep, not a sample:
# the "ci" profile's few examples per option would pick each only now and then).
SHARP = ["9" * 5000, "x" * 300, "\udcff", "../../outside", f"$(touch {MARK})", "none,none", ",", "a\nb", "/dev/zero",
         "~0"]


@pytest.mark.parametrize("value", SHARP, ids=["digits", "long", "not-utf8", "dotdot", "subshell", "none-none",
                                               "comma", "newline", "dev-zero", "unknown-user"])
@pytest.mark.parametrize("option", sorted(OPTIONS))
def test_every_option_against_the_values_that_broke_one(option, value):
    args, names = args_for(option, value)
    with sandbox() as box:
        assert_cli_property(box, box.cli(args), names, "w1/w2/cwd/b", "w1/b")
