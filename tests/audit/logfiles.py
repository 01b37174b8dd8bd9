"""Building real audit logs for the tests, and tampering with them the way an attacker would."""

from __future__ import annotations

import hashlib
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from gateway.audit import AuditLog
from gateway.provenance.dsse import Signer


def new_signer() -> tuple[Signer, Any]:
    key = Ed25519PrivateKey.generate()
    return Signer(key), key.public_key()


class FakeClock:
    def __init__(self, start: float = 1_800_000_000.0) -> None:
        self.now = start

    def __call__(self) -> float:
        return self.now


def fetch_record(i: int, **overrides: Any) -> dict[str, Any]:
    record: dict[str, Any] = {
        "event": {
            "id": f"ev-{i}",
            "action": "WebFetch",
            "outcome": "success",
            "type": ["allowed"],
            "duration_ms": 12,
        },
        "client": {"id": "research-agent"},
        "policy": {
            "name": "p",
            "sha256": "0" * 64,
            "decision": "allow",
            "enforced": True,
            "rule": "domains.allow[0]",
            "reason": None,
        },
        "url": {
            "original": f"https://example.com/page/{i}",
            "full": f"https://example.com/page/{i}",
        },
        "destination": {"domain": "example.com", "ip": "127.0.0.1", "port": 443},
        "http": {"request": {"method": "GET"}, "response": {"status_code": 200, "bytes": 100}},
    }
    record.update(overrides)
    return record


def open_log(path: Path | str, **kwargs: Any) -> AuditLog:
    kwargs.setdefault("instance_id", "gw-test")
    kwargs.setdefault("version", "0.0-test")
    log = AuditLog(str(path), **kwargs)
    log.open()
    return log


def read_lines(path: Path | str) -> list[bytes]:
    """The file's lines without their newlines (a torn last line included as is)."""
    data = Path(path).read_bytes()
    lines = data.split(b"\n")
    if lines and lines[-1] == b"":
        lines.pop()
    return lines


def write_lines(path: Path | str, lines: list[bytes]) -> None:
    Path(path).write_bytes(b"".join(line + b"\n" for line in lines))


def records(path: Path | str) -> list[dict[str, Any]]:
    return [orjson.loads(line) for line in read_lines(path)]


def line_sha(line: bytes) -> str:
    return hashlib.sha256(line).hexdigest()


def edit(line: bytes, change: Callable[[dict[str, Any]], None]) -> bytes:
    record = orjson.loads(line)
    change(record)
    return orjson.dumps(record)


def rechain(lines: list[bytes], start: int) -> list[bytes]:
    """What an attacker without the signing key can do after editing line `start` (0-based):
    recompute every later `chain.prev` so the hash chain itself is consistent again."""
    out = list(lines)
    for index in range(start + 1, len(out)):
        prev = line_sha(out[index - 1])
        out[index] = edit(out[index], lambda r, p=prev: r["chain"].__setitem__("prev", p))
    return out


def rotated_files(directory: Path, stem: str = "gw-gw-test", suffix: str = ".jsonl") -> list[str]:
    names = sorted(
        n
        for n in os.listdir(directory)
        if n.startswith(stem + ".")
        and n.endswith(suffix)
        and n != stem + suffix
        and not n.endswith(".lock")
    )
    return [str(directory / n) for n in names] + [str(directory / (stem + suffix))]
