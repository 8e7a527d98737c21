"""`flashbuild bench`: its options, the requests of our build and a peer's, and the report; the
measuring itself is flashbuild/debug/bench.py's."""

from __future__ import annotations

import click

from .options import (SELECTION_KEYS, build_args, build_options, check_output, finite, parse_request, path_problem,
                      selection_options, write_output)


@click.command()
@selection_options
@build_options
@click.option("--seqlens", default=",".join(map(str, (1024, 2048, 4096, 8192, 16384))), show_default=True,
              help="Sequence lengths (batch = 16384 / seqlen), comma-separated; 4k means 4096.")
@click.option("--reps", type=click.IntRange(1), default=30, show_default=True, help="Timed reps per measurement (the median is reported).")
@click.option("--alone", type=click.FloatRange(0, 60, min_open=True), callback=finite, metavar="SECONDS",
              help="Time each backend alone, in windows of its own calls of at least SECONDS (3 each, in turns, "
                   "the median reported), instead of one call of each a round (--reps). In turns the backends "
                   "share the GPU's clock; alone, each runs at the clock its own power draw allows, as in a long "
                   "job of it. E.g. 1.")
@click.option("--window", "window_text", metavar="LEFT,RIGHT",
              help="Measure the local feature variants (*_local*) with window_size=(LEFT, RIGHT), e.g. 256,0 "
                   "(-1: unbounded). FLOPs count the visible pairs only.")
@click.option("--softcap", type=click.FloatRange(0, min_open=True), callback=finite,
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
def bench(seqlens, reps, alone, window_text, softcap, csv_path, json_path, plot_path, compare_path, results_path,
          rebuild, peer_source, peer_profile, **kwargs):
    """TFLOPS and ms of the variants a build holds, beside PyTorch SDPA's flash, cuDNN and efficient
    backends in the same run (16k tokens per batch, model dim 2048; builds the slice if needed).
    Feature variants are measured with --window and/or --softcap (skipped without them)."""
    import shlex
    from pathlib import Path

    from ..debug import bench as benching

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
                                            ("--peer-source", peer_source), ("--alone", alone)) if value]
        if given:
            raise click.UsageError(f"--results reports the file as it is: drop {', '.join(given)}")
        info, results = benching.load_results(results_path, "--results")
    else:
        info, results = _measure(seqlen_values, reps, rebuild, kwargs, window, softcap or 0.0, peer, alone or 0.0)
    click.echo(benching.table(results))
    if csv_path:
        write_output(csv_path, benching.results_csv(results))
    if json_path:
        write_output(json_path, benching.results_json(results, **info))
    if plot_path:
        title = f"{info.get('device', '')}  {info.get('command', '')}".strip()
        try:
            click.echo(f"plot: {benching.plot(results, plot_path, title)}", err=True)
        except OSError as exc:
            raise click.ClickException(f"--plot {plot_path}: cannot write it ({exc.strerror or exc}); "
                                       "choose another path") from None
    if old is not None:
        timings = (benching.timing_of(old[0]), benching.timing_of(info))
        if timings[0] != timings[1]:
            click.echo(f"note: {compare_path} was timed {timings[0]}, this run {timings[1]}: in turns the backends "
                       f"share one clock, alone each runs at its own, so the two differ by more than the change",
                       err=True)
        changes, only_new, only_old = benching.compare(old[1], results)
        click.echo(benching.compare_table(changes, only_new, only_old, compare_path))


def _check_peer_profile(name: str) -> None:
    """--peer-profile names an external tree's profile: checked before anything builds or a GPU is
    looked for, and an error names --peer-profile (not --profile, which is our selection's)."""
    from ..sources import profile as profiles

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
    from ..sources import profile as profiles

    both = [d for d in directions if d in ("fwd", "bwd")]
    if not both:
        raise click.UsageError(f"--peer-source measures the directions both builds have (fwd, bwd); --direction "
                               f"{','.join(directions)} has neither: use --direction fwd,bwd")
    from ..sources import switches

    tree = profiles.load(peer[1], flag="--peer-profile")
    # and the switch features that only make it faster (FA3's cluster, FA2's even_mn): as fast as its own build
    speed = switches.speed_features(tree.switches) if tree.switches is not None else ()
    return {**kwargs, "source": peer[0], "profile": peer[1],
            "features": ",".join(f for f in tree.features if f in features or f in speed) or "none", "no_local": False,
            "no_softcap": False, "config": None, "build_dir": None, "direction": ",".join(both)}


def _measure(seqlens, reps, rebuild, kwargs, window=(-1, -1), softcap=0.0, peer=None, alone=0.0):
    """Our build (and the peer's) loaded on this GPU, measured by debug.bench.measure_build; the rows and
    the run's facts (the command that repeats it, device, versions)."""
    import datetime
    import shlex
    from pathlib import Path

    from ..version import __version__
    from ..debug import bench as benching, runtime
    from ..pipeline import builder

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
    results = benching.measure_build(module, gpu, seqlens, reps=reps, window=window, softcap=softcap, peers=peers,
                                     log=builder.log, alone=alone)
    extra = (["--window", f"{window[0]},{window[1]}"] if window != (-1, -1) else []) + (
        ["--softcap", f"{softcap:g}"] if softcap else [])
    extra += ["--peer-source", str(peer[0]), "--peer-profile", peer[1]] if peer else []
    info = {"command": shlex.join(["flashbuild", "bench", *build_args(selection, options),
                                   "--seqlens", ",".join(map(str, seqlens)),
                                   *(["--alone", f"{alone:g}"] if alone else ["--reps", str(reps)]), *extra]),
            "timing": benching.timing_name(alone),
            "device": gpu.describe(), "torch": gpu.torch, "flashbuild": __version__,
            "build_key": module.build_key(), "date": datetime.datetime.now().isoformat(timespec="seconds")}
    return info, results
