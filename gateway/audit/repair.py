"""The last resort before a record is written: a copy of a record that would not serialise
(a lone surrogate from bytes that were not UTF-8, a number past 64 bits, an object JSON has
no form for) or that is too long for one line, with every such value made representable
(`wire.representable`) and the paths of what was changed. The callers already make the
values others choose representable; this is what keeps a missed one from erasing a record.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from gateway.wire.representable import needs_repair, representable

MAX_PATHS = 20  # the record names at most this many repaired fields
_INT_RANGE = (-(2**63), 2**64 - 1)  # what orjson writes as a number


class _Repair:
    def __init__(self, limit: int, max_items: int, coerce: bool) -> None:
        self.limit = limit
        self.max_items = max_items
        self.coerce = coerce
        self.paths: list[str] = []

    def note(self, path: str) -> None:
        if len(self.paths) < MAX_PATHS:
            self.paths.append(path or ".")

    def text(self, value: str, path: str) -> str:
        if len(value) > self.limit or needs_repair(value):
            self.note(path)
            return representable(value, limit=self.limit)
        return value

    def value(self, value: Any, path: str) -> Any:
        if value is None or isinstance(value, bool | float):
            return value
        if isinstance(value, str):
            return self.text(value, path)
        if isinstance(value, int):
            if _INT_RANGE[0] <= value <= _INT_RANGE[1] or not self.coerce:
                return value
            self.note(path)
            return representable(str(value), limit=self.limit)
        if isinstance(value, Mapping):
            out: dict[str, Any] = {}
            for key, item in value.items():
                name = self.text(key, path + ".<key>") if isinstance(key, str) else None
                if name is None and not self.coerce:
                    name = key
                elif name is None:
                    self.note(path + ".<key>")
                    name = representable(repr(key), limit=self.limit)
                out[name] = self.value(item, f"{path}.{name}" if path else name)
            return out
        if isinstance(value, list | tuple):
            items = [self.value(item, f"{path}[{i}]") for i, item in enumerate(value)]
            if len(items) > self.max_items:
                self.note(path)
                left = len(items) - self.max_items
                items = [*items[: self.max_items], f"…[{left} more items]"]
            return items
        if not self.coerce:
            return value
        self.note(path)
        return representable(repr(value), limit=self.limit)


def repair_record(
    record: Mapping[str, Any], *, limit: int, max_items: int = 1000, coerce: bool = True
) -> tuple[dict[str, Any], list[str]]:
    """A representable copy of `record` (strings over `limit` characters cut, lists over
    `max_items` items cut), and the paths of the fields that changed (at most MAX_PATHS).
    `coerce=False` repairs strings only: a value JSON has no form for stays as it is."""
    repair = _Repair(limit, max_items, coerce)
    copy = repair.value(record, "")
    assert isinstance(copy, dict)
    return copy, repair.paths
