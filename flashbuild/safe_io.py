"""Reading the files flashbuild parses (cache and shard manifests, --costs, the plugin's manifest):
only regular files, never through a FIFO or a device (a FIFO blocks the read forever, /dev/zero
never ends), at most `limit` bytes, and JSON whose nesting Python cannot follow is a ValueError
like any other malformed JSON, not a RecursionError. Callers turn UnreadableFile and ValueError
into their own one-line errors naming the file and the fix. And the one digest of a file's bytes
(`sha256_of`: a built extension, a downloaded sdist)."""

from __future__ import annotations

import hashlib
import json
import os
import stat
from pathlib import Path
from typing import Any

LIMIT = 16 * 2**20  # no manifest, cost table or config flashbuild writes comes near this


class UnreadableFile(OSError):
    """Not a regular file, too large, or unreadable; str() says which."""


def read_bytes(path: str | os.PathLike, limit: int = LIMIT) -> bytes:
    """The file's bytes, after checking without blocking that it is a regular file of at most
    `limit` bytes (a link is followed: callers that must not follow one check it first)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except FileNotFoundError:
        raise
    except OSError as exc:
        raise UnreadableFile(exc.errno, exc.strerror or str(exc), str(path)) from None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            kind = "a directory" if stat.S_ISDIR(info.st_mode) else "a FIFO" if stat.S_ISFIFO(info.st_mode) \
                else "a device" if stat.S_ISCHR(info.st_mode) or stat.S_ISBLK(info.st_mode) else "not a regular file"
            raise UnreadableFile(0, f"{kind}, not a regular file", str(path))
        if info.st_size > limit:
            raise UnreadableFile(0, f"{info.st_size} bytes, more than the {limit} a flashbuild file can hold",
                                 str(path))
        chunks, size = [], 0
        while True:
            chunk = os.read(fd, 1 << 20)
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
            if size > limit:
                raise UnreadableFile(0, f"more than the {limit} bytes a flashbuild file can hold", str(path))
        return b"".join(chunks)
    except UnreadableFile:
        raise
    except OSError as exc:
        raise UnreadableFile(exc.errno, exc.strerror or str(exc), str(path)) from None
    finally:
        os.close(fd)


def read_text(path: str | os.PathLike, limit: int = LIMIT) -> str:
    """read_bytes decoded as UTF-8 (a UnicodeDecodeError, a ValueError, for other bytes)."""
    return read_bytes(path, limit).decode("utf-8")


def loads(text: str | bytes) -> Any:
    """json.loads, where nesting too deep for Python is a ValueError (as any malformed JSON is)."""
    try:
        return json.loads(text)
    except RecursionError:
        raise ValueError("nested deeper than flashbuild reads") from None


def read_json(path: str | os.PathLike, limit: int = LIMIT) -> Any:
    """loads(read_text(path)): raises FileNotFoundError, UnreadableFile (an OSError) or ValueError."""
    return loads(read_text(Path(path), limit))


def sha256_of(path: str | os.PathLike) -> str:
    """The hex SHA-256 of a file's bytes, read in 1 MiB blocks (an extension or an sdist can be large)."""
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()
