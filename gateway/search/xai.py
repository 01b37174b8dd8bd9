"""The xAI Responses API with the `x_search` tool: request, answer, errors, citation offsets.

Pure: builds a `ProviderRequest` and reads a `ProviderResponse`; the gateway's provider
transport sends it. Never puts the API key anywhere but the Authorization header, and scrubs
key-shaped text out of every provider message it repeats.

Offsets: xAI documents `start_index`/`end_index` as character offsets (end exclusive) into
the `output_text` they annotate. They are read as Unicode code points; when the span they
give does not cover the inline `[[n]](url)` link it cites but the same numbers counted as
UTF-16 code units or UTF-8 bytes do, they are converted from that unit instead.
"""

from __future__ import annotations

import bisect
import re
import unicodedata
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import orjson

from gateway.errors import (
    GatewayError,
    RateLimitedError,
    UpstreamError,
    UpstreamTimeoutError,
    UpstreamUnreachableError,
)
from gateway.search.transport import (
    ProviderRequest,
    ProviderResponse,
    ProviderTransportError,
    retry_after_seconds,
)

RESPONSES_PATH = "/v1/responses"
MAX_CITATIONS = 200
MAX_TITLE_CHARS = 300
MAX_PROVIDER_MESSAGE = 300
DEFAULT_RETRY_AFTER = 5.0
_KEY_SHAPED = re.compile(r"xai-[A-Za-z0-9_\-]{4,}|[A-Za-z0-9_\-]{2}\*{3,}[A-Za-z0-9_\-]{0,4}")
_CREDITS = re.compile(r"credit|billing|spending limit|quota|balance|payment", re.IGNORECASE)
_BAD_KEY = re.compile(r"api key|api-key|apikey|unauthori[sz]ed|authentication", re.IGNORECASE)


@dataclass(frozen=True, slots=True)
class XSearchQuery:
    query: str
    allowed_x_handles: tuple[str, ...] = ()
    excluded_x_handles: tuple[str, ...] = ()
    from_date: str | None = None
    to_date: str | None = None


@dataclass(frozen=True, slots=True)
class RawCitation:
    """A cited URL; offsets are code points into `XSearchAnswer.text` (None when not given)."""

    url: str
    title: str | None
    start_index: int | None
    end_index: int | None


@dataclass(frozen=True, slots=True)
class XSearchAnswer:
    text: str
    citations: tuple[RawCitation, ...]
    response_id: str | None
    model: str | None
    status: str | None
    tool_calls: Mapping[str, int] = field(default_factory=dict)  # e.g. {"x_search_calls": 2}
    tools_used: int = 0  # usage.num_server_side_tools_used, or the calls counted
    offset_unit: str | None = None  # the unit the provider's offsets were read in


def build_request(
    query: XSearchQuery, *, base_url: str, model: str, api_key: str
) -> ProviderRequest:
    """One Responses API call with the `x_search` tool; nothing stored at xAI (`store: false`)."""
    tool: dict[str, Any] = {"type": "x_search"}
    if query.allowed_x_handles:
        tool["allowed_x_handles"] = list(query.allowed_x_handles)
    if query.excluded_x_handles:
        tool["excluded_x_handles"] = list(query.excluded_x_handles)
    if query.from_date:
        tool["from_date"] = query.from_date
    if query.to_date:
        tool["to_date"] = query.to_date
    body = {
        "model": model,
        "store": False,
        "input": [{"role": "user", "content": query.query}],
        "tools": [tool],
    }
    return ProviderRequest(
        method="POST",
        url=base_url.rstrip("/") + RESPONSES_PATH,
        headers={
            "Authorization": f"Bearer {api_key}",
            "Content-Type": "application/json",
            "Accept": "application/json",
        },
        body=orjson.dumps(body),
    )


def transport_error(exc: ProviderTransportError, timeout: float) -> GatewayError:
    if exc.error_class == "timeout":
        return UpstreamTimeoutError(
            f"xAI did not answer within {timeout:g} s (x_search.timeout); X searches can take "
            "a minute, try again or narrow the query"
        )
    return UpstreamUnreachableError(f"xAI could not be reached: {scrub(exc.message)}")


def error_for(response: ProviderResponse) -> GatewayError:
    """The API's error for a non-2xx answer, with a message an operator can act on."""
    status = response.status
    detail = provider_message(response.body)
    if status == 429:
        return RateLimitedError(
            "xAI is rate-limiting the gateway's X searches; retry after the Retry-After delay",
            retry_after=_retry_after(response),
        )
    if status == 410:
        return UpstreamError(
            "xAI answered 410 Gone: the Live Search API is retired; the gateway calls the "
            "Responses API's x_search tool, so check that x_search.base_url is the xAI API "
            "origin (e.g. https://api.x.ai)"
        )
    if status == 401 or (status in (400, 403) and _BAD_KEY.search(detail)):
        return UpstreamError(
            "xAI rejected the gateway's API key: the operator must set a valid key in the "
            "environment variable named by x_search.api_key_env"
        )
    if status == 402 or (status == 403 and _CREDITS.search(detail)) or _is_credit(status, detail):
        return UpstreamError(
            "xAI refused the search because the gateway's xAI account has no credits left "
            "(or hit its spending limit); the operator must top it up"
        )
    if status == 403:
        return UpstreamError(f"xAI refused the search (HTTP 403): {detail or 'no reason given'}")
    if status == 404:
        return UpstreamError(
            "xAI has no Responses API at the configured x_search.base_url (HTTP 404)"
        )
    if status in (400, 422):
        return UpstreamError(f"xAI rejected the search request: {detail or f'HTTP {status}'}")
    if status == 503:
        return UpstreamError("xAI is temporarily unavailable (HTTP 503); try again later")
    return UpstreamError(f"xAI answered HTTP {status}{': ' + detail if detail else ''}")


def _retry_after(response: ProviderResponse) -> float:
    wait = retry_after_seconds(response)
    return DEFAULT_RETRY_AFTER if wait is None else wait


def _is_credit(status: int, detail: str) -> bool:
    return 400 <= status < 500 and status != 429 and bool(_CREDITS.search(detail))


def provider_message(body: bytes) -> str:
    """The message in xAI's error body (`{"code", "error"}` or OpenAI's `{"error": {...}}`),
    scrubbed of key-shaped text, printable, capped."""
    try:
        data = orjson.loads(body[:65536]) if body else None
    except orjson.JSONDecodeError:
        data = None
    message: Any = None
    if isinstance(data, dict):
        error = data.get("error")
        if isinstance(error, dict):
            message = error.get("message")
        elif isinstance(error, str):
            message = error
        message = message or data.get("message") or data.get("code")
    elif body:
        message = body[:MAX_PROVIDER_MESSAGE].decode("utf-8", "replace")
    if not isinstance(message, str):
        return ""
    return scrub(message)


def scrub(text: str) -> str:
    """Key-shaped substrings removed, control characters dropped, length capped."""
    text = _KEY_SHAPED.sub("REDACTED", text)
    text = "".join(ch if ch.isprintable() else " " for ch in text)
    return " ".join(text.split())[:MAX_PROVIDER_MESSAGE]


def parse_response(response: ProviderResponse) -> XSearchAnswer:
    """The answer text, its citations and counters; raises the API's errors."""
    if not 200 <= response.status < 300:
        raise error_for(response)
    try:
        data = orjson.loads(response.body)
    except orjson.JSONDecodeError:
        raise UpstreamError("xAI's answer was not JSON") from None
    if not isinstance(data, dict):
        raise UpstreamError("xAI's answer was not a JSON object")
    status = data.get("status") if isinstance(data.get("status"), str) else None
    if status == "failed":
        error = data.get("error")
        message = error.get("message") if isinstance(error, dict) else None
        reason = scrub(message) if isinstance(message, str) else "no reason given"
        raise UpstreamError(f"xAI reported the search as failed: {reason}")
    output = data.get("output")
    if not isinstance(output, list):
        raise UpstreamError("xAI's answer has no output list")
    parts: list[str] = []
    citations: list[RawCitation] = []
    counted: dict[str, int] = {}
    units: list[str] = []
    base = 0
    for item in output:
        if not isinstance(item, dict):
            continue
        kind = item.get("type")
        if isinstance(kind, str) and kind.endswith("_call"):
            key = f"{kind[:-5]}_calls"
            counted[key] = counted.get(key, 0) + 1
            continue
        if kind != "message" or item.get("role", "assistant") != "assistant":
            continue
        for content in item.get("content") or ():
            if not isinstance(content, dict) or content.get("type") != "output_text":
                continue
            text = content.get("text")
            if not isinstance(text, str):
                continue
            if parts:
                parts.append("\n\n")
                base += 2
            parts.append(text)
            for annotation in content.get("annotations") or ():
                citation, unit = _citation(annotation, text, base)
                if citation is not None and len(citations) < MAX_CITATIONS:
                    citations.append(citation)
                    if unit:
                        units.append(unit)
            base += len(text)
    seen = {c.url for c in citations}
    for url in data.get("citations") or ():
        if isinstance(url, str) and url not in seen and len(citations) < MAX_CITATIONS:
            seen.add(url)
            citations.append(RawCitation(url, None, None, None))
    usage: dict[str, Any] = data["usage"] if isinstance(data.get("usage"), dict) else {}
    details = usage.get("server_side_tool_usage_details")
    tool_calls = (
        {str(k): v for k, v in details.items() if _count(v)}
        if isinstance(details, dict)
        else counted
    )
    used = usage.get("num_server_side_tools_used")
    return XSearchAnswer(
        text="".join(parts),
        citations=tuple(citations),
        response_id=_short_str(data.get("id")),
        model=_short_str(data.get("model")),
        status=status,
        tool_calls=tool_calls,
        tools_used=used if isinstance(used, int) and _count(used) else sum(tool_calls.values()),
        offset_unit=max(set(units), key=units.count) if units else None,
    )


def _count(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and 0 <= value < 1_000_000


def _short_str(value: Any) -> str | None:
    return scrub(value)[:200] if isinstance(value, str) and value else None


def _citation(annotation: Any, text: str, base: int) -> tuple[RawCitation | None, str | None]:
    if not isinstance(annotation, dict) or annotation.get("type") != "url_citation":
        return None, None
    url = annotation.get("url")
    if not isinstance(url, str) or not url:
        return None, None
    title = annotation.get("title")
    title = title[:MAX_TITLE_CHARS] if isinstance(title, str) else None
    start, end = annotation.get("start_index"), annotation.get("end_index")
    if not (isinstance(start, int) and isinstance(end, int) and _count(start) and _count(end)):
        return RawCitation(url, title, None, None), None
    span = code_point_span(text, start, end, url)
    if span is None:
        return RawCitation(url, title, None, None), None
    (s, e), unit = span
    return RawCitation(url, title, base + s, base + e), unit


# --- offsets ----------------------------------------------------------------------------

_NON_ASCII = re.compile(r"[^\x00-\x7f]")
_LINK_LABEL = re.compile(r"\[\[?[^\[\]]{1,40}\]\]?")
_ASTRAL = re.compile(r"[\U00010000-\U0010ffff]")


def code_point_span(
    text: str, start: int, end: int, url: str
) -> tuple[tuple[int, int], str] | None:
    """(start, end) in code points and the unit they were read in, or None if nonsense.

    Code points first; UTF-16 units or UTF-8 bytes only when that reading makes the span
    cover the inline link to `url` and the code-point reading does not.
    """
    if start > end:
        return None
    readings: list[tuple[str, tuple[int, int]]] = [("code_points", (start, end))]
    if _ASTRAL.search(text):
        readings.append(("utf16", _from_units(text, (start, end), _utf16_extra)))
    if _NON_ASCII.search(text):
        readings.append(("utf8", _from_units(text, (start, end), _utf8_extra)))
    if url in text:
        for unit, (s, e) in readings:
            if e <= len(text) and _covers_link(text[s:e], url):
                return (s, e), unit
    s, e = readings[0][1]
    if s > len(text):
        return None
    return (s, min(e, len(text))), "code_points"


def _covers_link(span: str, url: str) -> bool:
    """The span is exactly the inline `[[n]](url)` (or `[n](url)`) link, or the bare URL."""
    if span == url:
        return True
    label, sep, rest = span.partition("](")
    return bool(sep) and rest == url + ")" and _LINK_LABEL.fullmatch(label + "]") is not None


def _utf16_extra(char: str) -> int:
    return 1 if ord(char) > 0xFFFF else 0


def _utf8_extra(char: str) -> int:
    return len(char.encode("utf-8", "surrogatepass")) - 1


def _from_units(text: str, offsets: tuple[int, int], extra: Any) -> tuple[int, int]:
    """Unit offsets -> code point offsets; a unit offset inside a character rounds down."""
    wide = [(m.start(), extra(m.group())) for m in _NON_ASCII.finditer(text)]
    wide = [(index, width) for index, width in wide if width]
    unit_starts: list[int] = []
    cumulative: list[int] = []
    total = 0
    for index, width in wide:
        unit_starts.append(index + total)
        total += width
        cumulative.append(total)

    def convert(unit: int) -> int:
        # The last wide character starting before `unit` may contain it (round down to its
        # start); every wide character wholly before `unit` shifts it back by its extra width.
        position = bisect.bisect_right(unit_starts, unit - 1) - 1
        if position < 0:
            return unit
        if unit < unit_starts[position] + 1 + wide[position][1]:
            before = cumulative[position - 1] if position > 0 else 0
            return unit_starts[position] - before
        return unit - cumulative[position]

    return convert(offsets[0]), convert(offsets[1])


def remap_offsets(original: str, sanitized: str, offsets: Sequence[int]) -> list[int]:
    """Code point offsets into `original` -> offsets into `sanitized`.

    Sanitising keeps lines, drops invisible characters, replaces marker look-alikes one for
    one and may insert a `·`; each changed line is walked character by character.
    """
    if original == sanitized:
        return [min(max(o, 0), len(sanitized)) for o in offsets]
    orig_lines = original.split("\n")
    san_lines = sanitized.split("\n")
    if len(orig_lines) != len(san_lines):
        return [_align(original, sanitized, min(max(o, 0), len(original))) for o in offsets]
    orig_starts, san_starts = _line_starts(orig_lines), _line_starts(san_lines)
    out = []
    for offset in offsets:
        offset = min(max(offset, 0), len(original))
        line = bisect.bisect_right(orig_starts, offset) - 1
        column = offset - orig_starts[line]
        a, b = orig_lines[line], san_lines[line]
        out.append(san_starts[line] + (column if a == b else _align(a, b, column)))
    return out


def _line_starts(lines: list[str]) -> list[int]:
    starts, position = [], 0
    for line in lines:
        starts.append(position)
        position += len(line) + 1
    return starts


def _align(original: str, sanitized: str, column: int) -> int:
    i = j = 0
    while i < column and j < len(sanitized):
        a, b = original[i], sanitized[j]
        if a == b:
            i, j = i + 1, j + 1
        elif _removed(a):
            i += 1
        elif b == "\u00b7" and not _separator(a):
            j += 1  # a `·` the sanitiser inserted after a marker word's first word
        else:
            i, j = i + 1, j + 1  # a look-alike neutralised one for one
    return j


def _removed(char: str) -> bool:
    return char not in "\n\t" and unicodedata.category(char) in ("Cc", "Cf")


def _separator(char: str) -> bool:
    return char in " _-" or unicodedata.category(char) in ("Zs", "Pd", "Pc")
