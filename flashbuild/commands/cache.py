"""`flashbuild list` (the variant space, its families and the cached builds) and `flashbuild clean`."""

from __future__ import annotations

import json
import shlex

import click

from .. import env


@click.command(name="list")
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of text.")
def list_(as_json):
    """The variant space, its kernel families, and the builds in the cache."""
    from ..selection import variants as v
    from ..pipeline import cache
    from ..pipeline.plan import plural

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


@click.command()
@click.argument("keys", nargs=-1)
@click.option("--all", "remove_all", is_flag=True, help="Remove every cached build.")
def clean(keys, remove_all):
    """Remove cached builds by KEY (see `flashbuild list`), or all of them with --all."""
    from ..pipeline import cache

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
