"""CI: a matrix's cells (`flashbuild matrix`), `build --cell/--shard` and `flashbuild link` (docs/ci.md)."""

from __future__ import annotations

import json
import shlex

import click

from .options import SELECTION_KEYS, apply_options, check_output, given_once, parse_request


# ---------------------------------------------------------------- CI: cells of a matrix, shards (docs/ci.md)
ci_options = apply_options([
    click.option("--cell", help="Build one cell of the CI matrix given with --config (see `flashbuild matrix CONFIG`)."),
    click.option("--shard", metavar="I/N", help="Compile only shard I of N of the selection's TUs (split by compile "
                                                "cost) into an artifact dir for `flashbuild link`; no link."),
    click.option("--costs", type=click.Path(dir_okay=False), multiple=True, callback=given_once(path=True), help="With --shard: compile times to split by, a "
                 ".ninja_log of an earlier build or JSON {TU: seconds}. Default: this build dir's .ninja_log, else "
                 "a per-kind estimate. Give every shard the same file."),
    click.option("--artifact-dir", type=click.Path(file_okay=False), multiple=True, callback=given_once(path=True),
                 help="With --shard: where the objects and "
                 "manifest go. Default: flashbuild-artifacts/CELL-shard-I-of-N."),
])


def ci_request(kwargs: dict, cell: str | None) -> dict:
    """The build keywords with --cell resolved into its selection; refuses --cell without a matrix
    and a matrix without --cell (listing its cells)."""
    from ..ci import matrix as matrices

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


def build_shard(shard: str, costs: str | None, artifact_dir: str | None, cell: str | None, config: str | None,
                dry_run: bool, kwargs: dict) -> None:
    """`build --shard I/N`: this machine's part of the selection, into an artifact dir."""
    from pathlib import Path

    from ..pipeline import builder
    from ..ci import shard as sharding

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


@click.command()
@click.argument("config")
@click.option("--format", "fmt", type=click.Choice(["text", "json", "github"]), default="text", show_default=True,
              help="json: a list of cells; github: a GitHub Actions strategy.matrix, one job per cell and shard.")
def matrix(config, fmt):
    """The cells of a CI matrix CONFIG, such as configs/ci.toml: name, selection, TU count.

    Build one with `flashbuild build --config CONFIG --cell NAME [--shard I/N]` (docs/ci.md)."""
    from ..ci import matrix as matrices

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


@click.command()
@click.argument("artifacts", nargs=-1, required=True, type=click.Path(file_okay=False))
@click.option("--build-dir", type=click.Path(file_okay=False), multiple=True, callback=given_once(path=True),
              help="Link here instead of the cache dir of the key.")
@click.option("--jobs", "-j", type=int, help="Parallel jobs for the binding and link.")
@click.option("--launcher", envvar="FLASHBUILD_LAUNCHER", help="Compiler launcher for the binding (ccache, sccache).")
@click.option("--verbose", "-v", is_flag=True, help="Show the link commands.")
def link(artifacts, build_dir, jobs, launcher, verbose):
    """Check that shard artifacts (from `build --shard I/N`) fit together, then link them into one
    extension, as a one-machine build of the same selection would. A mismatch names the shard and
    the field; without a CUDA torch it stops after the checks, saying so."""
    from pathlib import Path

    from ..pipeline import builder
    from ..ci import link as linking

    check_output(build_dir, "--build-dir")
    plan, extension = linking.link([Path(a) for a in artifacts], build_dir=Path(build_dir) if build_dir else None,
                                   jobs=jobs, launcher=launcher, verbose=verbose)
    names = [u.name for u in plan.units]
    click.echo(f"extension  {extension}")
    click.echo(f"module     {plan.module_name} (key {plan.key})")
    click.echo(f"holds      {builder.plural(len(names), 'kernel TU')} from {builder.plural(len(artifacts), 'shard')}: "
               f"{', '.join(names)}")
