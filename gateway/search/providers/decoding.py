"""Shared reading of provider responses: status classes, Retry-After, JSON, text, dates.

Everything a provider sends is hostile input: every read is bounded, every shape checked, and
nothing here raises anything but `ProviderError`.
"""

from __future__ import annotations

import html
import math
import re
from collections.abc import Iterable, Iterator, Mapping
from datetime import UTC, datetime
from email.utils import parsedate_to_datetime
from typing import Any

import orjson
from lxml import etree
from lxml import html as lxml_html

from gateway.search.failures import ErrorClass, ProviderError
from gateway.search.query import RawResult, SearchQuery
from gateway.search.transport import MAX_RETRY_AFTER, ProviderResponse, retry_after_seconds

MAX_PARSED_RESULTS = 50
MAX_TITLE_CHARS = 300
MAX_SNIPPET_CHARS = 1000
MAX_MESSAGE_CHARS = 200
MAX_ANSWER_CHARS = 4000  # a keyed provider's short answer (Tavily's, an answer box)
# A quota that is spent will not come back within seconds: cool for the longest allowed time.
QUOTA_RETRY_AFTER = MAX_RETRY_AFTER
HTML_USER_AGENT = "Mozilla/5.0 (X11; Linux x86_64; rv:128.0) Gecko/20100101 Firefox/128.0"

_TAG = re.compile(r"<[^>]{0,500}>")
_INVISIBLE = re.compile(
    r"[\x00-\x08\x0b-\x1f\x7f-\x9f\u200b\u200e\u200f\u202a-\u202e\u2066-\u2069]"
)
_SPACE = re.compile(r"\s+")
_MONTH_DAY_YEAR = re.compile(r"^([A-Za-z]{3,9})\.? (\d{1,2}), (\d{4})$")


def failure_for_status(
    response: ProviderResponse, detail: str | None = None
) -> ProviderError | None:
    """The generic class of a non-2xx status; None for success."""
    status = response.status
    if 200 <= status < 300:
        return None
    message = f"HTTP {status}" + (f": {detail}" if detail else "")
    if status == 429:
        return ProviderError(ErrorClass.RATE_LIMITED, message, retry_after_seconds(response))
    if status >= 500:
        return ProviderError(ErrorClass.SERVER_ERROR, message)
    if 300 <= status < 400:
        where = response.headers.get("Location", "")
        return ProviderError(
            ErrorClass.INVALID_RESPONSE,
            f"unexpected redirect (HTTP {status}) to {excerpt(where, 100)!r}; "
            "provider requests never follow redirects",
        )
    return ProviderError(ErrorClass.HTTP_4XX, message)


def unexpected_status(response: ProviderResponse, text: str) -> ProviderError:
    """The failure for a status other than 200: by its class, a 2xx one being unexpected."""
    return failure_for_status(response, text) or ProviderError(
        ErrorClass.INVALID_RESPONSE, f"unexpected HTTP {response.status}: {text}"
    )


def keyed_failure(response: ProviderResponse, text: str) -> ProviderError:
    """As `unexpected_status`, with 401 and 403 read as a refused API key."""
    if response.status in (401, 403):
        return ProviderError(
            ErrorClass.HTTP_4XX, f"HTTP {response.status}: the API key was refused ({text})"
        )
    return unexpected_status(response, text)


def error_text(response: ProviderResponse, message: Any) -> str:
    """The provider's own error message as an excerpt, or else an excerpt of the body."""
    return excerpt(message) if message is not None else excerpt(response.body)


def load_json(response: ProviderResponse) -> Any:
    try:
        return orjson.loads(response.body)
    except orjson.JSONDecodeError:
        raise ProviderError(
            ErrorClass.INVALID_RESPONSE,
            f"malformed JSON (HTTP {response.status}, {len(response.body)} bytes)",
        ) from None


def load_json_object(response: ProviderResponse, *, list_key: str | None = None) -> dict[str, Any]:
    """The body as a JSON object (whose `list_key`, when there, must be a list)."""
    data = load_json(response)
    if list_key is not None:
        if not isinstance(data, dict) or not isinstance(data.get(list_key, []), list):
            raise ProviderError(
                ErrorClass.INVALID_RESPONSE, f"expected an object with a {list_key} list"
            )
    elif not isinstance(data, dict):
        raise ProviderError(ErrorClass.INVALID_RESPONSE, "expected a JSON object")
    return data


def load_json_or_none(response: ProviderResponse) -> Any:
    """For error bodies, which may be JSON, plain text or empty."""
    try:
        return orjson.loads(response.body)
    except orjson.JSONDecodeError:
        return None


def load_html(response: ProviderResponse, *, encoding: str | None = None) -> Any:
    """An lxml HTML tree (of a body in `encoding`, when the engine always sends one; else as
    the page declares); an empty or unparseable page is an invalid response."""
    try:
        if encoding is not None:
            parser = lxml_html.HTMLParser(encoding=encoding)
            return lxml_html.document_fromstring(response.body, parser=parser)
        return lxml_html.document_fromstring(response.body)
    except (etree.ParserError, ValueError) as exc:
        raise ProviderError(
            ErrorClass.INVALID_RESPONSE, f"unparseable HTML ({type(exc).__name__})"
        ) from None


def dig(value: Any, *path: str) -> Any:
    """value[p0][p1]…, or None as soon as a step is missing or not an object."""
    for key in path:
        if not isinstance(value, Mapping):
            return None
        value = value.get(key)
    return value


def items(value: Any) -> Iterator[Mapping[str, Any]]:
    """The object entries of a JSON list, at most MAX_PARSED_RESULTS of them."""
    if not isinstance(value, list):
        return
    for entry in value[:MAX_PARSED_RESULTS]:
        if isinstance(entry, Mapping):
            yield entry


Keys = str | tuple[str, ...]  # one key, or several of which the first with a value counts


def raw_results(
    entries: Iterable[Mapping[str, Any]],
    *,
    title: Keys,
    url: Keys,
    snippet: Keys,
    published: Keys = (),
    score: Keys = (),
) -> list[RawResult]:
    """A RawResult from each entry that has an absolute http(s) URL, its values under the
    given keys."""
    found = (
        raw_result(
            pick(e, title), pick(e, url), pick(e, snippet), pick(e, published), pick(e, score)
        )
        for e in entries
    )
    return [result for result in found if result]


def pick(entry: Mapping[str, Any], keys: Keys) -> Any:
    if isinstance(keys, str):
        return entry.get(keys)
    value = None
    for key in keys:
        value = value or entry.get(key)
    return value


def raw_result(
    title: Any, url: Any, snippet: Any, published: Any = None, score: Any = None
) -> RawResult | None:
    """A RawResult from provider values, or None when the URL is not an absolute http(s) one."""
    if not isinstance(url, str) or not re.match(r"(?i)^https?://", url.strip()):
        return None
    clean_title = clean_text(title, MAX_TITLE_CHARS)
    return RawResult(
        title=clean_title or excerpt(url, MAX_TITLE_CHARS),
        url=url.strip(),
        snippet=clean_text(snippet, MAX_SNIPPET_CHARS),
        published_at=parse_date(published),
        score=read_score(score),
    )


def read_score(value: Any) -> float | None:
    """A provider's relevance score when it is a finite number, rounded to 4 places (an
    integral one as an int, so orjson and RFC 8785 write it alike)."""
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        return None
    if abs(value) >= 1e15:
        return None  # no real score is that large; its JSON forms would differ
    rounded = round(float(value), 4)
    return int(rounded) if rounded.is_integer() else rounded


def read_count(value: Any) -> int | None:
    """A provider's estimate of how many results there are: a non-negative integer, or a
    string of digits (with thousands separators); None otherwise."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value if value >= 0 else None
    if isinstance(value, str):
        digits = re.sub(r"[,.\s\u00a0\u202f]", "", value.strip())
        if digits.isascii() and digits.isdigit() and len(digits) <= 15:
            return int(digits)
    return None


def clean_text(value: Any, limit: int) -> str:
    """Markup stripped, entities decoded, whitespace collapsed, capped at `limit` characters."""
    if not isinstance(value, str):
        return ""
    text = html.unescape(_TAG.sub("", value[: limit * 8]))
    text = _SPACE.sub(" ", _INVISIBLE.sub("", text)).strip()
    return text[:limit]


def node_text(node: Any) -> str:
    # Joined without spaces: markup inside a word ("foo<b>bar</b>") must not split it.
    return "".join(node.itertext()) if node is not None else ""


def excerpt(value: Any, limit: int = MAX_MESSAGE_CHARS) -> str:
    """A short, printable, one-line excerpt of an upstream string or bytes, for messages."""
    if isinstance(value, bytes):
        value = value[: limit * 4].decode("utf-8", "replace")
    if not isinstance(value, str):
        value = str(value)
    text = _SPACE.sub(" ", _INVISIBLE.sub("", value[: limit * 4])).strip()
    return text if len(text) <= limit else text[: limit - 1] + "…"


def parse_date(value: Any) -> str | None:
    """ISO 8601 (UTC when the source had a zone) from the formats providers use; else None."""
    if not isinstance(value, str) or not value.strip() or len(value) > 64:
        return None
    text = value.strip()
    moment: datetime | None = None
    try:
        moment = datetime.fromisoformat(text.replace("Z", "+00:00").replace(" ", "T", 1))
    except ValueError:
        moment = None
    if moment is None:
        try:
            moment = parsedate_to_datetime(text)  # RFC 1123 ("Mon, 03 Feb 2025 10:15:00 GMT")
        except (TypeError, ValueError, IndexError):
            moment = None
    if moment is None and (match := _MONTH_DAY_YEAR.match(text)):
        for fmt in ("%b %d %Y", "%B %d %Y"):
            try:
                return datetime.strptime(" ".join(match.groups()), fmt).date().isoformat()
            except ValueError:
                continue
        return None
    if moment is None:
        return None
    if moment.tzinfo is None:
        return moment.isoformat(timespec="seconds")
    return moment.astimezone(UTC).isoformat(timespec="seconds").replace("+00:00", "Z")


def query_with_site_operators(query: SearchQuery, *, or_supported: bool) -> str:
    """The query text plus `site:` / `-site:` operators, for providers without domain params.

    Several wanted domains become `(site:a OR site:b)` only where the engine understands OR;
    elsewhere the domain filter applied to the results does the work.
    """
    parts = [query.query]
    wanted = query.wanted_domains
    if len(wanted) == 1:
        parts.append(f"site:{wanted[0]}")
    elif wanted and or_supported:
        parts.append("(" + " OR ".join(f"site:{d}" for d in wanted) + ")")
    parts.extend(f"-site:{d}" for d in query.exclude_domains)
    return " ".join(parts)
