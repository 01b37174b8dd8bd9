"""Reading a command's input file (or standard input for `-`) with a size cap, for the
commands that take saved documents."""

from __future__ import annotations

import sys


class ReadError(Exception):
    """The file cannot be read, or is larger than the cap; the message says which."""


def read_capped(path: str, limit: int) -> bytes:
    """At most `limit` bytes of `path` (`-`: standard input); ReadError beyond that."""
    try:
        if path == "-":
            data = sys.stdin.buffer.read(limit + 1)
        else:
            with open(path, "rb") as handle:
                data = handle.read(limit + 1)
    except OSError as exc:
        raise ReadError(f"cannot read {path}: {exc.strerror or exc}") from exc
    if len(data) > limit:
        raise ReadError(f"{path} is larger than {limit >> 20} MiB")
    return data
