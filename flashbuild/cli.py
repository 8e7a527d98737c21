"""The command line: `flashbuild [build] SELECTION`, `test`, `bench`, `inspect`, `watch`, `list`,
`clean`, `doctor`, and for CI `matrix`, `build --cell/--shard` and `link`.

User mistakes are one line on stderr and exit 2 (usage) or 1 (build failure), never a traceback.
Data goes to stdout, progress and logs to stderr.
"""

from __future__ import annotations

import json
import os
import shlex
import signal
import sys

import click

from . import env
from .version import __version__
from .selection.variants import DIRECTIONS, implemented_directions
from .errors import FlashbuildError

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


class FlashbuildGroup(click.Group):
    """A group where `flashbuild --hdim 64 ...` means `flashbuild build --hdim 64 ...`, and every
    error becomes one line."""

    def parse_args(self, ctx, args):
        if args and args[0].startswith("-") and args[0] not in ("--help", "-h", "--version"):
            args = ["build", *args]
        return super().parse_args(ctx, args)

    def format_options(self, ctx, formatter):
        """The group's own options, then the main job's (the `build` command's, which a bare
        `flashbuild --hdim ...` runs), then the commands."""
        click.Command.format_options(self, ctx, formatter)
        build_command = self.get_command(ctx, "build")
        rows = [row for param in build_command.get_params(ctx) if (row := param.get_help_record(ctx))
                and row[0] not in ("-h, --help",)]
        with formatter.section("Build options (flashbuild [build] OPTIONS: the default command)"):
            formatter.write_dl(rows)
        self.format_commands(ctx, formatter)

    def main(self, args=None, prog_name=None, complete_var=None, standalone_mode=True, **extra):
        try:
            code = super().main(args, prog_name or "flashbuild", complete_var, standalone_mode=False, **extra)
        except click.exceptions.NoArgsIsHelpError as exc:  # bare `flashbuild`: help, not an error
            click.echo(exc.ctx.get_help() if exc.ctx else exc.format_message())
            code = 0
        except click.UsageError as exc:
            where = exc.ctx.command_path if exc.ctx else "flashbuild"
            _error_line(f"{exc.format_message()} (see `{where} --help`)")
            code = 2
        except click.ClickException as exc:
            _error_line(exc.format_message())
            code = exc.exit_code
        except FlashbuildError as exc:
            _error_line(str(exc))
            code = exc.exit_code
        except (click.Abort, KeyboardInterrupt) as exc:
            # processes.Terminated carries SIGTERM / SIGHUP (click wraps it in Abort)
            cause = exc if hasattr(exc, "signum") else (exc.__cause__ or exc.__context__)
            signum = getattr(cause, "signum", signal.SIGINT)
            click.echo(f"flashbuild: interrupted ({signal.Signals(signum).name}): every compiler it started "
                       "was stopped", err=True)
            code = 128 + signum
        except Exception as exc:  # noqa: BLE001 - the last line of defence: every user mistake is caught above
            code = report_bug(exc)
        if not standalone_mode:
            return code
        sys.exit(code if isinstance(code, int) else 0)


def _error_line(message: str) -> None:
    """One `flashbuild: error:` line: a newline, escape sequence or byte that is not UTF-8 in a value it
    quotes is shown escaped (errors.one_line), never printed raw."""
    from .errors import one_line

    click.echo("flashbuild: error: " + one_line(message), err=True)


BUG_EXIT = 70  # EX_SOFTWARE: not the user's mistake (1, 2) nor a signal (128+)


def report_bug(exc: BaseException) -> int:
    """An exception no check caught is a flashbuild bug, not a user mistake: one line saying so and
    where its full traceback was written (a private file in the temp dir), not the traceback."""
    import os
    import tempfile
    import traceback

    text = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
    where = "nowhere (the temp dir is not writable; rerun with FLASHBUILD_TRACEBACK=1 to print it)"
    try:
        fd, path = tempfile.mkstemp(prefix="flashbuild-bug-", suffix=".txt")  # 0600
        with os.fdopen(fd, "w", errors="backslashreplace") as f:
            f.write(f"flashbuild {__version__}: {shlex.join(sys.argv)}\n{text}")
        where = path
    except OSError:
        pass
    if os.environ.get("FLASHBUILD_TRACEBACK") == "1":
        click.echo(text, err=True)
    first = (str(exc).strip().splitlines() or [""])[0][:200]
    click.echo(f"flashbuild: internal error: a flashbuild bug, not a mistake of yours ({type(exc).__name__}"
               f"{': ' + ascii(first)[1:-1] if first else ''}); the full traceback is in {where}: please report it "
               f"with that file", err=True)
    return BUG_EXIT


@click.group(name="flashbuild", cls=FlashbuildGroup, no_args_is_help=True,
             context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="flashbuild")
def cli():
    """Selective builds of FlashAttention-style CUDA kernels: pick head dims, dtypes, archs,
    directions, causal variants and features; flashbuild renders, compiles and links only those.

    The main job: flashbuild --hdim 64 --dtype fp16 --arch sm90 (the build options below; `build`
    is the default command). --source also takes a release, e.g. flash-attn==2.8.3 (its sdist, fetched
    and hash-checked). Without a GPU: inspect and --compile-only work; test and bench need one."""


def _apply(options):
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


def _one(path: bool = False, nonempty: bool = False):
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
selection_options = _apply([
    click.option("--hdim", multiple=True, callback=_one(), help=SELECTION_HELP["hdim"]),
    click.option("--dtype", multiple=True, callback=_one(), help=SELECTION_HELP["dtype"]),
    click.option("--arch", multiple=True, callback=_one(), help=SELECTION_HELP["arch"]),
    click.option("--direction", multiple=True, callback=_one(), help=SELECTION_HELP["direction"]),
    click.option("--causal", multiple=True, callback=_one(), help=SELECTION_HELP["causal"]),
    click.option("--no-local", "no_local", is_flag=True, help=SELECTION_HELP["no_local"]),
    click.option("--no-softcap", "no_softcap", is_flag=True, help=SELECTION_HELP["no_softcap"]),
    click.option("--features", multiple=True, callback=_one(), help="Features compiled in: a comma list (local,softcap; an upstream tree's own "
                                    "such as dropout), 'none', or leave it out for all. --no-local / --no-softcap "
                                    "remove one."),
    click.option("--config", multiple=True, callback=_one(path=True), help="A TOML preset: a file, or a name in configs/ (e.g. ci-compile). Flags override it."),
    click.option("--source", type=click.Path(file_okay=False), multiple=True, callback=_one(path=True),
                 help="An external kernel tree to build a slice of: a directory (e.g. an unpacked flash-attn sdist; "
                 "it is read, never written) or a release spec such as flash-attn==2.8.3 (its sdist fetched into "
                 "the cache and checked). Its profile and release are detected (flashbuild profiles --source TREE "
                 "says how) unless --profile names them."),
    click.option("--profile", multiple=True, callback=_one(path=True, nonempty=True),
                 help="What kind of tree --source is: a profile in configs/profiles (flash-attn-2, ...), one of its "
                 "releases (flash-attn-2@2.6) or a .toml path. Default: detected from --source; without --source, "
                 "flashbuild's own kernels."),
])


def _own_nvcc_flags(ctx, param, flags):
    """--nvcc-flag values, less the one flashbuild reserves: --profile-templates passes
    --fdevice-time-trace=- and then summarizes and deletes the traces, so the same flag given by hand
    would have its traces deleted too."""
    from .build import compile_profile

    for flag in flags:
        if flag.strip().replace(" ", "=") == compile_profile.TRACE_FLAG:
            raise click.BadParameter(
                f"{flag!r} is the flag --profile-templates passes (its traces are summarized into "
                "compile_profile.txt, then deleted). For that table: flashbuild build --profile-templates; "
                "to keep nvcc's raw trace, name its file: --nvcc-flag=--fdevice-time-trace=FILE.json "
                "(with one TU in the selection: each TU writes that file)")
    return flags


build_options = _apply([
    click.option("--jobs", "-j", type=int, help="Parallel compiles. Default: min(cores, free memory / 4 GiB)."),
    click.option("--build-dir", type=click.Path(file_okay=False), multiple=True, callback=_one(path=True),
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

# ---------------------------------------------------------------- CI: cells of a matrix, shards (docs/ci.md)
ci_options = _apply([
    click.option("--cell", help="Build one cell of the CI matrix given with --config (see `flashbuild matrix CONFIG`)."),
    click.option("--shard", metavar="I/N", help="Compile only shard I of N of the selection's TUs (split by compile "
                                                "cost) into an artifact dir for `flashbuild link`; no link."),
    click.option("--costs", type=click.Path(dir_okay=False), multiple=True, callback=_one(path=True), help="With --shard: compile times to split by, a "
                 ".ninja_log of an earlier build or JSON {TU: seconds}. Default: this build dir's .ninja_log, else "
                 "a per-kind estimate. Give every shard the same file."),
    click.option("--artifact-dir", type=click.Path(file_okay=False), multiple=True, callback=_one(path=True),
                 help="With --shard: where the objects and "
                 "manifest go. Default: flashbuild-artifacts/CELL-shard-I-of-N."),
])


def ci_request(kwargs: dict, cell: str | None) -> dict:
    """The build keywords with --cell resolved into its selection; refuses --cell without a matrix
    and a matrix without --cell (listing its cells)."""
    from .ci import matrix as matrices

    config = kwargs.get("config")
    if not cell:
        if config and matrices.is_matrix_config(config):
            names = ", ".join(c.name for c in matrices.load(config).cells)
            raise click.UsageError(f"--config {config} is a CI matrix, not a preset: pick one of its cells with "
                                   f"--cell NAME (cells: {names})")
        return kwargs
    if not config:
        raise click.UsageError(f"--cell {cell}: a cell belongs to a CI matrix; give it with --config "
                               f"(e.g. --config configs/ci.toml --cell {cell})")
    given = [f"--{k.replace('_', '-')}" for k in SELECTION_KEYS if k != "config" and kwargs.get(k)]
    if given:
        raise click.UsageError(f"--cell {cell} is a whole selection: drop {', '.join(given)}, or build a "
                               f"selection of your own without --cell")
    return {**kwargs, "config": None, **matrices.cell_request(matrices.load(config), cell)}


def parse_request(**kwargs):
    """builder.parse_request, where --features NAME with --no-NAME is a contradiction (--no-NAME alone
    narrows a preset's or the default features; load()'s no_local / no_softcap narrow features= too)."""
    from .build import builder
    from .selection import variants
    from .sources import detect, profile as profiles

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


def build_shard(shard: str, costs: str | None, artifact_dir: str | None, cell: str | None, config: str | None,
                dry_run: bool, kwargs: dict) -> None:
    """`build --shard I/N`: this machine's part of the selection, into an artifact dir."""
    from pathlib import Path

    from .build import builder
    from .ci import shard as sharding

    spec = sharding.parse_shard(shard)
    check_output(artifact_dir, "--artifact-dir")
    selection, options = parse_request(**kwargs)
    plan = builder.make_plan(selection, options)
    if dry_run:
        found, source = sharding.find_costs(plan, costs)
        split = sharding.split(plan.units, spec.count, found, source)
        # the plan of this shard's TUs (what it compiles), then the whole split
        click.echo(builder.describe_plan(sharding.shard_plan(plan, split.shards[spec.index - 1]), linking=False,
                                         why_no_link="--shard"))
        click.echo(sharding.describe_split(split, spec))
        click.echo("dry run: nothing was rendered, compiled or written")
        return
    target, manifest = sharding.build_shard(plan, spec, costs=costs, artifact_dir=Path(artifact_dir) if artifact_dir
                                            else None, cell=cell, config=config)
    click.echo(f"shard {spec.label} of {plan.key}: {builder.plural(len(manifest['units']), 'kernel object')} in "
               f"{target} (link all {spec.count} with `flashbuild link DIR...`)")


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


def _finite(ctx, param, value):
    """A click callback: refuse nan and inf where a number of seconds or a softcap belongs."""
    import math

    if value is not None and not math.isfinite(value):
        raise click.BadParameter(f"{value}: must be a finite number", ctx=ctx, param=param)
    return value


@cli.command()
@selection_options
@click.option("--dry-run", is_flag=True, help="Print the plan (variants, families, files, TUs); build nothing.")
@click.option("--compile-only", is_flag=True, help="Compile the kernel objects; no binding, no link (no torch CUDA needed).")
@build_options
@click.option("--profile-compile", is_flag=True, help="Time nvcc's phases per TU (nvcc --time) and print them as a "
              "table after the build. An nvcc flag, so it builds in its own build dir (key).")
@click.option("--profile-templates", is_flag=True, help="Split each TU's cicc time into its C++ front end (header "
              "parsing, template instantiation, the rest) and NVVM, and name the costliest template families "
              "(nvcc >= 12.8, --fdevice-time-trace; tracing makes the compile about 2x slower). Own build dir.")
@ci_options
def build(dry_run, cell, shard, costs, artifact_dir, profile_compile=False, profile_templates=False, **kwargs):
    """Build a selection (the default command): render, compile, link, report."""
    import shlex

    from .build import builder, compile_profile

    if profile_compile:
        kwargs["nvcc_flags"] = (*(kwargs.get("nvcc_flags") or ()), compile_profile.NVCC_FLAG)
    if profile_templates:
        nvcc = env.find_nvcc()
        problem = compile_profile.trace_problem(env.nvcc_version(nvcc.path)) if nvcc else None
        if problem:
            raise click.UsageError(problem)
        kwargs["nvcc_flags"] = (*(kwargs.get("nvcc_flags") or ()), compile_profile.TRACE_FLAG)
    config_shown = kwargs.get("config")
    kwargs = ci_request(kwargs, cell)
    if shard:
        return build_shard(shard, costs, artifact_dir, cell, config_shown, dry_run, kwargs)
    if costs or artifact_dir:
        raise click.UsageError(f"{'--costs' if costs else '--artifact-dir'} goes with --shard I/N; add it or drop this")
    selection, options = parse_request(**kwargs)
    if dry_run:
        plan = builder.make_plan(selection, options)
        no_link = builder.why_no_link(options)
        click.echo(builder.describe_plan(plan, linking=not no_link, why_no_link=no_link))
        click.echo("dry run: nothing was rendered, compiled or written")
        return
    result = builder.build(selection, options)
    if result.extension is None:
        click.echo(f"compiled {builder.plural(len(result.manifest['units']), 'kernel object')} in {result.build_dir / 'obj'} "
                   "(--compile-only: no binding, no link)")
        return
    if not selection.builtin:
        _echo_tree_build(result, selection, options)
        return
    load_args = {k: v for k, v in selection.as_kwargs().items()}
    flags = options.flags
    load_args.update({k: v for k, v in (("debug", flags.debug), ("lineinfo", flags.lineinfo)) if v})
    if flags.nvcc_flags:
        load_args["nvcc_flags"] = list(flags.nvcc_flags)
    call = ", ".join(f"{k}={_py_literal(v)}" for k, v in load_args.items())
    click.echo(f"extension  {result.extension}")
    click.echo(f"module     {result.module_name} (key {result.key})")
    click.echo(f"holds      {builder.plural(len(result.manifest['variants']), 'variant')}: {', '.join(result.manifest['variants'])}")
    cannot_run = _why_it_cannot_run_here(selection)
    if cannot_run:  # a load() line would only end in torch's "Found no NVIDIA driver": say what works here
        args = shlex.join(build_args(selection, options))
        click.echo(f"no GPU     {cannot_run}, so the extension cannot run on this machine; what works here: "
                   f"`flashbuild inspect {args}` (registers, spills, SASS) and --compile-only builds; "
                   f"`flashbuild test {args}` and flashbuild.load() need a GPU")
        return
    click.echo(f"load it    {shlex.join(['python3', '-c', f'import flashbuild; m = flashbuild.load({call})'])}")


def _why_it_cannot_run_here(selection) -> str:
    """'' when a GPU here runs one of the build's archs (nvidia-smi's list), else why none does."""
    from .debug.runtime import runs_on

    gpus = env.gpus()
    if not gpus:
        return "nvidia-smi reports no GPU here"
    archs = sorted({v.arch for v in selection.variants})
    caps = [(name, round(float(cap) * 10)) for name, cap in gpus if cap.replace(".", "", 1).isdigit()]
    if not caps or any(runs_on(arch, number) for arch in archs for _, number in caps):
        return ""  # a capability nvidia-smi did not print as a number: let load() say what it finds
    return (f"this machine's GPUs ({', '.join(f'{name}: sm{number}' for name, number in caps)}) run none of the "
            f"build's archs ({', '.join(archs)})")


def _echo_tree_build(result, selection, options) -> None:
    """What a build of an external tree holds and how to use it."""
    import shlex

    from .build import builder
    from .sources import profile as profiles

    tree = profiles.load(selection.profile)
    paths = [str(result.build_dir)] + [str(profiles.Path(selection.source) / p) for p in tree.python_path]
    click.echo(f"extension  {result.extension}")
    click.echo(f"module     {result.module_name} (key {result.key}; {tree.name} at {selection.source})")
    click.echo(f"holds      {builder.plural(len(result.manifest['units']), 'kernel TU')}: "
               f"{', '.join(u['name'] for u in result.manifest['units'])}")
    click.echo(f"use it     PYTHONPATH={shlex.quote(':'.join(paths))}${{PYTHONPATH:+:$PYTHONPATH}} python3 ... "
               f"(import {tree.python_package or result.module_name} picks up this slice)")
    click.echo(f"or         {shlex.join(['flashbuild', 'run', *build_args(selection, options), '--', 'python3', '...'])}")


def _py_literal(value) -> str:
    """A Python literal in double quotes (so the whole snippet shell-quotes into one readable pair
    of single quotes)."""
    if isinstance(value, str):
        return json.dumps(value)
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(map(_py_literal, value)) + "]"
    return repr(value)


@cli.command(name="test")
@selection_options
@build_options
@click.option("--seed", type=int, default=0, show_default=True, help="Seed of the random inputs (fresh per variant and shape).")
@click.option("--shapes", type=click.Choice(["quick", "full"]), default="full", show_default=True,
              help="quick: 3 shapes (odd seqlen, GQA 8:1, MQA with seqlen_q > seqlen_k); full: all 8. A feature "
                   "variant (*_local, *_softcap) runs its window and softcap cases on the quick shapes "
                   "(and one decode-like shape with full).")
@click.option("--json", "json_path", type=click.Path(dir_okay=False), help="Also write the rows as JSON to this file.")
@click.option("--sanitize", is_flag=True, help="Run the checks under compute-sanitizer (memcheck); a report fails its check.")
@click.option("--rebuild", is_flag=True, help="Remove the build's outputs and build it again before testing.")
def test_(seed, shapes, json_path, sanitize, rebuild, **kwargs):
    """Check the variants a build holds against the fp32 reference (builds the slice if needed).

    A check passes when the kernel's max abs error is at most twice PyTorch's own error in the input
    dtype (plus a small eps); NaN (or an output element the kernel did not write) never passes.
    Feature variants (*_local_softcap, ...) are checked on calls with local windows and softcap.
    Exit 1 when any check fails, 2 without a GPU."""
    import os

    from .build import builder
    from .debug import checking, runtime, sanitize as sanitizing
    from .errors import CheckFailedError
    from .selection.variants import Variant

    import shlex

    check_output(json_path, "--json")
    gpu = runtime.require_gpu("test")
    selection, options = parse_request(**kwargs)
    runtime.check_selection_runs_here(selection, gpu, "test")
    info = {"device": gpu.describe(), "seed": seed, "shapes": shapes, "sanitize": sanitize,
            "command": shlex.join(["flashbuild", "test", *build_args(selection, options), "--seed", str(seed),
                                   "--shapes", shapes])}
    if sanitize and os.environ.get(sanitizing.MARKERS_ENV) != "1":
        rows = _test_sanitized(selection, options, seed, shapes, rebuild)
    else:
        module = runtime.load_build(selection, options, rebuild=rebuild)
        info["build_key"] = module.build_key()
        built = [Variant.from_name(name) for name in module.variants()]
        here, elsewhere = runtime.runnable(built, gpu)
        skipped = [(v, f"built for {v.arch}: this {gpu.arch} GPU runs the {here[0].arch if here else gpu.arch} "
                       "kernels") for v in elsewhere]
        markers = os.environ.get(sanitizing.MARKERS_ENV) == "1"
        width = max([30] + [len(v.name) for v in built])
        shape_sets = (checking.SHAPE_SETS[shapes], checking.FEATURE_SHAPE_SETS[shapes])
        shape_width = checking.shape_width(here, *shape_sets)
        click.echo(checking.table_header(width, shape_width))
        rows = checking.run_checks(
            module, here, shape_sets[0], feature_shapes=shape_sets[1], seed=seed, device=gpu.device, skipped=skipped,
            on_row=lambda row: click.echo(checking.format_row(row, width, shape_width)),
            before=(lambda v, s: click.echo(sanitizing.marker_line(v.name, s.label(v)))) if markers else
            (lambda v, s: None))
    click.echo(checking.summary(rows))
    if json_path:
        _write(json_path, checking.results_json(rows, **info))
    problem = checking.verdict(rows)
    if problem:
        raise CheckFailedError(problem)


def _test_sanitized(selection, options, seed, shapes, rebuild):
    """Build here, run the checks in a child under compute-sanitizer, add its reports to the rows."""
    import tempfile
    from pathlib import Path

    from .build import builder
    from .debug import checking, runtime, sanitize as sanitizing
    from .errors import CheckFailedError

    sanitizing.find_sanitizer()  # a missing tool is an error before anything is built
    runtime.load_build(selection, options, rebuild=rebuild)
    with tempfile.TemporaryDirectory(prefix="flashbuild-sanitize-") as tmp:
        json_path = Path(tmp) / "rows.json"
        args = [*build_args(selection, options), "--seed", str(seed), "--shapes", shapes]
        code, reports, tail = sanitizing.run_child(args, json_path, builder.log)
        if not json_path.is_file():
            last = " | ".join(line for line in tail[-5:] if line.strip())
            raise CheckFailedError(f"the run under compute-sanitizer ended (exit {code}) before writing its results; "
                                   f"its last lines: {last}")
        rows = sanitizing.apply(checking.rows_from_json(json_path.read_text()), reports)
    width = max([30] + [len(r.variant) for r in rows])
    shape_width = max([checking.SHAPE_WIDTH] + [len(r.shape) for r in rows])
    click.echo(checking.table_header(width, shape_width))
    for row in rows:
        click.echo(checking.format_row(row, width, shape_width))
    return rows


@cli.command()
@selection_options
@build_options
@click.option("--seqlens", default=",".join(map(str, (1024, 2048, 4096, 8192, 16384))), show_default=True,
              help="Sequence lengths (batch = 16384 / seqlen), comma-separated; 4k means 4096.")
@click.option("--reps", type=click.IntRange(1), default=30, show_default=True, help="Timed reps per measurement (the median is reported).")
@click.option("--window", "window_text", metavar="LEFT,RIGHT",
              help="Measure the local feature variants (*_local*) with window_size=(LEFT, RIGHT), e.g. 256,0 "
                   "(-1: unbounded). FLOPs count the visible pairs only.")
@click.option("--softcap", type=click.FloatRange(0, min_open=True), callback=_finite,
              help="Measure the softcap feature variants (*_softcap) with this softcap, e.g. 30.")
@click.option("--csv", "csv_path", type=click.Path(dir_okay=False), help="Write the results as CSV.")
@click.option("--json", "json_path", type=click.Path(dir_okay=False), help="Write the results as JSON (for --compare).")
@click.option("--plot", "plot_path", type=click.Path(dir_okay=False), help="Plot TFLOPS vs seqlen to this PNG.")
@click.option("--compare", "compare_path", type=click.Path(dir_okay=False), help="Show the change against an earlier --json file.")
@click.option("--results", "results_path", type=click.Path(dir_okay=False),
              help="Report an earlier --json file instead of measuring (table, --csv, --plot, --compare; no GPU).")
@click.option("--rebuild", is_flag=True, help="Remove the build's outputs and build it again before measuring.")
@click.option("--peer-source", type=click.Path(exists=True, file_okay=False),
              help="Also measure this upstream tree's slice of the same head dims, dtypes and directions, in the "
                   "same turns (e.g. a flash-attention checkout for FA3). Needs --peer-profile. Its features are "
                   "compiled out, unless --window/--softcap measure ours: then it has those of ours it can.")
@click.option("--peer-profile", help="What kind of tree --peer-source is (flash-attn-3, flash-attn-2, ...).")
def bench(seqlens, reps, window_text, softcap, csv_path, json_path, plot_path, compare_path, results_path, rebuild,
          peer_source, peer_profile, **kwargs):
    """TFLOPS and ms of the variants a build holds, beside PyTorch SDPA's flash, cuDNN and efficient
    backends in the same run (16k tokens per batch, model dim 2048; builds the slice if needed).
    Feature variants are measured with --window and/or --softcap (skipped without them)."""
    import shlex
    from pathlib import Path

    from .debug import bench as benching

    try:
        seqlen_values = benching.parse_seqlens(seqlens)
    except ValueError as exc:
        raise click.BadParameter(str(exc).split(": ", 1)[-1], param_hint="--seqlens") from None
    try:
        window = benching.parse_window(window_text) if window_text else (-1, -1)
    except ValueError as exc:
        raise click.BadParameter(str(exc).split(": ", 1)[-1], param_hint="--window") from None
    for path, flag in ((csv_path, "--csv"), (json_path, "--json"), (plot_path, "--plot")):
        check_output(path, flag)
        for source, source_flag in ((results_path, "--results"), (compare_path, "--compare")):
            if path and source and not path_problem(source) and \
                    Path(path).expanduser().absolute() == Path(source).expanduser().absolute():
                raise click.BadParameter(f"{path} is the {source_flag} file: writing it would overwrite what it "
                                         f"reports; give another path", param_hint=flag)
    if plot_path and benching.plot_format_problem(plot_path):
        raise click.BadParameter(f"{plot_path}: {benching.plot_format_problem(plot_path)}; use e.g. --plot "
                                 f"{shlex.quote(str(Path(plot_path).with_suffix('.png')))}", param_hint="--plot")
    old = benching.load_results(compare_path, "--compare") if compare_path else None
    if bool(peer_source) != bool(peer_profile):
        given, missing = ("--peer-source", "--peer-profile") if peer_source else ("--peer-profile", "--peer-source")
        raise click.UsageError(f"{given} needs {missing}: e.g. --peer-source ~/flash-attention --peer-profile "
                               f"flash-attn-3")
    peer = (peer_source, peer_profile) if peer_source else None
    if peer:
        _check_peer_profile(peer_profile)
    if results_path:
        given = [f"--{k.replace('_', '-')}" for k in SELECTION_KEYS if kwargs.get(k)]
        given += [flag for flag, value in (("--window", window_text), ("--softcap", softcap),
                                            ("--peer-source", peer_source)) if value]
        if given:
            raise click.UsageError(f"--results reports the file as it is: drop {', '.join(given)}")
        info, results = benching.load_results(results_path, "--results")
    else:
        info, results = _measure(seqlen_values, reps, rebuild, kwargs, window, softcap or 0.0, peer)
    click.echo(benching.table(results))
    if csv_path:
        _write(csv_path, benching.results_csv(results))
    if json_path:
        _write(json_path, benching.results_json(results, **info))
    if plot_path:
        title = f"{info.get('device', '')}  {info.get('command', '')}".strip()
        try:
            click.echo(f"plot: {benching.plot(results, plot_path, title)}", err=True)
        except OSError as exc:
            raise click.ClickException(f"--plot {plot_path}: cannot write it ({exc.strerror or exc}); "
                                       "choose another path") from None
    if old is not None:
        changes, only_new, only_old = benching.compare(old[1], results)
        click.echo(benching.compare_table(changes, only_new, only_old, compare_path))


def _check_peer_profile(name: str) -> None:
    """--peer-profile names an external tree's profile: checked before anything builds or a GPU is
    looked for, and an error names --peer-profile (not --profile, which is our selection's)."""
    from .sources import profile as profiles

    if profiles.load(name, flag="--peer-profile").builtin:
        others = [p for p in profiles.available() if p != profiles.BUILTIN]
        raise click.BadParameter(f"--peer-profile {name}: flashbuild's own kernels, which bench measures as "
                                 f"{name} already; give the profile of the tree --peer-source is "
                                 f"({', '.join(others)})", param_hint="--peer-profile")


def _peer_request(kwargs: dict, peer: tuple[str, str], directions: tuple[str, ...],
                  features: tuple[str, ...] = ()) -> dict:
    """The peer's slice: the same head dims, dtypes, archs and causal variants as ours, of the
    directions both have (fwd, bwd). `features`: our selection's, when the bench calls our feature
    variants (--window / --softcap), else (); the peer compiles in those its profile names, so that
    its feature variants are ours by name, and nothing else (each feature multiplies its TUs)."""
    from .sources import profile as profiles

    both = [d for d in directions if d in ("fwd", "bwd")]
    if not both:
        raise click.UsageError(f"--peer-source measures the directions both builds have (fwd, bwd); --direction "
                               f"{','.join(directions)} has neither: use --direction fwd,bwd")
    from .sources import switches

    tree = profiles.load(peer[1], flag="--peer-profile")
    # and the switch features that only make it faster (FA3's cluster, FA2's even_mn): as fast as its own build
    speed = switches.speed_features(tree.switches) if tree.switches is not None else ()
    return {**kwargs, "source": peer[0], "profile": peer[1],
            "features": ",".join(f for f in tree.features if f in features or f in speed) or "none", "no_local": False,
            "no_softcap": False, "config": None, "build_dir": None, "direction": ",".join(both)}


def _measure(seqlens, reps, rebuild, kwargs, window=(-1, -1), softcap=0.0, peer=None):
    import datetime
    import shlex
    from pathlib import Path

    from .version import __version__
    from .debug import bench as benching, runtime
    from .build import builder
    from .errors import BuildError
    from .selection.variants import Variant

    gpu = runtime.require_gpu("bench")
    selection, options = parse_request(**kwargs)
    runtime.check_selection_runs_here(selection, gpu, "bench")
    module = runtime.load_build(selection, options, rebuild=rebuild)
    peers = {}
    if peer:
        asked = benching.features_asked(window, softcap)
        peer_selection, peer_options = parse_request(**_peer_request(
            kwargs, peer, selection.directions, selection.features if asked else ()))
        builder.log(f"peer {peer[1]}: features {', '.join(peer_selection.features) or 'none'} compiled in "
                    + ("(ours that it has a switch for: --window/--softcap measure our feature variants)" if asked
                       else "(without --window/--softcap the bench calls plain attention)"))
        peers[Path(peer[1]).stem] = runtime.load_build(peer_selection, peer_options, rebuild=rebuild)
    built = [Variant.from_name(name) for name in module.variants()]
    here, elsewhere = runtime.runnable(built, gpu)
    if elsewhere:
        builder.log(f"not measured here ({gpu.arch}): {', '.join(v.name for v in elsewhere)}")
    unmeasured = [v for v in here if v.direction not in benching.DIRECTIONS]
    if unmeasured:
        builder.log(f"not measured (the standard's shapes are for {', '.join(benching.DIRECTIONS)}): "
                    f"{', '.join(v.name for v in unmeasured)}")
        here = [v for v in here if v.direction in benching.DIRECTIONS]
    asked = benching.features_asked(window, softcap)
    for feature in asked:
        if not any(feature in v.features for v in here):
            builder.log(f"--{'window' if feature == 'local' else 'softcap'}: no variant measured here has {feature} "
                        f"(built without it, or with --no-{feature}): the plain variants are measured as they are")
    idle = [v for v in here if v.features and not set(v.features) & set(asked)]
    if idle:
        builder.log(f"not measured (a feature variant runs only for calls with its features: pass --window LEFT,RIGHT "
                    f"and/or --softcap X): {', '.join(v.name for v in idle)}")
        here = [v for v in here if v not in idle]
    names = {v.name for v in built}
    results = []
    builder.log(f"measuring {len(here)} variants x {len(seqlens)} seqlens x {len(benching.BACKENDS) + len(peers)} backends "
                f"on {gpu.describe()}")
    try:
        for variant in here:
            has_fwd = variant.name.replace("bwd_", "fwd_", 1) in names
            features = benching.features_for(variant, window, softcap)
            for seqlen in seqlens:
                results += benching.measure(module, variant, seqlen, reps=reps, has_fwd=has_fwd, log=builder.log,
                                            peers=peers, **features)
    except RuntimeError as exc:  # a CUDA error outside one backend's measurement leaves the context unusable
        raise BuildError(f"the benchmark stopped: {str(exc).strip().splitlines()[0]}") from None
    extra = (["--window", f"{window[0]},{window[1]}"] if window != (-1, -1) else []) + (
        ["--softcap", f"{softcap:g}"] if softcap else [])
    extra += ["--peer-source", str(peer[0]), "--peer-profile", peer[1]] if peer else []
    info = {"command": shlex.join(["flashbuild", "bench", *build_args(selection, options),
                                   "--seqlens", ",".join(map(str, seqlens)), "--reps", str(reps), *extra]),
            "device": gpu.describe(), "torch": gpu.torch, "flashbuild": __version__,
            "build_key": module.build_key(), "date": datetime.datetime.now().isoformat(timespec="seconds")}
    return info, results


@cli.command(context_settings={"ignore_unknown_options": True, "allow_interspersed_args": False})
@selection_options
@build_options
@click.argument("command", nargs=-1, required=True, type=click.UNPROCESSED)
def run(command, **kwargs):
    """Build the slice if needed, then run COMMAND (after --) with it first on the import path:
    `flashbuild run --source TREE --profile flash-attn-2 --hdim 64 --dtype fp16 -- python3 -m pytest
    TREE/tests/test_flash_attn.py -p flashbuild.sources.pytest_slice` runs the tree's own tests on the
    slice. FLASHBUILD_SLICE names the build's manifest for such tools. Exits with COMMAND's status."""
    import os
    import shutil

    from .build import builder
    from .sources import profile as profiles

    if command and command[0] == "--":
        command = command[1:]
    if not command:
        raise click.UsageError("no command to run: give it after --, e.g. flashbuild run ... -- python3 script.py")
    if shutil.which(command[0]) is None:  # before a build of minutes, not after it
        if os.sep in command[0]:  # a path: say what is wrong with it, not "PATH"
            exists = os.path.exists(command[0])
            why = ("a directory" if os.path.isdir(command[0]) else "not executable (chmod +x it, or run it with "
                   "python3)") if exists else "no such file"
            raise click.UsageError(f"{command[0]}: {why}; give a program after --, e.g. flashbuild run ... -- "
                                   f"python3 {shlex.quote(command[0])}")
        raise click.UsageError(f"{command[0]}: command not found on PATH; give a program on PATH or a path to "
                               f"one after --, e.g. flashbuild run ... -- python3 script.py")
    selection, options = parse_request(**kwargs)
    result = builder.build(selection, options)
    tree = profiles.load(selection.profile)
    root = profiles.Path(selection.source) if selection.source else None
    paths = [str(result.build_dir)] + ([str(root / p) for p in tree.python_path] if root else [])
    environ = dict(os.environ)
    environ["PYTHONPATH"] = os.pathsep.join(paths + ([environ["PYTHONPATH"]] if environ.get("PYTHONPATH") else []))
    environ["FLASHBUILD_SLICE"] = str(result.build_dir / "manifest.json")
    environ.setdefault("PYTHONPYCACHEPREFIX", str(result.build_dir / "pycache"))  # no __pycache__ in the tree
    program = shutil.which(command[0], path=environ.get("PATH"))
    if program is None:
        raise click.UsageError(f"{command[0]}: command not found on PATH")
    builder.log(f"running with {result.key} first on the import path: {' '.join(command)}")
    sys.stdout.flush()
    sys.stderr.flush()
    os.execve(program, list(command), environ)


@cli.command(name="inspect")
@selection_options
@build_options
@click.option("--sass", "sass_variant", metavar="VARIANT", help="Write this variant's SASS to VARIANT.sass (in --sass-dir).")
@click.option("--sass-dir", default=".", show_default=True, type=click.Path(file_okay=False), help="Where --sass writes.")
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of the table.")
def inspect_(sass_variant, sass_dir, as_json, **kwargs):
    """Registers, spills, shared and local memory, occupancy and the SASS instruction mix of each
    kernel in a build, read from its objects (no GPU needed; compiles the objects if missing)."""
    import dataclasses
    from pathlib import Path

    from .build import builder, graph
    from .debug import inspection
    from .sources.units import KERNEL_SUFFIX

    selection, options = parse_request(**kwargs)
    units = builder.make_plan(selection, options).units
    names = [u.name for u in units]
    if sass_variant and sass_variant not in names:
        import difflib
        import shlex

        near = difflib.get_close_matches(sass_variant, names, n=1) or names[:1]
        raise click.UsageError(f"--sass {shlex.quote(sass_variant)}: not a variant of this selection (it holds: "
                               f"{', '.join(names)}); use --sass {near[0]}")
    if sass_variant:
        check_output(str(Path(sass_dir) / f"{sass_variant}.sass"), "--sass-dir")
    inspection.tools()  # a missing cuobjdump/nvdisasm is an error before anything is compiled
    if builder.why_no_link(options):
        options = dataclasses.replace(options, compile_only=True)
    result = builder.build(selection, options)
    objects = {u.name: result.build_dir / graph.object_path(u) for u in units}
    reports = inspection.inspect_build(objects)
    if as_json:
        click.echo(inspection.reports_json(reports, build_key=result.key, build_dir=str(result.build_dir)), nl=False)
    else:
        click.echo(f"build {result.key} ({result.build_dir})")
        click.echo(inspection.table(reports))
    if sass_variant:
        path = Path(sass_dir) / f"{sass_variant}.sass"
        # A variant whose kernel compiles device-only: its own TU is host code, the kernel is in <variant>_kernel.
        unit = next(u for u in units if u.name == sass_variant)
        holder = f"{sass_variant}{KERNEL_SUFFIX}" if not unit.part and unit.variant and unit.variant.kernel_tu else None
        _write(str(path), inspection.sass_text(objects[holder or sass_variant]))
        click.echo(f"SASS of {sass_variant}{f' (its kernel TU, {holder})' if holder else ''}: {path}", err=as_json)


@cli.command()
@selection_options
@build_options
@click.option("--interval", type=click.FloatRange(0.1, 86400), callback=_finite, default=0.5, show_default=True,
              help="Seconds between polls of the kernel sources.")
@click.option("--shapes", type=click.Choice(["quick", "full"]), default="quick", show_default=True, help="The test's shapes.")
@click.option("--seed", type=int, default=0, show_default=True, help="Seed of the random inputs, as `flashbuild test`'s.")
@click.option("--test-all", is_flag=True, help="After each rebuild, test every variant of the build, not only the "
                                               "variants whose kernel objects were recompiled.")
@click.option("--fresh-process", is_flag=True, help="Run each round as `flashbuild test` in a new process (the "
                                                    "whole selection; what an external tree's build always does).")
@click.option("--json", "json_path", type=click.Path(dir_okay=False),
              help="Append one JSON line per round to this file: what changed, was rebuilt and tested, the build, "
                   "load and test seconds, save->verdict seconds, the verdict.")
def watch(interval, shapes, seed, test_all, fresh_process, json_path, **kwargs):
    """On every saved file under kernels/, rebuild the slice and test what the change rebuilt.

    One warm process: each round rebuilds, loads the new build into the same process and runs
    `flashbuild test`'s checks on the variants whose kernel objects were recompiled (all of them
    with --test-all, or when the binding was), then prints one line: what was rebuilt and tested, in
    how many seconds, pass or FAIL, and save->verdict seconds. The first round tests every variant.
    Needs a GPU (exit 2 without one)."""
    import os
    from pathlib import Path

    from .build import builder
    from .debug import runtime, watch as watching

    selection, options = parse_request(**kwargs)
    plan = builder.make_plan(selection, options)
    root = env.kernels_dir() if selection.builtin else \
        builder.tree_root(plan) / (plan.profile.include_dirs[0] if plan.profile.include_dirs else "")
    if fresh_process:
        if json_path:
            raise click.UsageError("--json records the rounds of the warm loop; --fresh-process runs each round as "
                                   "`flashbuild test` in a new process: drop --json (or --fresh-process)")
        runtime.require_gpu("watch")  # else every round's `flashbuild test` refuses, and the watch polls on
        command = [sys.executable, "-m", "flashbuild", "test", *build_args(selection, options), "--shapes", shapes,
                   "--seed", str(seed)]
        watching.watch(root, command, interval=interval, log=builder.log)
        return
    check_output(json_path, "--json")
    gpu = runtime.require_gpu("watch")
    runtime.check_selection_runs_here(selection, gpu, "watch")
    if not selection.builtin:  # builds here; checks each round in a child (watch.TREE_RELOAD says why)
        builder.log(f"an external tree's checks run in a fresh process each round: {watching.TREE_RELOAD}")
        loop = watching.tree_loop(selection, options, shapes=shapes, seed=seed, test_all=test_all, echo=click.echo)
        record = watching.append_json(Path(json_path)) if json_path else (lambda done: None)
        watching.watch_warm(root, loop, interval=interval, log=builder.log, echo=click.echo, record=record,
                            checks_in_child=True)
        return
    loop = watching.warm_loop(selection, options, gpu, shapes=shapes, seed=seed, test_all=test_all, echo=click.echo)
    record = watching.append_json(Path(json_path)) if json_path else (lambda done: None)
    watching.watch_warm(root, loop, interval=interval, log=builder.log, echo=click.echo, record=record,
                        restart=lambda: os.execv(sys.executable, [sys.executable, "-m", "flashbuild", *sys.argv[1:]]))


def _write(path: str, text: str) -> None:
    from pathlib import Path

    target = Path(path)
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text)
    except OSError as exc:
        raise click.ClickException(f"cannot write {path}: {exc.strerror or exc}") from None
    click.echo(f"wrote {path}", err=True)


@cli.command()
@click.option("--source", type=click.Path(file_okay=False),
              help="A kernel tree: say which profile and release it is, and why the others do not match.")
def profiles(source):
    """The profiles of external kernel trees and the releases each serves (configs/profiles/)."""
    from pathlib import Path

    from .sources import detect

    click.echo(detect.listing())
    if source is not None:
        root = Path(source).expanduser().resolve()
        if not root.is_dir():
            raise click.BadParameter(f"{source}: {'not a directory' if root.exists() else 'does not exist'}; pass "
                                     f"the root of a kernel tree", param_hint="--source")
        click.echo(detect.describe(root))


@cli.command(name="list")
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of text.")
def list_(as_json):
    """The variant space, its kernel families, and the builds in the cache."""
    from .selection import variants as v
    from .build import cache
    from .build.plan import plural

    families = [{"direction": d, "arch": a, "family": name, "note": v.FAMILY_NOTES.get((d, a))}
                for (d, a), name in v.FAMILY_TABLE.items()]
    builds, skipped = cache.scan()
    for line in skipped:
        click.echo(f"flashbuild: {line}", err=True)
    if as_json:
        click.echo(json.dumps({
            "axes": {"hdim": list(v.HEAD_DIMS), "dtype": list(v.DTYPES), "arch": [*v.ARCHS, v.NATIVE],
                     "direction": list(v.DIRECTIONS), "causal": list(v.CAUSAL_MODES), "features": list(v.FEATURES)},
            "implemented_directions": list(v.implemented_directions()),
            "families": families,
            "head_dim_notes": [{"direction": d, "arch": a, "hdim": h, "note": n}
                               for (d, a, h), n in v.HEAD_DIM_NOTES.items()],
            "cache_dir": str(env.cache_dir()),
            "builds": [{"key": b.key, "path": str(b.path), "variants": b.variants, "size_bytes": b.size_bytes,
                        "has_extension": b.has_extension, "problems": list(b.problems)} for b in builds],
            "skipped": skipped,
        }, indent=2))
        return
    click.echo("variant space:")
    click.echo(f"  hdim       {', '.join(map(str, v.HEAD_DIMS))}")
    click.echo(f"  dtype      {', '.join(v.DTYPES)}")
    click.echo(f"  arch       {', '.join(v.ARCHS)}, native (the GPU's)")
    click.echo(f"  direction  {', '.join(v.DIRECTIONS)}")
    click.echo(f"  causal     {', '.join(v.CAUSAL_MODES)}")
    click.echo(f"  features   {', '.join(v.FEATURES)} (each compiled in by default, into a *_{'_'.join(v.FEATURES)} "
               f"variant beside each plain one; {', '.join(f'--no-{f}' for f in v.FEATURES)} compile one out)")
    click.echo("families (direction, arch -> family):")
    for direction in v.DIRECTIONS:
        served = [f"{f['arch']} {f['family']}" for f in families if f["direction"] == direction]
        click.echo(f"  {direction:<9}  {', '.join(served) if served else 'no family yet'}")
    for f in families:
        if f["note"]:
            click.echo(f"  note: {f['direction']} on {f['arch']}: {f['note']}")
    for (direction, arch, hdim), note in v.HEAD_DIM_NOTES.items():
        click.echo(f"  note: {direction} on {arch}, hdim {hdim}: {note}")
    click.echo(f"cached builds in {env.cache_dir()}:")
    if not builds:
        click.echo("  none")
    for b in builds:
        problems = f"  ({'; '.join(b.problems)})" if b.problems else ""
        click.echo(f"  {b.key}  {plural(b.variants, 'variant')}  {b.size_bytes / 2**20:.1f} MiB  "
                   f"{'extension' if b.has_extension else 'no extension'}{problems}")


@cli.command()
@click.argument("keys", nargs=-1)
@click.option("--all", "remove_all", is_flag=True, help="Remove every cached build.")
def clean(keys, remove_all):
    """Remove cached builds by KEY (see `flashbuild list`), or all of them with --all."""
    from .build import cache

    found, skipped = cache.scan()
    for line in skipped:
        click.echo(f"flashbuild: {line}", err=True)
    builds = {b.key: b for b in found}
    if keys and remove_all:
        raise click.UsageError(f"--all and {' '.join(shlex.quote(k) for k in keys)} contradict: --all removes every "
                               f"cached build; pass the keys or --all, not both")
    if not keys and not remove_all:
        raise click.UsageError(f"name the builds to remove or pass --all (cached: {', '.join(builds) or 'none'})")
    unknown = [k for k in keys if k not in builds]
    if unknown:
        raise click.UsageError(f"no cached build {', '.join(shlex.quote(k) for k in unknown)} in {env.cache_dir()} "
                               f"(cached: {', '.join(builds) or 'none'}); see `flashbuild list`")
    chosen = list(builds.values()) if remove_all else [builds[k] for k in keys]
    for b in chosen:
        cache.remove_build(b)
        click.echo(f"removed {b.path} ({b.size_bytes / 2**20:.1f} MiB)")
    if not chosen:
        click.echo(f"nothing to remove in {env.cache_dir()}")


# ---------------------------------------------------------------- CI: matrix and link (docs/ci.md)

@cli.command()
@click.argument("config")
@click.option("--format", "fmt", type=click.Choice(["text", "json", "github"]), default="text", show_default=True,
              help="json: a list of cells; github: a GitHub Actions strategy.matrix, one job per cell and shard.")
def matrix(config, fmt):
    """The cells of a CI matrix CONFIG, such as configs/ci.toml: name, selection, TU count.

    Build one with `flashbuild build --config CONFIG --cell NAME [--shard I/N]` (docs/ci.md)."""
    from .ci import matrix as matrices

    found = matrices.load(config, flag="flashbuild matrix")
    if fmt == "github":
        click.echo(json.dumps(found.as_github(), separators=(",", ":")))
    elif fmt == "json":
        click.echo(json.dumps(found.as_json(), indent=2))
    else:
        width = max(len(c.name) for c in found.cells)
        for cell in found.cells:
            shards = f" in {cell.shards} shards" if cell.shards > 1 else ""
            tus = f"{cell.units} TU{'s' if cell.units != 1 else ''}"
            click.echo(f"{cell.name:<{width}}  {tus:>7}{shards:<13}  {shlex.join(cell.args())}")


@cli.command()
@click.argument("artifacts", nargs=-1, required=True, type=click.Path(file_okay=False))
@click.option("--build-dir", type=click.Path(file_okay=False), multiple=True, callback=_one(path=True),
              help="Link here instead of the cache dir of the key.")
@click.option("--jobs", "-j", type=int, help="Parallel jobs for the binding and link.")
@click.option("--launcher", envvar="FLASHBUILD_LAUNCHER", help="Compiler launcher for the binding (ccache, sccache).")
@click.option("--verbose", "-v", is_flag=True, help="Show the link commands.")
def link(artifacts, build_dir, jobs, launcher, verbose):
    """Check that shard artifacts (from `build --shard I/N`) fit together, then link them into one
    extension, as a one-machine build of the same selection would. A mismatch names the shard and
    the field; without a CUDA torch it stops after the checks, saying so."""
    from pathlib import Path

    from .build import builder
    from .ci import link as linking

    check_output(build_dir, "--build-dir")
    plan, extension = linking.link([Path(a) for a in artifacts], build_dir=Path(build_dir) if build_dir else None,
                                   jobs=jobs, launcher=launcher, verbose=verbose)
    names = [u.name for u in plan.units]
    click.echo(f"extension  {extension}")
    click.echo(f"module     {plan.module_name} (key {plan.key})")
    click.echo(f"holds      {builder.plural(len(names), 'kernel TU')} from {builder.plural(len(artifacts), 'shard')}: "
               f"{', '.join(names)}")


@cli.command()
def doctor():
    """Check the tools a build needs: found where, which version, and the fix for what is missing."""
    from .doctor import checks

    results = checks()
    for c in results:
        fix = f" -> fix: {c.fix}" if c.fix and not c.ok else ""
        need = "" if c.ok or c.required else " (optional)"
        click.echo(f"{c.label:<8} {c.name:<9} {c.detail}{need}{fix}")
    failed = [c for c in results if c.required and not c.ok]
    if failed:
        what = [f"missing {c.name}" if c.label == "MISSING" else f"{c.name} {c.label.lower()}" for c in failed]
        first = failed[0]
        fix = f"; fix: {first.fix}" if first.fix else ""
        raise click.ClickException(f"cannot build: {', '.join(what)} ({first.name}: {first.detail}{fix})")


def main():
    try:
        cli(prog_name="flashbuild")
    except KeyboardInterrupt:  # between the interpreter's start and click's handler
        click.echo("flashbuild: interrupted (SIGINT) before it started anything", err=True)
        sys.exit(128 + signal.SIGINT)
