"""Canonical result URLs, stable result ids, and rank-preserving dedup.

Canonical form: http(s) only, no userinfo, lower-case A-label host without a trailing dot,
no default port, no fragment, no tracking parameters; an empty path becomes "/". An http and
an https copy of one URL on the default ports are one result, shown as https; on an explicit
port they are two origins and stay two. Nothing here touches the network.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable
from dataclasses import dataclass, replace
from typing import Any
from urllib.parse import unquote

import yarl

MAX_URL_CHARS = 2048

TRACKING_PARAMS = frozenset(
    {
        "gclid", "gclsrc", "dclid", "gbraid", "wbraid", "fbclid", "msclkid", "yclid", "twclid",
        "ttclid", "igshid", "li_fat_id", "mc_eid", "mc_cid", "ref_src", "ref_url", "_ga", "_gl",
        "_hsenc", "_hsmi", "mkt_tok", "oly_enc_id", "oly_anon_id", "vero_id", "vero_conv",
        "srsltid", "spm", "wickedid", "rb_clickid", "s_cid",
    }
)  # fmt: skip
TRACKING_PREFIXES = ("utm_", "pk_", "mtm_")  # Google Analytics, Piwik/Matomo
_DEFAULT_PORTS = {"http": 80, "https": 443}
_UNSAFE = re.compile(r"[\x00-\x20\x7f<>\"]")


@dataclass(frozen=True, slots=True)
class SearchResult:
    """A result as the search layer hands it on: canonical URL, id, domain."""

    id: str
    title: str
    url: str
    snippet: str
    domain: str
    published_at: str | None
    # Canonical URLs of near-duplicates merged into this result (dedupe.py), best rank first.
    also_at: tuple[str, ...] = ()
    # The provider's relevance score, or for a fused answer the fused score; None otherwise.
    score: float | None = None

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "id": self.id,
            "title": self.title,
            "url": self.url,
            "snippet": self.snippet,
            "domain": self.domain,
            "published_at": self.published_at,
            "score": self.score,
        }
        if self.also_at:
            out["also_at"] = list(self.also_at)
        return out

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> SearchResult:
        return cls(**{**data, "also_at": tuple(data.get("also_at", ()))})


def canonical_url(raw: str) -> str | None:
    """The canonical form of an absolute http(s) URL, or None when it is not one."""
    if not isinstance(raw, str) or len(raw) > MAX_URL_CHARS or _UNSAFE.search(raw.strip()):
        return None
    try:
        url = yarl.URL(raw.strip())
        scheme = url.scheme.lower()
        host = (url.raw_host or "").rstrip(".").lower()
        if scheme not in _DEFAULT_PORTS or not host or not url.is_absolute():
            return None
        port = url.explicit_port
        if port == _DEFAULT_PORTS[scheme]:
            port = None
        query = _strip_tracking(url.raw_query_string)
        path = url.raw_path or "/"
    except (ValueError, TypeError, UnicodeError):
        return None
    netloc = f"[{host}]" if ":" in host else host
    if port is not None:
        netloc = f"{netloc}:{port}"
    text = f"{scheme}://{netloc}{path}" + (f"?{query}" if query else "")
    return text if len(text) <= MAX_URL_CHARS else None


def result_id(canonical: str) -> str:
    """Stable id of a canonical URL: the first 16 hex digits of its SHA-256."""
    return hashlib.sha256(canonical.encode("utf-8")).hexdigest()[:16]


def dedup(results: Iterable[SearchResult]) -> tuple[list[SearchResult], int]:
    """Drop repeats of a canonical URL (http and https twins on default ports too), keeping
    the first rank.

    When a later twin is https and the kept one http, the kept entry takes the https URL.
    Returns the kept results and how many were dropped.
    """
    kept: list[SearchResult] = []
    position: dict[str, int] = {}
    dropped = 0
    for result in results:
        key = twin_key(result.url)
        if key not in position:
            position[key] = len(kept)
            kept.append(result)
            continue
        dropped += 1
        index = position[key]
        if kept[index].url.startswith("http://") and result.url.startswith("https://"):
            kept[index] = replace(kept[index], url=result.url, id=result_id(result.url))
    return kept, dropped


def twin_key(url: str) -> str:
    """The URL without its scheme, so http and https copies on their default ports collide.

    A canonical URL keeps a port only when it is not its scheme's default; with one, http
    and https are different origins (a TLS service and a plain one on the same port), so
    the key keeps the scheme and they never merge.
    """
    try:
        explicit = yarl.URL(url).explicit_port is not None
    except (ValueError, TypeError, UnicodeError):
        explicit = True  # not canonical: merge it with nothing
    return url if explicit else url.split("://", 1)[-1]


def _strip_tracking(raw_query: str) -> str:
    if not raw_query:
        return ""
    kept = []
    for piece in raw_query.split("&"):
        if not piece:
            continue
        name = unquote(piece.split("=", 1)[0]).lower()
        if name in TRACKING_PARAMS or name.startswith(TRACKING_PREFIXES):
            continue
        kept.append(piece)
    return "&".join(kept)
