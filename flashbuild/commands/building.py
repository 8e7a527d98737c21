"""`flashbuild [build]` (the default command), `run` (a command with the slice on its import path) and
`inspect` (registers, spills and SASS read from the objects)."""

from __future__ import annotations

import json
import shlex
import sys

import click

from .. import env
from .ci import build_shard, ci_options, ci_request
from .options import build_args, build_options, check_output, parse_request, selection_options, write_output


@click.command()
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

    from ..pipeline import builder, compile_profile

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
    from ..debug.runtime import runs_on

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

    from ..pipeline import builder
    from ..sources import profile as profiles

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


@click.command(context_settings={"ignore_unknown_options": True, "allow_interspersed_args": False})
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

    from ..pipeline import builder
    from ..sources import profile as profiles

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


@click.command(name="inspect")
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

    from ..pipeline import builder, graph
    from ..debug import inspection
    from ..sources.units import KERNEL_SUFFIX

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
        write_output(str(path), inspection.sass_text(objects[holder or sass_variant]))
        click.echo(f"SASS of {sass_variant}{f' (its kernel TU, {holder})' if holder else ''}: {path}", err=as_json)
