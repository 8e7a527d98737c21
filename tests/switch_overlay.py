"""Reading switch macros two ways, for tests that check a rendered overlay (generated/flashbuild_switches.h)
against a real tree: what the tree's switch header defines and its launch templates use, and what the
overlay keeps of each macro. Independent of flashbuild/sources/switches.py on purpose: the test reads
C++ text, not our data."""

from __future__ import annotations

import re
from pathlib import Path

USE = re.compile(r"\b([A-Z][A-Z0-9_]*_SWITCH)\s*\(")
DEFINE = re.compile(r"^[ \t]*#[ \t]*define[ \t]+([A-Z][A-Z0-9_]*_SWITCH)(\(([^)]*)\)|[ \t]+([A-Z][A-Z0-9_]*)\b|$)",
                    re.MULTILINE)


def strip_comments(text: str) -> str:
    text = re.sub(r"/\*.*?\*/", " ", text, flags=re.S)
    return re.sub(r"//[^\n]*", " ", text)


def _arguments(text: str, start: int, wanted: int) -> list[str]:
    """The first `wanted` top-level arguments of the call whose '(' ends at `start`."""
    args, current, depth = [], "", 0
    for c in text[start:]:
        if c in "([{":
            depth += 1
        elif c in ")]}":
            if depth == 0:
                break
            depth -= 1
        if c == "," and depth == 0:
            args.append(current.strip())
            current = ""
            if len(args) == wanted:
                break
        else:
            current += c
    return args


def tree_uses(files: list[Path]) -> set[tuple[str, str | None]]:
    """Each switch the files call: (macro, None), and (BOOL_SWITCH, its constant's name) per site."""
    out = set()
    for path in files:
        text = strip_comments(path.read_text(errors="replace"))
        for match in USE.finditer(text):
            macro = match.group(1)
            if macro == "BOOL_SWITCH":
                args = _arguments(text, match.end(), 2)
                out.add((macro, args[1] if len(args) == 2 else None))
            else:
                out.add((macro, None))
    return out


def tree_arity(header: Path) -> dict[str, set[int]]:
    """macro -> the parameter counts (before the ...) of each of its definitions in the header; an alias
    (#define SOFTCAP_SWITCH BOOL_SWITCH) counts as the macro it names."""
    text = strip_comments(header.read_text(errors="replace"))
    found: dict[str, set[int]] = {}
    aliases = []
    for match in DEFINE.finditer(text):
        name, params, alias = match.group(1), match.group(3), match.group(4)
        if params is not None:
            names = [p.strip() for p in params.split(",")]
            found.setdefault(name, set()).add(len([p for p in names if p != "..."]))
        elif alias:
            aliases.append((name, alias))
    for name, alias in aliases:
        found.setdefault(name, set()).update(found.get(alias, set()))
    return found


MACRO = re.compile(r"^#define ([A-Z][A-Z0-9_]*)\(([^)]*)\) \[&\] \{ \\\n(.*?)^\}\(\)", re.MULTILINE | re.S)
BRANCH = re.compile(r"^  (?:if|else if|else) .*?\{ \\\n(.*?)^  \} \\\n", re.MULTILINE | re.S)
BIND = re.compile(r"constexpr static bool (\w+) = (true|false);")
SITE = re.compile(r'if \(same\(name, "(\w+)"\)\) \{\s*return Site\{'
                  r'(true|false), (true|false), (true|false), (true|false),')


def overlay_macros(text: str) -> dict[str, tuple]:
    """Each macro the overlay redefines -> its params and, per branch in order, the constants bound
    ({name: value}) or "miss" (a throw). BOOL_SWITCH, redefined for its sites, is left to overlay_sites."""
    out = {}
    for match in MACRO.finditer(text):
        name, params, body = match.group(1), match.group(2), match.group(3)
        if name == "BOOL_SWITCH":
            continue
        branches = []
        for branch in BRANCH.finditer(body):
            binds = {k: v == "true" for k, v in BIND.findall(branch.group(1))}
            branches.append(binds if binds else "miss")
        out[name] = (tuple(p.strip() for p in params.split(",") if p.strip() != "..."), tuple(branches))
    return out


def overlay_sites(text: str) -> dict[str, tuple]:
    """Each BOOL_SWITCH site the overlay narrows -> (the flag set: value or "miss", the flag unset: ...)."""
    out = {}
    for name, keep_t, value_t, keep_f, value_f in SITE.findall(text):
        out[name] = (value_t == "true" if keep_t == "true" else "miss",
                     value_f == "true" if keep_f == "true" else "miss")
    return out
