"""Outbound DLP in audit records: the `dlp` block of a finding, and every URL, redirect hop,
destination name, error message and search query of a record with each piece a detector
matches in (a host label, path segment, query name or value, a word of free text) replaced
whole by `[REDACTED:dlp.<detector>]`, so no record holds a secret, a recoverable part of one,
or the secret written beside it (an AWS key id's secret key, a user's password, a JWT's
other parts). Pure; the detectors are `dlp.py`'s.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from gateway.policy.dlp import (
    ENTROPY,
    MAX_SCANNED_CHARS,
    UNTRUSTED_HOST,
    DlpMode,
    DlpSettings,
    Finding,
)


def mark_record(record: dict[str, Any], settings: DlpSettings, finding: Finding | None) -> None:
    """An audit record once DLP has looked: the finding as its `dlp` block, and every URL,
    destination name, error message and search query in it with what a detector matches
    replaced (also when nothing was found at decision time: a redirect's final URL was
    never looked at, yet may echo one)."""
    if finding is not None:
        record["dlp"] = finding.to_record()
    if settings.mode is DlpMode.OFF:
        return
    # What the untrusted-host check found is high entropy anywhere in the URL.
    everywhere = finding is not None and finding.detector == UNTRUSTED_HOST
    # A host label a finding names, or that redaction takes from any URL of the record, goes
    # from every name in it, also where the name was normalised (lower case, where a format,
    # an encoding or a JWT over several labels no longer shows).
    labels: dict[int, str] = {}
    label = _label_position(finding)
    if label is not None and finding is not None:
        labels[label] = finding.detector
    url = record.get("url")
    if isinstance(url, dict):
        for value in url.values():
            if isinstance(value, str):
                labels = {**lost_labels(settings, value), **labels}
        for key, value in url.items():
            if isinstance(value, str):
                shown = redact_url(settings, value, entropy_everywhere=everywhere, labels=labels)
                if everywhere:
                    shown = shown.replace(marker(ENTROPY), marker(UNTRUSTED_HOST))
                url[key] = shown
    redirects = record.get("redirects")
    if isinstance(redirects, list):
        record["redirects"] = [
            {**hop, "url": redact_url(settings, hop["url"])}
            if isinstance(hop, dict) and isinstance(hop.get("url"), str)
            else hop
            for hop in redirects
        ]
    destination = record.get("destination")
    if isinstance(destination, dict) and isinstance(destination.get("domain"), str):
        destination["domain"] = redact_host(settings, destination["domain"], labels=labels)
    error = record.get("error")
    if isinstance(error, dict) and isinstance(error.get("message"), str):
        # An error may quote what the agent sent (a URL that did not parse, say).
        error["message"] = redact_text(settings, error["message"])
    search = record.get("search")
    if isinstance(search, dict):
        if isinstance(search.get("query"), str):
            search["query"] = redact_text(settings, search["query"])
        if isinstance(search.get("queries"), list):
            search["queries"] = [
                redact_text(settings, q) if isinstance(q, str) else q for q in search["queries"]
            ]


def redact_text(settings: DlpSettings, text: str) -> str:
    """Free text (an error message, a search query): every word (a run without whitespace)
    in which a detector matches (as written, percent-decoded, folded, or inside a base64 or
    hex run) replaced whole by `[REDACTED:dlp.<detector>]`, so a secret written beside the
    match (`AKIA…:<secret key>`) goes with it."""
    return _redact_pieces(settings, text, _WORDS, entropy=False)


def redact_host(
    settings: DlpSettings,
    host: str,
    *,
    labels: Mapping[int, str] = {},  # noqa: B006 - read only
) -> str:
    """A host name as the audit log may show it: each label a detector matches lost, and
    those `labels` names (index -> detector) lost whatever they look like now."""
    text = host[: MAX_SCANNED_CHARS * 2]
    pieces = _HOST_LABELS.split(text)
    forced = {2 * index: detector for index, detector in labels.items()}
    entropy = settings.entropy_in("host_labels")
    return _joined(pieces, _piece_hits(settings, text, pieces, entropy=entropy, forced=forced))


def lost_labels(settings: DlpSettings, url: str) -> dict[int, str]:
    """The labels of `url`'s host (index -> detector) that `redact_url` replaces."""
    text = url.strip(_URL_SPACE)
    head, sep, rest = text.partition("://")
    if not sep or len(head) > 40:
        if "/" in text or "?" in text:
            return {}
        rest = text
    end = min((rest.find(d) for d in "/?#" if d in rest), default=len(rest))
    hostport = rest[:end].rpartition("@")[2]
    if hostport.startswith("["):
        return {}
    host = hostport.partition(":")[0][: MAX_SCANNED_CHARS * 2]
    pieces = _HOST_LABELS.split(host)
    hits = _piece_hits(settings, host, pieces, entropy=settings.entropy_in("host_labels"))
    return {index // 2: detector for index, detector in hits.items()}


def redact_url(
    settings: DlpSettings,
    url: str,
    *,
    entropy_everywhere: bool = False,
    labels: Mapping[int, str] = {},  # noqa: B006 - read only
) -> str:
    """A URL as the audit log may show it once DLP has looked: each host label, path
    segment, query name and query value in which a detector matches (or which a match that
    spans delimiters, a JWT over host labels or a `scheme://user:pass@` in a path, touches)
    replaced whole by the marker; `labels` as `redact_host`'s. What the parser strips around
    a URL is left out."""
    text = url.strip(_URL_SPACE)
    head, sep, rest = text.partition("://")
    if not sep or len(head) > 40:
        # An authority alone (a CONNECT's host:port) is host labels; anything else, text.
        if "/" not in text and "?" not in text:
            return _redact_authority(settings, text, labels)
        return _redact_pieces(settings, text, _WORDS, entropy=False)
    end = min((rest.find(d) for d in "/?#" if d in rest), default=len(rest))
    authority, tail = rest[:end], rest[end:]
    in_path = settings.entropy_in("path") or settings.entropy_in("query") or entropy_everywhere
    if entropy_everywhere and settings.entropy is None:
        in_path = False
    return (
        head
        + sep
        + _redact_authority(settings, authority, labels)
        + _redact_tail(settings, tail, entropy=in_path)
    )


def _redact_authority(settings: DlpSettings, authority: str, labels: Mapping[int, str]) -> str:
    """User info (pieces at `:`), the host (labels) and the port."""
    userinfo, at, hostport = authority.rpartition("@")
    if hostport.startswith("["):
        host, colon, port = hostport, "", ""  # an IPv6 literal: no labels
    else:
        host, colon, port = hostport.partition(":")
    shown = _redact_pieces(settings, userinfo, _USERINFO, entropy=False) + at if at else ""
    return shown + redact_host(settings, host, labels=labels) + colon + port


def _redact_tail(settings: DlpSettings, tail: str, *, entropy: bool) -> str:
    """A URL's path (pieces: segments), query (pieces: each name and each value, a value
    running to the next `&` or `;`) and fragment (one piece)."""
    rest, hash_sign, fragment = tail.partition("#")
    path, question, query = rest.partition("?")
    shown = _redact_pieces(settings, path, _SEGMENTS, entropy=entropy)
    if question:
        shown += question + _redact_split(settings, query, _query_parts(query), entropy=entropy)
    if hash_sign:
        shown += hash_sign + _redact_split(settings, fragment, [fragment], entropy=entropy)
    return shown


def _query_parts(query: str) -> list[str]:
    """A query as pieces with their delimiters between (`name`, `=`, `value`, `&`, …)."""
    parts: list[str] = []
    for index, pair in enumerate(_PAIRS.split(query)):
        if index % 2:
            parts += [pair]  # the separator
            continue
        name, equals, value = pair.partition("=")
        parts += [name, equals, value] if equals else [name]
    return parts


_URL_SPACE = " \t\r\n\f\v"
# What a piece ends at: a word at whitespace; a host label at a dot (or a full stop UTS 46
# reads as one), the port's colon or user info's `@`; a path segment at `/`; a query name at
# its first `=`, a value at the next `&` or `;`.
_WORDS = re.compile(r"(\s+)")
_HOST_LABELS = re.compile(r"([.\u3002\uff0e\uff61])")
_USERINFO = re.compile(r"([:@])")
_SEGMENTS = re.compile(r"(/)")
_PAIRS = re.compile(r"([&;])")


def _redact_pieces(
    settings: DlpSettings, text: str, delimiters: re.Pattern[str], *, entropy: bool
) -> str:
    if not text:
        return text
    text = text[: MAX_SCANNED_CHARS * 2]
    return _redact_split(settings, text, delimiters.split(text), entropy=entropy)


def _redact_split(settings: DlpSettings, text: str, pieces: list[str], *, entropy: bool) -> str:
    return _joined(pieces, _piece_hits(settings, text, pieces, entropy=entropy))


def _piece_hits(
    settings: DlpSettings,
    text: str,
    pieces: list[str],
    *,
    entropy: bool,
    forced: Mapping[int, str] | None = None,
) -> dict[int, str]:
    """Of `text`, given as its pieces with a delimiter between each two, the pieces (index
    -> detector) a detector matches in, that a match over the whole text touches, or that
    `forced` names."""
    spans = _spanning_matches(settings, text)
    hits: dict[int, str] = {}
    at = 0
    for index, piece in enumerate(pieces):
        start, at = at, at + len(piece)
        if index % 2 or not piece:
            continue  # a delimiter
        detector = forced.get(index) if forced else None
        detector = detector or next((d for s, e, d in spans if s < at and e > start), None)
        if detector is None and len(piece) >= 8:
            hit = settings.scan_text(piece, entropy=entropy)
            detector = None if hit is None else hit.detector
        if detector is not None:
            hits[index] = detector
    return hits


def _joined(pieces: list[str], hits: Mapping[int, str]) -> str:
    return "".join(marker(hits[i]) if i in hits else piece for i, piece in enumerate(pieces))


def _spanning_matches(settings: DlpSettings, text: str) -> list[tuple[int, int, str]]:
    """(start, end, detector) of every detector match in the whole text as written: those
    that may span delimiters (a JWT, a `Basic` pair, a URL with user info, a PEM header)
    take every piece they touch."""
    if not settings.may_hold(text):
        return []  # no anchor anywhere: the common case, one pass over literals
    return list(settings.matches(text))


def _label_position(finding: Finding | None) -> int | None:
    if finding is None or not finding.location.startswith("host_label["):
        return None
    return int(finding.location[len("host_label[") : -1])


def marker(detector: str) -> str:
    return f"[REDACTED:dlp.{detector}]"
