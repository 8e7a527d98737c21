"""nvcc with its host and device front ends running at once: the driver of the `nvcc` rule's compiles.

`nvcc -c x.cu` runs its steps one after another: the host side (preprocess, cudafe++: the C++ front
end that splits host from device code) and then the device side (preprocess, cicc, ptxas, fatbinary),
then the host compiler on cudafe++'s output, which includes cicc's stub and the fatbinary. The two
sides share one thing: the module id, a name cudafe++ writes (`--gen_module_id_file`) and cicc reads,
so that both agree on the names of internal-linkage entities. For an upstream TU that includes all of
CUTLASS/CuTe, cudafe++ alone is ~20 s of a ~70 s compile (FA3's hdim-128 forward on the H200,
benchmarks/upstream_narrowing/), all of it waited for before cicc starts.

This driver takes nvcc's own plan (`--dryrun --keep`: the exact commands nvcc would run), writes the
module id first (a name of its own, unique to the object), and runs the host chain (preprocess,
cudafe++) beside the device chain (preprocess, cicc, ptxas, fatbinary), then nvcc's last step, the host
compile. The depfile is nvcc's own (`nvcc -M`, beside the two chains). The object is what nvcc makes
(the same commands), with another module id.

It runs nvcc itself, unchanged, whenever the plan is not the shape it knows (a step it does not
recognise, a device step that reads a host step's output, more than one cudafe++, relocatable device
code) and for the flags that time or trace nvcc's own steps (--time, --fdevice-time-trace): those must
see nvcc's sequence. `FLASHBUILD_NVCC_OVERLAP=0` turns it off for a build (graph.py).

    python3 -m flashbuild.pipeline.nvcc_overlap NVCC ARGS...      # as ninja runs it
"""

from __future__ import annotations

import hashlib
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
from dataclasses import dataclass
from pathlib import Path

# nvcc's flags after which its steps are not the plain -c sequence, or whose output must be nvcc's own.
_PLAIN_ONLY = ("--time", "-time", "--fdevice-time-trace", "-fdevice-time-trace", "--dryrun", "-dryrun", "--keep",
               "-keep", "--keep-dir", "-keep-dir", "--save-temps", "-save-temps", "-rdc", "--relocatable-device-code",
               "-dc", "--device-c", "-dw", "--device-w", "-E", "--preprocess", "-M", "-MM", "--generate-dependencies",
               "--threads", "-t", "-dlto", "-lto", "--run", "-run")
_STEP_FAILED = 2  # nvcc's exit status when one of its steps fails
_ENV_LINE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*=")
_VAR = re.compile(r"\$(\w+)|\$\{(\w+)\}")


@dataclass(frozen=True)
class Plan:
    env: dict[str, str]            # nvcc's step environment (its nvcc.profile: PATH, CICC_PATH, ...)
    host: tuple[str, ...]          # host preprocessing, then cudafe++ (shell command lines, as nvcc prints them)
    device: tuple[str, ...]        # device preprocessing, cicc, ptxas, fatbinary, rm
    last: tuple[str, ...]          # the host compile of cudafe++'s output
    module_id_file: str            # where cicc reads the module id (written before either chain starts)


def _split_args(args: list[str]) -> tuple[list[str], str | None, str | None] | None:
    """(args without -MD/-MF, the depfile, the object) for a plain `-c SRC -o OBJ` compile, else None."""
    out, depfile, obj, compiles, md = [], None, None, False, False
    i = 0
    while i < len(args):
        a = args[i]
        if a.split("=", 1)[0] in _PLAIN_ONLY:
            return None
        if a == "-MD":
            md = True
        elif a == "-MF" and i + 1 < len(args):
            depfile, i = args[i + 1], i + 1
        elif a == "-o" and i + 1 < len(args):
            obj = args[i + 1]
            out += [a, obj]
            i += 1
        else:
            compiles = compiles or a in ("-c", "--compile")
            out.append(a)
        i += 1
    if not compiles or obj is None or (md and depfile is None) or (depfile is not None and not md):
        return None
    return out, depfile, obj


def _tool(command: str, env: dict[str, str]) -> str:
    try:
        first = shlex.split(command)[0]
    except (ValueError, IndexError):
        return ""
    return Path(_VAR.sub(lambda m: env.get(m.group(1) or m.group(2), ""), first)).name


def parse_dryrun(text: str, keep_dir: str) -> Plan | None:
    """nvcc's `--dryrun --keep --keep-dir KEEP_DIR` lines (its stderr) as a Plan, or None when they are not
    the one-cudafe++ sequence whose host and device chains touch only each other's module id."""
    env, commands = {}, []
    for line in text.splitlines():
        if not line.startswith("#$ "):
            continue
        body = line[3:].strip()
        if _ENV_LINE.match(body):
            name, _, value = body.partition("=")
            value = value.strip()
            if len(value) >= 2 and value[0] == value[-1] == '"' and value.count('"') == 2:
                value = value[1:-1]
            env[name] = value
        else:
            commands.append(body)
    tools = [_tool(c, env) for c in commands]
    if tools.count("cudafe++") != 1 or not commands or "nvlink" in tools or any(not t for t in tools):
        return None
    if any(c.startswith("--") for c in commands):  # nvcc's internal steps (dependency filtering): not runnable
        return None
    cudafe = tools.index("cudafe++")
    try:
        cudafe_args = shlex.split(commands[cudafe])
    except ValueError:
        return None
    if "--gen_module_id_file" not in cudafe_args or "--module_id_file_name" not in cudafe_args:
        return None
    module_id_file = cudafe_args[cudafe_args.index("--module_id_file_name") + 1]
    last = commands[-1]
    if "-c" not in shlex.split(last) or len(commands) < 3:
        return None
    host, device = [], []
    for i, (command, tool) in enumerate(zip(commands[:-1], tools[:-1])):
        if i == cudafe:
            host.append(re.sub(r"(?<=\s)--gen_module_id_file(?=\s)", "", command))  # it reads ours
        elif tool == "cudafe++" or ("-E" in command.split() and "-D__CUDA_ARCH__=" not in command):
            host.append(command)       # the host preprocessing (cudafe++'s input)
        elif tool in ("cicc", "ptxas", "fatbinary", "rm", "nvcc") or "-D__CUDA_ARCH__=" in command:
            device.append(command)
        else:
            return None
    # The host chain's files (every keep-dir path it names) must be no input of the device chain, but the
    # module id; and cudafe++'s output must come after the device chain only through the last step.
    host_files = _keep_files(" ".join(host), keep_dir) - {module_id_file}
    if host_files & _keep_files(" ".join(device), keep_dir) or not host or not device:
        return None
    return Plan(env, tuple(host), tuple(device), (last,), module_id_file)


def _keep_files(text: str, keep_dir: str) -> set[str]:
    root = keep_dir.rstrip("/") + "/"
    return {m for m in re.findall(r"[^\s\"'=,]+", text) if m.startswith(root)}


def module_id(source: str, obj: str) -> str:
    """A module id unique to this object (a C identifier, as nvcc's own are): the object's and the
    source's absolute paths hashed, with the source's name for whoever reads the symbols."""
    digest = hashlib.sha256(f"{os.path.abspath(source)}\0{os.path.abspath(obj)}".encode()).hexdigest()[:16]
    stem = re.sub(r"\W", "_", Path(source).name)[:64]
    return f"_fb{digest}_{stem}"


class _Chain(threading.Thread):
    """Shell command lines run in order, each through bash (nvcc's lines are shell: quoted, $CICC_PATH)."""

    def __init__(self, commands: tuple[str, ...], env: dict[str, str], capture: bool):
        super().__init__(daemon=True)
        self.commands, self.env, self.capture = commands, env, capture
        self.process: subprocess.Popen | None = None
        self.output, self.returncode, self.stopped = "", 0, False
        self._lock = threading.Lock()

    def run(self) -> None:
        for command in self.commands:
            with self._lock:
                if self.stopped:
                    return
                try:
                    self.process = subprocess.Popen(["bash", "-c", command], env=self.env, text=True,
                                                    stdout=subprocess.PIPE if self.capture else None,
                                                    stderr=subprocess.STDOUT if self.capture else None)
                except OSError as exc:  # no bash to run nvcc's step line: say which step, as a failed step
                    self.output += f"nvcc_overlap: could not start nvcc's step {command[:200]!r}: {exc}\n"
                    self.returncode = 127
                    return
            out, _ = self.process.communicate()
            self.output += out or ""
            if self.process.returncode:
                self.returncode = self.process.returncode
                return

    def stop(self) -> None:
        with self._lock:
            self.stopped = True
            if self.process is not None and self.process.poll() is None:
                self.process.terminate()


def _run_chains(chains: list[_Chain]) -> _Chain | None:
    """Start every chain; the first that fails stops the others and is returned (None: all passed)."""
    for chain in chains:
        chain.start()
    pending = list(chains)
    while pending:
        for chain in pending:
            chain.join(0.05)
            if chain.is_alive():
                continue
            pending.remove(chain)
            if chain.returncode:
                for other in pending:
                    other.stop()
                for other in pending:
                    other.join()
                return chain
            break
    return None


def run(nvcc: str, args: list[str]) -> int:
    split = _split_args(args)
    if split is None:
        return _plain(nvcc, args)
    try:
        keep = tempfile.mkdtemp(prefix=f"flashbuild-nvcc-{Path(split[2]).name}-")  # beside nvcc's own temporaries
    except OSError:  # no writable temporary dir: nvcc itself says so, in its words
        return _plain(nvcc, args)
    try:
        return _overlapped(nvcc, args, split, keep)
    except OSError:  # the driver's own plumbing (a step it could not start, a file it could not write): plain nvcc
        return _plain(nvcc, args)
    finally:
        shutil.rmtree(keep, ignore_errors=True)


def _overlapped(nvcc: str, args: list[str], split: tuple[list[str], str | None, str], keep: str) -> int:
    plain_args, depfile, obj = split
    dry = subprocess.run([nvcc, *plain_args, "--dryrun", "--keep", "--keep-dir", keep],
                         capture_output=True, text=True)
    plan = parse_dryrun(dry.stderr, keep) if dry.returncode == 0 else None
    sources = [a for a in plain_args if a.endswith((".cu", ".cpp", ".cc", ".cxx"))]
    if plan is None or len(sources) != 1:
        return _plain(nvcc, args)
    Path(plan.module_id_file).write_text(module_id(sources[0], obj))
    env = {**os.environ, **plan.env}
    chains = [_Chain(plan.host, env, capture=True), _Chain(plan.device, env, capture=True)]
    if depfile is not None:
        deps = [nvcc, *_without_compile(plain_args), "-M", "-MT", obj, "-MF", depfile]
        chains.append(_Chain((shlex.join(deps),), dict(os.environ), capture=True))
    failed = _run_chains(chains)
    if failed is not None:
        sys.stderr.write(failed.output)
        return failed.returncode if failed.returncode < 0 else _STEP_FAILED
    for chain in chains:
        sys.stderr.write(chain.output)
    sys.stderr.flush()
    final = _Chain(plan.last, env, capture=False)
    final.run()
    return final.returncode


def _without_compile(args: list[str]) -> list[str]:
    out, skip = [], False
    for a in args:
        if skip:
            skip = False
        elif a == "-o":
            skip = True
        elif a not in ("-c", "--compile"):
            out.append(a)
    return out


def _plain(nvcc: str, args: list[str]) -> int:
    return subprocess.call([nvcc, *args])


def _terminated(signum, _frame):  # ninja's SIGTERM: unwind, so the steps' dir is removed
    raise SystemExit(128 + signum)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    signal.signal(signal.SIGTERM, _terminated)
    if not argv or argv[0] in ("-h", "--help"):
        print(__doc__.strip())
        return 0 if argv else 2
    return run(argv[0], argv[1:])


if __name__ == "__main__":
    sys.exit(main())
