"""Outbound DLP in audit records: the `dlp` block of a finding, and every URL, destination
name, error message and search query of a record with what a detector matches replaced by
`[REDACTED:dlp.<detector>]` (the whole piece when the match was inside an encoding), so no
record holds a secret or a recoverable part of one. Pure; the detectors are `dlp.py`'s.
"""

from __future__ import annotations

import re
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
    # A finding in a host label: that label goes from every name in the record, also where
    # the name was normalised (lower case, where a format or an encoding no longer shows).
    label = _label_position(finding)
    url = record.get("url")
    if isinstance(url, dict):
        for key, value in url.items():
            if isinstance(value, str):
                if label is not None and finding is not None:
                    value = _blank_url_label(value, label, marker(finding.detector))
                shown = redact_url(settings, value, entropy_everywhere=everywhere)
                if everywhere:
                    shown = shown.replace(marker(ENTROPY), marker(UNTRUSTED_HOST))
                url[key] = shown
    destination = record.get("destination")
    if isinstance(destination, dict) and isinstance(destination.get("domain"), str):
        domain = destination["domain"]
        if label is not None and finding is not None:
            domain = _blank_label(domain, label, marker(finding.detector))
        destination["domain"] = redact_host(settings, domain)
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
    """Every detector match in `text` (as written or inside a percent-encoded, base64 or
    hex piece) replaced by `[REDACTED:dlp.<detector>]`."""
    return _redact_pieces(settings, _redact_whole(settings, text), entropy=False)


def redact_host(settings: DlpSettings, host: str) -> str:
    """A host name as the audit log may show it: each label a detector matches lost."""
    entropy = settings.entropy_in("host_labels")
    return _redact_pieces(settings, _redact_whole(settings, host), entropy=entropy)


def redact_url(settings: DlpSettings, url: str, *, entropy_everywhere: bool = False) -> str:
    """A URL as the audit log may show it once DLP has looked: each host label, path
    segment, query name and value in which a detector matches loses the match (the whole
    piece, when the match was inside an encoding)."""
    text = _redact_whole(settings, url)
    head, sep, rest = text.partition("://")
    if not sep or len(head) > 40:
        # An authority alone (a CONNECT's host:port) is host labels; anything else, text.
        alone = "/" not in text and "?" not in text
        return _redact_pieces(settings, text, entropy=alone and settings.entropy_in("host_labels"))
    end = min((rest.find(d) for d in "/?#" if d in rest), default=len(rest))
    authority, tail = rest[:end], rest[end:]
    in_path = settings.entropy_in("path") or settings.entropy_in("query") or entropy_everywhere
    if entropy_everywhere and settings.entropy is None:
        in_path = False
    return (
        head
        + sep
        + _redact_pieces(settings, authority, entropy=settings.entropy_in("host_labels"))
        + _redact_pieces(settings, tail, entropy=in_path)
    )


def _redact_pieces(settings: DlpSettings, text: str, *, entropy: bool) -> str:
    if not text:
        return text
    pieces = re.split(r"([/?&;=#.:@\s])", text[: MAX_SCANNED_CHARS * 2])
    out = []
    for piece in pieces:
        if len(piece) < 8:
            out.append(piece)
            continue
        hit = settings.scan_text(piece, entropy=entropy)
        if hit is None:
            out.append(piece)
        elif hit.match in piece:
            out.append(piece.replace(hit.match, marker(hit.detector)))
        else:
            out.append(marker(hit.detector))
    return "".join(out)


def _redact_whole(settings: DlpSettings, text: str) -> str:
    """Matches that may span delimiters (a JWT, a `Basic` pair, a URL with user info, a PEM
    header) replaced in the whole text first, before it is cut into pieces."""
    if not settings.may_hold(text):
        return text  # no anchor anywhere: the common case, one pass over literals
    for _ in range(32):  # each round removes one match; bounded
        hit = settings.match(text)
        if hit is None or not hit.match:
            break
        text = text.replace(hit.match, marker(hit.detector))
    return text


def _label_position(finding: Finding | None) -> int | None:
    if finding is None or not finding.location.startswith("host_label["):
        return None
    return int(finding.location[len("host_label[") : -1])


def _blank_label(host: str, index: int, replacement: str) -> str:
    labels = host.split(".")
    if index < len(labels):
        labels[index] = replacement
    return ".".join(labels)


def _blank_url_label(url: str, index: int, replacement: str) -> str:
    """`url` with label `index` of its host replaced; the text as it was when it has none."""
    scheme, sep, rest = url.partition("://")
    if not sep:
        scheme, rest = "", url  # an authority alone (a CONNECT's host:port)
    end = min((at for at in (rest.find(d) for d in "/?#") if at != -1), default=len(rest))
    authority, tail = rest[:end], rest[end:]
    userinfo, at, hostport = authority.rpartition("@")
    if hostport.startswith("["):
        return url
    host, colon, port = hostport.partition(":")
    blanked = f"{userinfo}{at}{_blank_label(host, index, replacement)}{colon}{port}"
    return f"{scheme}{sep}{blanked}{tail}"


def marker(detector: str) -> str:
    return f"[REDACTED:dlp.{detector}]"
