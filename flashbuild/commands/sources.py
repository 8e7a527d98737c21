"""`flashbuild profiles`: the profiles of external kernel trees, and which one a tree is."""

from __future__ import annotations

import click


@click.command()
@click.option("--source", type=click.Path(file_okay=False),
              help="A kernel tree, or a release as NAME==VERSION (fetched as a build's --source is): say which profile "
                   "and release it is, and why the others do not match.")
def profiles(source):
    """The profiles of external kernel trees and the releases each serves (configs/profiles/)."""
    from pathlib import Path

    from ..sources import detect, release

    click.echo(detect.listing())
    if source is not None:
        if release.is_spec(source):
            source = str(release.fetch(source))
        root = Path(source).expanduser().resolve()
        if not root.is_dir():
            raise click.BadParameter(f"{source}: {'not a directory' if root.exists() else 'does not exist'}; pass "
                                     f"the root of a kernel tree", param_hint="--source")
        click.echo(detect.describe(root))
