"""The debug loop: `flashbuild test` (the checks against the reference, optionally under
compute-sanitizer) and `flashbuild watch` (rebuild and test on every save)."""

from __future__ import annotations

import sys

import click

from .. import env
from .options import (build_args, build_options, check_output, finite, parse_request, selection_options,
                      write_output)


@click.command(name="test")
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

    from ..debug import checking, runtime, sanitize as sanitizing
    from ..errors import CheckFailedError
    from ..selection.variants import Variant

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
        write_output(json_path, checking.results_json(rows, **info))
    problem = checking.verdict(rows)
    if problem:
        raise CheckFailedError(problem)


def _test_sanitized(selection, options, seed, shapes, rebuild):
    """Build here, run the checks in a child under compute-sanitizer, add its reports to the rows."""
    import tempfile
    from pathlib import Path

    from ..pipeline import builder
    from ..debug import checking, runtime, sanitize as sanitizing
    from ..errors import CheckFailedError

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


@click.command()
@selection_options
@build_options
@click.option("--interval", type=click.FloatRange(0.1, 86400), callback=finite, default=0.5, show_default=True,
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

    from ..pipeline import builder
    from ..debug import runtime, watch as watching

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
