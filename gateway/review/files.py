"""The audit folder as the review page reads it: the files of each chain (one chain per
instance: rotated files oldest first, then the live file), found from `audit.path`'s template.
Files that do not fit the template (checkpoint copies, lock files, anything else) are not read.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass

INSTANCE_PLACEHOLDER = "{instance}"
STDOUT_PATH = "-"


@dataclass(frozen=True, slots=True)
class LogFile:
    name: str  # the file's name inside the folder: what the page's URLs name
    path: str
    size: int
    mtime_ns: int
    identity: tuple[int, int]  # (device, inode): a rotation renames a file, keeping it


@dataclass(frozen=True, slots=True)
class Chain:
    instance: str
    files: tuple[LogFile, ...]  # oldest first


def _template_pattern(basename: str) -> re.Pattern[str]:
    """`gateway-{instance}.jsonl` -> its live and rotated names (`stem.YYYYMMDDhhmm[-n].ext`,
    as the writer renames a full file)."""
    stem, suffix = os.path.splitext(basename)
    before, found, after = stem.partition(INSTANCE_PLACEHOLDER)
    instance = r"(?P<instance>.+?)" if found else ""
    return re.compile(
        re.escape(before)
        + instance
        + re.escape(after)
        + r"(?:\.(?P<stamp>\d{12})(?:-(?P<n>\d+))?)?"
        + re.escape(suffix)
    )


class AuditFolder:
    """The folder of the configured audit path; listed afresh on each call (files rotate)."""

    def __init__(self, path_template: str, checkpoints_template: str | None = None) -> None:
        self.streamed = path_template == STDOUT_PATH
        self.folder = os.path.dirname(os.path.abspath(path_template))
        self._pattern = _template_pattern(os.path.basename(path_template))
        self._stem = os.path.splitext(os.path.basename(path_template))[0]
        self._checkpoints: re.Pattern[str] | None = None
        if checkpoints_template and (
            os.path.dirname(os.path.abspath(checkpoints_template)) == self.folder
        ):
            self._checkpoints = _template_pattern(os.path.basename(checkpoints_template))

    def chains(self) -> list[Chain]:
        """Every chain in the folder, by instance name; none when the log goes to stdout or
        the folder does not exist yet."""
        if self.streamed:
            return []
        grouped: dict[str, list[tuple[tuple[int, int, int], LogFile]]] = {}
        try:
            entries = list(os.scandir(self.folder))
        except OSError:
            return []
        for entry in entries:
            match = self._pattern.fullmatch(entry.name)
            if match is None or (self._checkpoints and self._checkpoints.fullmatch(entry.name)):
                continue
            try:
                if not entry.is_file():
                    continue
                stat = entry.stat()
            except OSError:
                continue
            instance = match.groupdict().get("instance") or self._stem
            stamp, n = match.group("stamp"), match.group("n")
            # The live file (no stamp) is the newest of its chain.
            order = (1, 0, 0) if stamp is None else (0, int(stamp), int(n or 0))
            grouped.setdefault(instance, []).append(
                (
                    order,
                    LogFile(
                        entry.name,
                        entry.path,
                        stat.st_size,
                        stat.st_mtime_ns,
                        (stat.st_dev, stat.st_ino),
                    ),
                )
            )
        return [
            Chain(instance, tuple(file for _, file in sorted(files, key=lambda f: f[0])))
            for instance, files in sorted(grouped.items())
        ]

    def file(self, name: str) -> LogFile | None:
        """The log file of that name, only if it is one of the folder's chain files."""
        for chain in self.chains():
            for file in chain.files:
                if file.name == name:
                    return file
        return None
