"""The command line: `flashbuild [build] SELECTION`, `list`, `clean`, `doctor`.

User mistakes are one line on stderr and exit 2 (usage) or 1 (build failure), never a traceback.
Data goes to stdout, progress and logs to stderr.
"""

from __future__ import annotations

import json
import sys

import click

from . import __version__, env
from .errors import FlashbuildError

SELECTION_HELP = {
    "hdim": "Head dims, comma-separated (32,64,96,128,192,256). Default: all.",
    "dtype": "Dtypes: fp16,bf16. Default: both.",
    "arch": "Archs: sm80,sm86,sm89,sm90 or native (the GPUs nvidia-smi reports). Default: native.",
    "direction": "Directions: fwd,bwd,splitkv. Default: every implemented one (fwd,bwd).",
    "causal": "Causal variants: on, off or both. Default: both.",
}


class FlashbuildGroup(click.Group):
    """A group where `flashbuild --hdim 64 ...` means `flashbuild build --hdim 64 ...`, and every
    error becomes one line."""

    def parse_args(self, ctx, args):
        if args and args[0].startswith("-") and args[0] not in ("--help", "-h", "--version"):
            args = ["build", *args]
        return super().parse_args(ctx, args)

    def main(self, args=None, prog_name=None, complete_var=None, standalone_mode=True, **extra):
        try:
            code = super().main(args, prog_name or "flashbuild", complete_var, standalone_mode=False, **extra)
        except click.exceptions.NoArgsIsHelpError as exc:  # bare `flashbuild`: help, not an error
            click.echo(exc.ctx.get_help() if exc.ctx else exc.format_message())
            code = 0
        except click.UsageError as exc:
            where = exc.ctx.command_path if exc.ctx else "flashbuild"
            click.echo(f"flashbuild: error: {exc.format_message()} (see `{where} --help`)", err=True)
            code = 2
        except click.ClickException as exc:
            click.echo(f"flashbuild: error: {exc.format_message()}", err=True)
            code = exc.exit_code
        except FlashbuildError as exc:
            click.echo(f"flashbuild: error: {exc}", err=True)
            code = exc.exit_code
        except (click.Abort, KeyboardInterrupt):
            click.echo("flashbuild: interrupted", err=True)
            code = 130
        if not standalone_mode:
            return code
        sys.exit(code if isinstance(code, int) else 0)


@click.group(name="flashbuild", cls=FlashbuildGroup, no_args_is_help=True)
@click.version_option(__version__, prog_name="flashbuild")
def cli():
    """Selective builds of FlashAttention-style CUDA kernels: pick head dims, dtypes, archs,
    directions and causal variants; flashbuild renders, compiles and links only those."""


@cli.command()
@click.option("--hdim", help=SELECTION_HELP["hdim"])
@click.option("--dtype", help=SELECTION_HELP["dtype"])
@click.option("--arch", help=SELECTION_HELP["arch"])
@click.option("--direction", help=SELECTION_HELP["direction"])
@click.option("--causal", help=SELECTION_HELP["causal"])
@click.option("--config", help="A TOML preset: a file, or a name in configs/ (e.g. ci-compile). Flags override it.")
@click.option("--dry-run", is_flag=True, help="Print the plan (variants, families, files, TUs); build nothing.")
@click.option("--compile-only", is_flag=True, help="Compile the kernel objects; no binding, no link (no torch CUDA needed).")
@click.option("--jobs", "-j", type=int, help="Parallel compiles. Default: min(cores, free memory / 4 GiB).")
@click.option("--build-dir", type=click.Path(file_okay=False), help="Build here instead of the cache dir.")
@click.option("--debug", is_flag=True, help="Device debug build: nvcc -G -lineinfo, asserts on.")
@click.option("--lineinfo", is_flag=True, help="Optimized build with -lineinfo (for profilers).")
@click.option("--nvcc-flag", "nvcc_flags", multiple=True, help="Extra nvcc flag for every kernel TU (repeatable).")
@click.option("--launcher", help="Compiler launcher prefixed to compile commands, e.g. ccache or sccache.")
@click.option("--verbose", "-v", is_flag=True, help="Show every command and all compiler output.")
def build(dry_run, **kwargs):
    """Build a selection (the default command): render, compile, link, report."""
    from . import builder

    selection, options = builder.parse_request(**kwargs)
    if dry_run:
        plan = builder.make_plan(selection, options)
        no_link = builder.why_no_link(options)
        click.echo(builder.describe_plan(plan, linking=not no_link, why_no_link=no_link))
        click.echo("dry run: nothing was rendered, compiled or written")
        return
    result = builder.build(selection, options)
    if result.extension is None:
        click.echo(f"compiled {builder.plural(len(result.manifest['variants']), 'kernel object')} in {result.build_dir / 'obj'} "
                   "(--compile-only: no binding, no link)")
        return
    load_args = {k: v for k, v in selection.as_kwargs().items()}
    flags = options.flags
    load_args.update({k: v for k, v in (("debug", flags.debug), ("lineinfo", flags.lineinfo)) if v})
    if flags.nvcc_flags:
        load_args["nvcc_flags"] = list(flags.nvcc_flags)
    call = ", ".join(f"{k}={v!r}" for k, v in load_args.items())
    click.echo(f"extension  {result.extension}")
    click.echo(f"module     {result.module_name} (key {result.key})")
    click.echo(f"holds      {builder.plural(len(result.manifest['variants']), 'variant')}: {', '.join(result.manifest['variants'])}")
    click.echo(f'load it    python3 -c "import flashbuild; m = flashbuild.load({call})"')


@cli.command(name="list")
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of text.")
def list_(as_json):
    """The variant space, its kernel families, and the builds in the cache."""
    from . import variants as v
    from .builder import cached_builds, plural

    families = [{"direction": d, "arch": a, "family": name, "note": v.FAMILY_NOTES.get((d, a))}
                for (d, a), name in v.FAMILY_TABLE.items()]
    builds = cached_builds()
    if as_json:
        click.echo(json.dumps({
            "axes": {"hdim": list(v.HEAD_DIMS), "dtype": list(v.DTYPES), "arch": [*v.ARCHS, v.NATIVE],
                     "direction": list(v.DIRECTIONS), "causal": list(v.CAUSAL_MODES)},
            "implemented_directions": list(v.implemented_directions()),
            "families": families,
            "cache_dir": str(env.cache_dir()),
            "builds": [{"key": b.key, "path": str(b.path), "variants": b.variants, "size_bytes": b.size_bytes,
                        "has_extension": b.has_extension} for b in builds],
        }, indent=2))
        return
    click.echo("variant space:")
    click.echo(f"  hdim       {', '.join(map(str, v.HEAD_DIMS))}")
    click.echo(f"  dtype      {', '.join(v.DTYPES)}")
    click.echo(f"  arch       {', '.join(v.ARCHS)}, native (the GPU's)")
    click.echo(f"  direction  {', '.join(v.DIRECTIONS)}")
    click.echo(f"  causal     {', '.join(v.CAUSAL_MODES)}")
    click.echo("families (direction, arch -> family):")
    for direction in v.DIRECTIONS:
        served = [f"{f['arch']} {f['family']}" for f in families if f["direction"] == direction]
        click.echo(f"  {direction:<9}  {', '.join(served) if served else 'no family yet'}")
    for f in families:
        if f["note"]:
            click.echo(f"  note: {f['direction']} on {f['arch']}: {f['note']}")
    click.echo(f"cached builds in {env.cache_dir()}:")
    if not builds:
        click.echo("  none")
    for b in builds:
        click.echo(f"  {b.key}  {plural(b.variants, 'variant')}  {b.size_bytes / 2**20:.1f} MiB  "
                   f"{'extension' if b.has_extension else 'no extension'}")


@cli.command()
@click.argument("keys", nargs=-1)
@click.option("--all", "remove_all", is_flag=True, help="Remove every cached build.")
def clean(keys, remove_all):
    """Remove cached builds by KEY (see `flashbuild list`), or all of them with --all."""
    from .builder import cached_builds, remove_build

    builds = {b.key: b for b in cached_builds()}
    if not keys and not remove_all:
        raise click.UsageError(f"name the builds to remove or pass --all (cached: {', '.join(builds) or 'none'})")
    unknown = [k for k in keys if k not in builds]
    if unknown:
        raise click.UsageError(f"no cached build {', '.join(unknown)} in {env.cache_dir()} "
                               f"(cached: {', '.join(builds) or 'none'}); see `flashbuild list`")
    chosen = list(builds.values()) if remove_all else [builds[k] for k in keys]
    for b in chosen:
        remove_build(b)
        click.echo(f"removed {b.path} ({b.size_bytes / 2**20:.1f} MiB)")
    if not chosen:
        click.echo(f"nothing to remove in {env.cache_dir()}")


@cli.command()
def doctor():
    """Check the tools a build needs: found where, which version, and the fix for what is missing."""
    from .doctor import checks

    results = checks()
    for c in results:
        state = "OK" if c.ok else "MISSING"
        fix = f" -> fix: {c.fix}" if c.fix and not c.ok else ""
        need = "" if c.ok or c.required else " (optional)"
        click.echo(f"{state:<8} {c.name:<9} {c.detail}{need}{fix}")
    missing = [c.name for c in results if c.required and not c.ok]
    if missing:
        click.echo(f"cannot build: missing {', '.join(missing)}", err=True)
        raise click.exceptions.Exit(1)


def main():
    cli(prog_name="flashbuild")
