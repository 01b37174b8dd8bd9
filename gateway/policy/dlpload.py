"""The policy's `dlp:` section as written -> `DlpSettings`, every problem with its position.

Part of the policy loader (load.py), as strict as every other section: unknown detectors and
keys are errors with a suggestion, custom patterns must compile under RE2, and the canaries
file (relative to the policy file) must exist and hold strings long enough never to match by
chance. Reading that one file is the only I/O.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

from yaml.nodes import Node

from gateway.policy.dlp import (
    BUILT_IN_NAMES,
    BUILTIN_DETECTORS,
    CANARY,
    DEFAULT_BODY_PREFIX,
    ENTROPY,
    ENTROPY_WHERE,
    MAX_BODY_PREFIX,
    MAX_CANARIES,
    MAX_PATTERNS,
    MIN_CANARY_LENGTH,
    UNTRUSTED_HOST,
    CustomPattern,
    DlpMode,
    DlpSettings,
    EntropySettings,
    compile_re2,
)
from gateway.yamlstrict.issues import Severity
from gateway.yamlstrict.walk import (
    Field,
    Section,
    Walker,
    boolean_field,
    choice_field,
    integer_field,
    number_field,
    section_field,
    string_field,
    suggest,
)

MAX_CANARIES_BYTES = 1 << 20
MAX_REGEX_LENGTH = 1000
_PATTERN_NAME = re.compile(r"[a-z][a-z0-9_]{0,39}\Z")
_RESERVED = frozenset({*BUILT_IN_NAMES, CANARY, UNTRUSTED_HOST})
_MODES = tuple(m.value for m in DlpMode)
_ENTROPY = EntropySettings()


def _read_where(w: Walker, node: Node, path: str) -> tuple[str, ...] | None:
    return w.unique_items(
        node,
        path,
        lambda item, where: w.choice(item, where, ENTROPY_WHERE),
        duplicates=Severity.WARNING,
    )


def _read_detectors(w: Walker, node: Node | None, path: str) -> Section:
    return w.mapping(
        node,
        {name: boolean_field(True) for name in BUILT_IN_NAMES},
        path=path,
        unknown_code="unknown_detector",
        unknown_noun="detector",
        unknown_hint=lambda name: (
            suggest(name, BUILT_IN_NAMES) or f" (detectors: {', '.join(BUILT_IN_NAMES)})"
        ),
    )


_PATTERN_FIELDS = {
    "name": string_field(required=True),
    "regex": string_field(required=True),
}


def _read_patterns(w: Walker, node: Node, path: str) -> tuple[CustomPattern, ...] | None:
    entries = w.entries(node, path, _PATTERN_FIELDS, expected="a mapping {name, regex}")
    if entries is None:
        return None
    if len(entries) > MAX_PATTERNS:
        w.error(node, "bad_value", f"{path}: at most {MAX_PATTERNS} patterns")
        return None
    patterns: list[CustomPattern] = []
    seen: dict[str, str] = {}
    ok = True
    for index, entry in enumerate(entries):
        where = f"{path}[{index}]"
        if not entry.valid("name", "regex"):
            ok = False
            continue
        name, regex = entry["name"], entry["regex"]
        name_node, regex_node = entry.nodes["name"], entry.nodes["regex"]
        if not _PATTERN_NAME.match(name):
            w.error(
                name_node,
                "bad_value",
                f"{where}.name {name!r} must be 1 to 40 lower-case letters, digits or _, "
                "starting with a letter (it becomes the rule dlp.<name>)",
            )
            ok = False
        elif name in _RESERVED:
            w.error(name_node, "bad_value", f"{where}.name {name!r} is a built-in detector's")
            ok = False
        elif name in seen:
            w.error(name_node, "duplicate_entry", f"{where}.name {name!r} repeats {seen[name]}")
            ok = False
        else:
            seen[name] = where
        if not regex or len(regex) > MAX_REGEX_LENGTH:
            w.error(regex_node, "bad_value", f"{where}.regex must be 1 to 1000 characters")
            ok = False
            continue
        try:
            compiled = compile_re2(regex)
        except Exception as exc:  # re2.error, or a pattern too large for its memory budget
            why = exc.args[0] if exc.args else exc
            if isinstance(why, bytes):
                why = why.decode("utf-8", "replace")
            w.error(regex_node, "bad_regex", f"{where}.regex does not compile under RE2: {why}")
            ok = False
            continue
        if compiled.search("") is not None:
            w.error(
                regex_node,
                "bad_regex",
                f"{where}.regex matches the empty string, so it would match every request",
            )
            ok = False
            continue
        patterns.append(CustomPattern(name, regex))
    return tuple(patterns) if ok else None


def dlp_field() -> Field:
    return section_field(
        {
            "mode": choice_field(DlpMode.OFF.value, _MODES),
            "detectors": Field(_read_detectors, None, read_absent=True),
            "entropy": section_field(
                {
                    "min_length": integer_field(_ENTROPY.min_length, minimum=8, maximum=1024),
                    "min_bits_per_char": number_field(
                        _ENTROPY.min_bits_per_char, positive=True, maximum=8.0
                    ),
                    "where": Field(_read_where, _ENTROPY.where),
                }
            ),
            "canaries_file": string_field(None),
            "patterns": Field(_read_patterns, ()),
            "untrusted_hosts": choice_field(DlpMode.OFF.value, _MODES),
            "body_prefix_bytes": integer_field(
                DEFAULT_BODY_PREFIX, minimum=0, maximum=MAX_BODY_PREFIX
            ),
        }
    )


def compile_dlp(w: Walker, section: Section, *, source: str) -> DlpSettings | None:
    """The compiled settings, or None when a problem was reported."""
    if w.has_errors:
        return None
    detectors, entropy = section["detectors"], section["entropy"]
    canaries: tuple[str, ...] = ()
    path = section["canaries_file"]
    if path is not None:
        read = _read_canaries(w, section.nodes["canaries_file"], path, source=source)
        if read is None:
            return None
        canaries = read
    return DlpSettings(
        mode=DlpMode(section["mode"]),
        detectors=tuple(name for name in BUILTIN_DETECTORS if detectors[name]),
        entropy=EntropySettings(
            entropy["min_length"], entropy["min_bits_per_char"], tuple(entropy["where"])
        )
        if detectors[ENTROPY]
        else None,
        canaries=canaries,
        canaries_file=path,
        patterns=tuple(section["patterns"]),
        untrusted_hosts=DlpMode(section["untrusted_hosts"]),
        body_prefix_bytes=section["body_prefix_bytes"],
    )


def _read_canaries(w: Walker, node: Node, path: str, *, source: str) -> tuple[str, ...] | None:
    """One canary a line; blank lines and lines starting with `#` are skipped."""
    where = "dlp.canaries_file"
    base = Path(source).parent if os.path.isabs(source) or os.sep in source else Path()
    if source.startswith("<"):
        base = Path()  # the embedded default: relative to the working directory
    file = Path(path).expanduser()
    file = file if file.is_absolute() else base / file
    try:
        with open(file, "rb") as handle:
            data = handle.read(MAX_CANARIES_BYTES + 1)
    except OSError as exc:
        w.error(node, "bad_file", f"{where}: cannot read {path!r}: {exc.strerror or exc}")
        return None
    if len(data) > MAX_CANARIES_BYTES:
        w.error(node, "bad_file", f"{where}: {path!r} is over {MAX_CANARIES_BYTES} bytes")
        return None
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        w.error(node, "bad_file", f"{where}: {path!r} is not UTF-8")
        return None
    canaries: list[str] = []
    for number, line in enumerate(text.splitlines(), 1):
        entry = line.strip()
        if not entry or entry.startswith("#"):
            continue
        if len(entry) < MIN_CANARY_LENGTH:
            # Never echo the canary itself: it is a secret too.
            w.error(
                node,
                "bad_file",
                f"{where}: line {number} of {path!r} is shorter than {MIN_CANARY_LENGTH} "
                "characters (a short canary would match by chance)",
            )
            return None
        canaries.append(entry)
    if len(canaries) > MAX_CANARIES:
        w.error(node, "bad_file", f"{where}: {path!r} holds over {MAX_CANARIES} canaries")
        return None
    return tuple(canaries)
