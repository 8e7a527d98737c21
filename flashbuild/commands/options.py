"""The options every command shares (the selection, how it is built) and the checks of their
values: a value given twice, a path no file system can hold, an output that cannot be written."""

from __future__ import annotations

import os
import shlex

import click

from .. import env
from ..selection.variants import DIRECTIONS, implemented_directions


SELECTION_HELP = {
    "hdim": "Head dims, comma-separated (32,64,96,128,192,256). Default: all.",
    "dtype": "Dtypes: fp16,bf16. Default: both.",
    "arch": "Archs: sm80,sm86,sm89,sm90 or native (the GPUs nvidia-smi reports). Default: native.",
    "direction": f"Directions: {','.join(DIRECTIONS)}. Default: every implemented one "
                 f"({','.join(implemented_directions())}).",
    "causal": "Causal variants: on, off or both. Default: both.",
    "no_local": "Compile out local (sliding-window) attention: no *_local TUs; a call that needs a window raises.",
    "no_softcap": "Compile out softcap: no *_softcap TUs; a call with softcap > 0 raises.",
}


def apply_options(options):
    """One decorator made of a list of click options (the first listed is the first in --help)."""
    def decorate(f):
        for option in reversed(options):
            f = option(f)
        return f
    return decorate


def path_problem(value: str) -> str | None:
    """Why a path given on the command line cannot be used as one, or None: bytes that are not
    UTF-8 (nothing can write it into build.ninja), NUL, a name longer than file systems allow."""
    if "\0" in value:
        return "it holds a NUL byte"
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        return "it holds bytes that are not UTF-8 text"
    if len(value.encode()) > 4095:
        return f"it is {len(value.encode())} bytes long, more than a path can be (4095)"
    head = value.split("/")[0]
    if head.startswith("~") and os.path.expanduser(head) == head:  # pathlib raises RuntimeError for it
        return f"{head}: no such user's home directory"
    long = next((part for part in value.split("/") if len(part.encode()) > 255), None)
    if long:
        return f"its part {long[:20]}... is {len(long.encode())} bytes long, more than a file name can be (255)"
    return None


def given_once(path: bool = False, nonempty: bool = False):
    """A click callback for an option given at most once (a second --hdim used to replace the first
    silently); with `path`, the value is checked as a path (path_problem); with `nonempty`, '' is refused."""
    def callback(ctx, param, values):
        flag = param.opts[0]
        values = tuple(dict.fromkeys(values or ()))
        if len(values) > 1:
            shown = " and ".join(f"{flag} {shlex.quote(str(v))}" for v in values)
            merged = ",".join(str(v) for v in values)
            fix = f"give one list: {flag} {shlex.quote(merged)}" if not path else f"give {flag} once"
            raise click.BadParameter(f"given twice ({shown}), and only one counts; {fix}", ctx=ctx, param=param)
        value = values[0] if values else None
        if value is not None and nonempty and not str(value).strip():
            raise click.BadParameter(f"{flag} {value!r}: empty; give a name or a path, or leave {flag} out", ctx=ctx,
                                     param=param)
        problem = path_problem(str(value)) if path and value is not None else None
        if problem:
            raise click.BadParameter(f"{ascii(str(value))[:80]}: {problem}; give another path", ctx=ctx, param=param)
        return value
    return callback


# The selection every command takes, and the flags that pick which build of it (they change its key)
# and how it is built: `test`, `bench`, `inspect` and `watch` find the same cached build as `build`.
selection_options = apply_options([
    click.option("--hdim", multiple=True, callback=given_once(), help=SELECTION_HELP["hdim"]),
    click.option("--dtype", multiple=True, callback=given_once(), help=SELECTION_HELP["dtype"]),
    click.option("--arch", multiple=True, callback=given_once(), help=SELECTION_HELP["arch"]),
    click.option("--direction", multiple=True, callback=given_once(), help=SELECTION_HELP["direction"]),
    click.option("--causal", multiple=True, callback=given_once(), help=SELECTION_HELP["causal"]),
    click.option("--no-local", "no_local", is_flag=True, help=SELECTION_HELP["no_local"]),
    click.option("--no-softcap", "no_softcap", is_flag=True, help=SELECTION_HELP["no_softcap"]),
    click.option("--features", multiple=True, callback=given_once(), help="Features compiled in: a comma list (local,softcap; an upstream tree's own "
                                    "such as dropout), 'none', or leave it out for all. --no-local / --no-softcap "
                                    "remove one."),
    click.option("--config", multiple=True, callback=given_once(path=True), help="A TOML preset: a file, or a name in configs/ (e.g. ci-compile). Flags override it."),
    click.option("--source", type=click.Path(file_okay=False), multiple=True, callback=given_once(path=True),
                 help="An external kernel tree to build a slice of: a directory (e.g. an unpacked flash-attn sdist; "
                 "it is read, never written) or a release spec such as flash-attn==2.8.3 (its sdist fetched into "
                 "the cache and checked). Its profile and release are detected (flashbuild profiles --source TREE "
                 "says how) unless --profile names them."),
    click.option("--profile", multiple=True, callback=given_once(path=True, nonempty=True),
                 help="What kind of tree --source is: a profile in configs/profiles (flash-attn-2, ...), one of its "
                 "releases (flash-attn-2@2.6) or a .toml path. Default: detected from --source; without --source, "
                 "flashbuild's own kernels."),
])


def _own_nvcc_flags(ctx, param, flags):
    """--nvcc-flag values, less the one flashbuild reserves: --profile-templates passes
    --fdevice-time-trace=- and then summarizes and deletes the traces, so the same flag given by hand
    would have its traces deleted too."""
    from ..pipeline import compile_profile

    for flag in flags:
        if flag.strip().replace(" ", "=") == compile_profile.TRACE_FLAG:
            raise click.BadParameter(
                f"{flag!r} is the flag --profile-templates passes (its traces are summarized into "
                "compile_profile.txt, then deleted). For that table: flashbuild build --profile-templates; "
                "to keep nvcc's raw trace, name its file: --nvcc-flag=--fdevice-time-trace=FILE.json "
                "(with one TU in the selection: each TU writes that file)")
    return flags


build_options = apply_options([
    click.option("--jobs", "-j", type=int, help="Parallel compiles. Default: min(cores, free memory / 4 GiB)."),
    click.option("--build-dir", type=click.Path(file_okay=False), multiple=True, callback=given_once(path=True),
                 help="Build here instead of the cache dir."),
    click.option("--debug", is_flag=True, help="Device debug build: nvcc -G -lineinfo, asserts on."),
    click.option("--lineinfo", is_flag=True, help="Optimized build with -lineinfo (for profilers)."),
    click.option("--nvcc-flag", "nvcc_flags", multiple=True, callback=_own_nvcc_flags,
                 help="Extra nvcc flag for every kernel TU (repeatable)."),
    click.option("--launcher", envvar="FLASHBUILD_LAUNCHER", help="Compiler launcher prefixed to compile commands, "
                 "e.g. ccache or sccache. Default: $FLASHBUILD_LAUNCHER (docs/ci.md)."),
    click.option("--verbose", "-v", is_flag=True, help="Show every command and all compiler output."),
])


SELECTION_KEYS = ("hdim", "dtype", "arch", "direction", "causal", "no_local", "no_softcap", "features", "config",
                  "source", "profile")


def parse_request(**kwargs):
    """builder.parse_request, where --features NAME with --no-NAME is a contradiction (--no-NAME alone
    narrows a preset's or the default features; load()'s no_local / no_softcap narrow features= too)."""
    from ..pipeline import builder
    from ..selection import variants
    from ..sources import detect, profile as profiles

    features = kwargs.get("features")
    if isinstance(features, str) and features.strip():
        items = [item.strip().lower() for item in features.split(",")]
        if not any(items):  # `--features ,` once meant none, while `--features ''` is refused
            raise click.BadParameter(f"{features!r} names no feature; give a comma list such as local,softcap, or "
                                     f"none", param_hint="--features")
        if [i for i in items if i] == ["none"] * len([i for i in items if i]) and len([i for i in items if i]) > 1:
            raise click.BadParameter(f"{features}: none given {len([i for i in items if i])} times; give it once: "
                                     f"--features none", param_hint="--features")  # (once said "combined with ;")
    if features is not None and not env.root_problem():
        names = profiles.load(detect.choose(kwargs.get("source"), kwargs.get("profile")) or profiles.BUILTIN).features
        for name in variants.parse_features(features, "--features", names):
            if kwargs.get(f"no_{name}"):
                raise click.UsageError(f"--features {features} and --no-{name} contradict: --no-{name} compiles "
                                       f"out {name}, which --features asks for; drop one of them")
    return builder.parse_request(**kwargs)


def build_args(selection, options) -> list[str]:
    """The CLI arguments that select this selection and build (for a child `flashbuild test`)."""
    import shlex

    flags = options.flags
    args = shlex.split(selection.as_cli())
    args += ["--debug"] * flags.debug + ["--lineinfo"] * flags.lineinfo
    args += [f"--nvcc-flag={f}" for f in flags.nvcc_flags]
    if options.build_dir:
        args += ["--build-dir", str(options.build_dir)]
    if options.jobs:
        args += ["--jobs", str(options.jobs)]
    if options.launcher:
        args += ["--launcher", options.launcher]
    return args


def check_output(path: str | None, flag: str) -> None:
    """Refuse, before any work, an output path that cannot be written: one under a file, or in a
    directory we cannot write. (click's Path type already refuses an existing directory.)"""
    import os
    from pathlib import Path

    if not path:
        return
    problem = path_problem(path)
    if problem:
        raise click.BadParameter(f"{ascii(path)[1:-1][:80]}: {problem}; choose another path", param_hint=flag)
    target = Path(path).expanduser().absolute()
    parent = target.parent
    while not parent.exists() and not parent.is_symlink():
        parent = parent.parent
    if not parent.is_dir():
        raise click.BadParameter(f"{path}: {parent} is {'a broken link' if parent.is_symlink() else 'a file'}, not a "
                                 "directory, so nothing can be written under it; choose another path",
                                 param_hint=flag)
    if not os.access(parent, os.W_OK | os.X_OK):
        raise click.BadParameter(f"{path}: cannot write in {parent} (permission denied); choose another path",
                                 param_hint=flag)


def finite(ctx, param, value):
    """A click callback: refuse nan and inf where a number of seconds or a softcap belongs."""
    import math

    if value is not None and not math.isfinite(value):
        raise click.BadParameter(f"{value}: must be a finite number", ctx=ctx, param=param)
    return value


def write_output(path: str, text: str) -> None:
    """Write a command's --json / --csv / --sass output; a failure is one error line naming the path."""
    from pathlib import Path

    target = Path(path)
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text)
    except OSError as exc:
        raise click.ClickException(f"cannot write {path}: {exc.strerror or exc}") from None
    click.echo(f"wrote {path}", err=True)
