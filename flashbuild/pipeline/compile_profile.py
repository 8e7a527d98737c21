"""Where a TU's compile seconds go: nvcc's phases, read from the CSV that `nvcc --time FILE` writes
(issue 17). One row per phase run; we fold them into the phases a kernel engineer can act on
(preprocessing, cudafe++, cicc, ptxas, fatbinary, host compiler) and tabulate them per TU.

`flashbuild build --profile-compile` adds NVCC_FLAG to the kernel TUs' nvcc flags: nvcc appends one
row per phase to a CSV in the build dir (ninja's cwd). Being an nvcc flag it is part of the build
key, so a profiled build lives in its own build dir and a normal build's command lines (and so its
objects) are never touched by it.

cicc is most of a kernel TU's time, and it is two programs: EDG's C++ front end (parsing, then
instantiating every template the kernel uses: with CuTe, tens of thousands of small ones) and NVVM
(optimizing the IR and generating PTX). They call for different cuts (fewer or cheaper template
instantiations vs less code to optimize), so `--profile-templates` (nvcc >= 12.8) passes TRACE_FLAG:
nvcc writes a Chrome trace beside each object (obj/NAME.o.json), from which cicc's seconds are split
and the template families that cost the most are named; the trace is then deleted (0.4-1.8 GB per
TU). Tracing is not free: it made one sm90 TU's compile 40 -> 96 s (cicc 24.7 -> 43.6 s, and nvcc
--time books the trace's writing to ptxas), so its seconds are a guide to proportions, and it is
a flag of its own rather than part of --profile-compile, whose phase table stays true.
"""

from __future__ import annotations

import csv
import io
import json
import mmap
import os
import re
from collections import Counter
from pathlib import Path

CSV_NAME = "nvcc_time.csv"
NVCC_FLAG = f"--time={CSV_NAME}"
PHASES = ("preprocessing", "cudafe++", "cicc", "ptxas", "fatbinary", "host compiler", "other")

TRACE_FLAG = "--fdevice-time-trace=-"  # "-": the trace is named after the object, obj/NAME.o.json
TRACE_SINCE = (12, 8)  # the first nvcc with --fdevice-time-trace
# cicc's seconds, split: the front end's (its self time, and what it spends inside header parsing and
# template instantiation events), NVVM IR generation, and NVVM proper (optimizer, codegen, module linker).
CICC_PARTS = ("headers", "templates", "front end other", "NVVM IR", "NVVM")
_FRONT_END = "CUDA C++ Front-End"
_NVVM_IR = "Generating NVVM IR"
_NVVM = "LibNVVM"


def trace_problem(nvcc_version: str) -> str | None:
    """Why this nvcc ('13.0.88') cannot trace cicc, or None."""
    parts = re.match(r"(\d+)\.(\d+)", nvcc_version)
    if parts is not None and (int(parts[1]), int(parts[2])) >= TRACE_SINCE:
        return None
    return (f"--profile-templates needs nvcc >= {TRACE_SINCE[0]}.{TRACE_SINCE[1]} (--fdevice-time-trace); this nvcc is "
            f"{nvcc_version}: point CUDA_HOME at a newer toolkit, or use --profile-compile (nvcc's phases alone)")


def _category(name: str) -> str | None:
    if name == "Processing Header File":
        return "headers"
    if name.startswith("Instantiating Template") or name == "Generating Needed Template Instantiations":
        return "templates"
    return None


def _family(event: dict) -> str:
    """'cute::get' from an instantiation's detail 'cute::get [cute::get<0, ...>(...)]'."""
    detail = str(event.get("args", {}).get("detail", ""))
    return detail.split(" [", 1)[0].strip() or event["name"]


# One complete ("X") event of nvcc's trace, as nvcc and cicc write them (with or without spaces; ts and tid
# in either order). A detail (a template's full type can be 300 kB) is kept only up to 160 characters.
_EVENT = re.compile(
    rb'\{\s*(?:"args"\s*:\s*\{\s*"detail"\s*:\s*"([^"]{0,160})[^"]*"\s*\}\s*,\s*)?"dur"\s*:\s*(\d+)\s*,\s*'
    rb'"name"\s*:\s*"([^"]*)"\s*,\s*"ph"\s*:\s*"X"\s*,\s*"pid"\s*:\s*(\d+)\s*,\s*'
    rb'(?:"tid"\s*:\s*(\d+)\s*,\s*"ts"\s*:\s*(\d+)|"ts"\s*:\s*(\d+)\s*,\s*"tid"\s*:\s*(\d+))\s*\}')


def trace_events(data: bytes | mmap.mmap) -> list[dict]:
    """The complete events of an `nvcc --fdevice-time-trace` file, read with one regex pass: the file is
    0.4-1.8 GB for one of our TUs (json.load of it took 10 GB of memory), and only names, times and the
    start of each detail are needed. A file in another layout is read as JSON."""
    events = [{"name": m[3].decode(errors="replace"), "dur": int(m[2]), "pid": int(m[4]),
               "tid": int(m[5] or m[8]), "ts": int(m[6] or m[7]),
               "args": {"detail": (m[1] or b"").decode(errors="replace")}} for m in _EVENT.finditer(data)]
    if events:
        return events
    parsed = json.loads(bytes(data))
    raw = parsed.get("traceEvents", []) if isinstance(parsed, dict) else parsed
    return [e for e in raw if isinstance(e, dict) and e.get("ph") == "X" and isinstance(e.get("dur"), (int, float))]


def parse_device_trace(data: dict | list, top: int = 8) -> tuple[dict[str, float], list[tuple[str, float, int]]]:
    """cicc's seconds split into CICC_PARTS, and the `top` template families by self time (name,
    seconds, instantiations), from one `nvcc --fdevice-time-trace` trace (its JSON, or trace_events'
    list). Events nest by time on one thread; an event's self time (its span less its children's)
    goes to the innermost header or template event around it (itself included), else to the front
    end's other work. A trace with no front-end event is refused, not read as zero."""
    raw = data.get("traceEvents", []) if isinstance(data, dict) else data
    events = [e for e in raw if isinstance(e, dict) and e.get("ph", "X") == "X" and isinstance(e.get("dur"), (int, float))]
    front = [e for e in events if e.get("name") == _FRONT_END]
    if not front:
        raise ValueError(f"not an nvcc device time trace: no {_FRONT_END!r} event")
    parts = {part: 0.0 for part in CICC_PARTS}
    parts["NVVM IR"] = sum(e["dur"] for e in events if e["name"] == _NVVM_IR) / 1e6
    parts["NVVM"] = sum(e["dur"] for e in events if e["name"] == _NVVM) / 1e6
    families: Counter[str] = Counter()
    counts: Counter[str] = Counter()
    for outer in front:
        inside = sorted((e for e in events if e is not outer and e.get("pid") == outer.get("pid")
                         and e.get("tid") == outer.get("tid") and outer["ts"] <= e["ts"]
                         and e["ts"] + e["dur"] <= outer["ts"] + outer["dur"]), key=lambda e: (e["ts"], -e["dur"]))
        self_time = {id(outer): float(outer["dur"])}
        owner = {id(outer): "front end other"}
        stack = [outer]
        for event in inside:
            while len(stack) > 1 and event["ts"] >= stack[-1]["ts"] + stack[-1]["dur"]:
                stack.pop()
            self_time[id(stack[-1])] -= event["dur"]
            self_time[id(event)] = float(event["dur"])
            owner[id(event)] = _category(event["name"]) or owner[id(stack[-1])]
            stack.append(event)
        for event in [outer, *inside]:
            seconds = max(self_time[id(event)], 0.0) / 1e6
            parts[owner[id(event)]] += seconds
            if event["name"].startswith("Instantiating Template"):
                families[_family(event)] += seconds
                counts[_family(event)] += 1
    return parts, [(name, seconds, counts[name]) for name, seconds in families.most_common(top)]


def summarize_trace(path: Path) -> tuple[dict[str, float], list[tuple[str, float, int]]]:
    """parse_device_trace of the trace file at `path`, mapped rather than read into memory."""
    with open(path, "rb") as file:
        if os.fstat(file.fileno()).st_size == 0:
            raise ValueError(f"{path}: empty")
        with mmap.mmap(file.fileno(), 0, access=mmap.ACCESS_READ) as data:
            return parse_device_trace(trace_events(data))


def read_traces(paths: dict[str, Path], delete: bool = False
                ) -> tuple[dict[str, tuple[dict[str, float], list[tuple[str, float, int]]]], dict[str, str]]:
    """(TU name -> parse_device_trace of its trace, TU name -> why its trace could not be used): a
    trace that is missing (a compile killed before cicc wrote it) or does not read is named, not
    dropped. With `delete`, each trace file is removed once read."""
    traces, unreadable = {}, {}
    for name, path in sorted(paths.items()):
        try:
            traces[name] = summarize_trace(path)
        except FileNotFoundError:
            unreadable[name] = "no trace written"
        except (OSError, ValueError) as exc:
            unreadable[name] = str(exc).replace(str(path), path.name)[:200]
        finally:
            if delete:
                path.unlink(missing_ok=True)
    return traces, unreadable


def format_cicc_table(traces: dict[str, tuple[dict[str, float], list[tuple[str, float, int]]]],
                      unreadable: dict[str, str] | None = None) -> str:
    """One row per TU: cicc's seconds by CICC_PARTS; then the slowest TU's costliest template families;
    then each compiled TU whose trace could not be used, and why."""
    unreadable = unreadable or {}
    if not traces:
        return "\n".join(f"{name}: left out ({why})" for name, why in sorted(unreadable.items()))
    width = max([len("TU"), *map(len, traces)])
    lines = [f"{'TU':<{width}} " + " ".join(f"{p:>15}" for p in CICC_PARTS) + f" {'cicc':>8}"]
    for name, (parts, _) in traces.items():
        lines.append(f"{name:<{width}} " + " ".join(f"{parts[p]:>14.1f}s" for p in CICC_PARTS)
                     + f" {sum(parts.values()):>7.1f}s")
    slowest = max(traces, key=lambda name: sum(traces[name][0].values()))
    lines.append(f"costliest template families in {slowest} (self seconds, instantiations):")
    lines += [f"  {seconds:7.2f}s {count:7d}  {family[:100]}" for family, seconds, count in traces[slowest][1]]
    lines += [f"{name}: left out ({why})" for name, why in sorted(unreadable.items())]
    return "\n".join(lines)


def phase_of(tool_phase: str) -> str:
    """nvcc's phase name -> ours: `gcc (preprocessing 4)` is preprocessing, `gcc (compiling)` the
    host compile of the cudafe'd source; nvcc's own driver time and unknown tools are `other`."""
    name = tool_phase.strip()
    if "preprocessing" in name:
        return "preprocessing"
    if name.endswith("(compiling)"):
        return "host compiler"
    return name if name in PHASES else "other"


def parse_nvcc_time(text: str) -> dict[str, float]:
    """phase -> seconds, summed over the rows of one `nvcc --time` CSV (several archs or several
    preprocessing passes add up). Rows whose unit is not ms are refused, not guessed."""
    totals = {phase: 0.0 for phase in PHASES}
    rows = csv.reader(io.StringIO(text), skipinitialspace=True)
    header = [cell.strip() for cell in next(rows, [])]
    if "phase name" not in header or "metric" not in header:
        raise ValueError(f"not an `nvcc --time` CSV: header is {header!r}")
    phase_col, metric_col, unit_col = header.index("phase name"), header.index("metric"), header.index("unit")
    for row in rows:
        if len(row) <= unit_col:
            continue
        unit = row[unit_col].strip()
        if unit != "ms":
            raise ValueError(f"`nvcc --time` row {row!r}: unit {unit!r}, expected ms")
        totals[phase_of(row[phase_col])] += float(row[metric_col]) / 1000.0
    return totals


def parse_by_source(text: str) -> dict[str, dict[str, float]]:
    """TU (the source file's stem) -> phase seconds, from a CSV that several nvcc runs appended to.
    nvcc's driver row names no source and is left out."""
    lines = text.splitlines()
    if not lines:
        return {}
    header, by_source = lines[0], {}
    for line in lines[1:]:
        source = line.split(",", 1)[0].strip()
        if source and line != header:  # two nvcc runs that found no file each wrote the header
            by_source.setdefault(Path(source).stem, []).append(line)
    return {name: parse_nvcc_time("\n".join([header, *rows])) for name, rows in sorted(by_source.items())}


def read_profiles(paths: dict[str, Path]) -> dict[str, dict[str, float]]:
    """TU name -> phase seconds, for the TUs whose CSV exists (a TU ninja skipped has none)."""
    return {name: parse_nvcc_time(path.read_text()) for name, path in sorted(paths.items()) if path.is_file()}


def format_table(profiles: dict[str, dict[str, float]]) -> str:
    """A fixed-width table: one row per TU, one column per phase, a total column and a sum row."""
    width = max([len("TU"), len("total"), *map(len, profiles)])
    lines = [f"{'TU':<{width}} " + " ".join(f"{p:>13}" for p in PHASES) + f" {'total':>8}"]
    sums = {phase: 0.0 for phase in PHASES}
    for name, phases in profiles.items():
        lines.append(f"{name:<{width}} " + " ".join(f"{phases[p]:>12.1f}s" for p in PHASES)
                     + f" {sum(phases.values()):>7.1f}s")
        for phase in PHASES:
            sums[phase] += phases[phase]
    lines.append(f"{'total':<{width}} " + " ".join(f"{sums[p]:>12.1f}s" for p in PHASES)
                 + f" {sum(sums.values()):>7.1f}s")
    return "\n".join(lines)
