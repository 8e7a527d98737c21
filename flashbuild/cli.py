"""The command line: `flashbuild [build] SELECTION`, `test`, `bench`, `inspect`, `watch`, `list`,
`clean`, `doctor`, and for CI `matrix`, `build --cell/--shard` and `link`. This module is the group and
its last line of defence; the commands live in flashbuild/commands/, one module per concern.

User mistakes are one line on stderr and exit 2 (usage) or 1 (build failure), never a traceback.
Data goes to stdout, progress and logs to stderr.
"""

from __future__ import annotations

import shlex
import signal
import sys

import click

from .commands import bench, building, cache, ci, debugging, sources
from .errors import FlashbuildError
from .version import __version__


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


for _command in (building.build, building.run, building.inspect_, debugging.test_, debugging.watch, bench.bench,
                 cache.list_, cache.clean, sources.profiles, ci.matrix, ci.link):
    cli.add_command(_command)


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
