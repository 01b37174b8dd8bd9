"""What a search asks for (`SearchQuery`) and what a provider returns (`RawResult`).

Validation happens here, once: every problem is an `InvalidRequestError` naming the field.
The Chinese-year rewrite (`rewrite_chinese_year`) turns "2026年 大模型" into "大模型" plus a
2026-01-01..2026-12-31 window, unless the caller already chose a time filter.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Mapping
from dataclasses import dataclass, replace
from datetime import date
from enum import StrEnum
from typing import Any

from gateway.errors import InvalidRequestError
from gateway.search.region import Region, parse_region

MAX_QUERY_CHARS = 400  # Brave's limit, the strictest of the providers
MAX_RESULTS = 20
DEFAULT_RESULTS = 10
MAX_DOMAIN_FILTERS = 5

_LABEL = re.compile(r"^(?!-)[a-z0-9-]{1,63}(?<!-)$")
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")


class Freshness(StrEnum):
    DAY = "day"
    WEEK = "week"
    MONTH = "month"
    YEAR = "year"


@dataclass(frozen=True, slots=True)
class SearchQuery:
    """A validated search; construct with `SearchQuery.from_fields` or directly (both validate)."""

    query: str
    max_results: int = DEFAULT_RESULTS
    region: str | None = None  # "cn-zh" or "cn": a country, then an optional language
    freshness: Freshness | None = None
    time_range: tuple[date, date] | None = None  # wins over freshness
    site: str | None = None
    include_domains: tuple[str, ...] = ()
    exclude_domains: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        query = _clean_query(self.query)
        object.__setattr__(self, "query", query)
        if isinstance(self.max_results, bool) or not isinstance(self.max_results, int):
            raise _invalid("max_results", "must be an integer")
        if not 1 <= self.max_results <= MAX_RESULTS:
            raise _invalid("max_results", f"must be between 1 and {MAX_RESULTS}")
        if self.region is not None:
            parsed = parse_region(self.region)  # wt-wt (no region) is None
            object.__setattr__(self, "region", parsed.code if parsed else None)
        if self.freshness is not None:
            object.__setattr__(self, "freshness", _clean_freshness(self.freshness))
        if self.time_range is not None:
            start, end = self.time_range
            if start > end:
                raise _invalid("time_range", "starts after it ends")
        if self.site is not None:
            object.__setattr__(self, "site", normalise_domain(self.site, "site"))
        for name in ("include_domains", "exclude_domains"):
            object.__setattr__(self, name, _clean_domains(getattr(self, name), name))

    @classmethod
    def from_fields(cls, fields: Mapping[str, Any]) -> SearchQuery:
        """Build from the wire fields of 5.2; other keys (`provider`, …) are the caller's."""
        if "query" not in fields or fields["query"] is None:
            raise _invalid("query", "is required")
        time_range = fields.get("time_range")
        return cls(
            query=fields["query"],
            max_results=fields.get("max_results", DEFAULT_RESULTS),
            region=fields.get("region"),
            freshness=fields.get("freshness"),
            time_range=parse_time_range(time_range) if time_range is not None else None,
            site=fields.get("site"),
            include_domains=_as_tuple(fields.get("include_domains"), "include_domains"),
            exclude_domains=_as_tuple(fields.get("exclude_domains"), "exclude_domains"),
        )

    @property
    def region_parts(self) -> Region | None:
        return parse_region(self.region) if self.region else None

    @property
    def language(self) -> str | None:
        """The language the caller named (None for a bare country or no region)."""
        parts = self.region_parts
        return parts.language if parts else None

    @property
    def search_language(self) -> str | None:
        """The language named, else the region's country's usual language."""
        parts = self.region_parts
        return parts.search_language if parts else None

    @property
    def country(self) -> str | None:
        parts = self.region_parts
        return parts.country if parts else None

    @property
    def has_time_filter(self) -> bool:
        return self.freshness is not None or self.time_range is not None

    @property
    def wanted_domains(self) -> tuple[str, ...]:
        """Domains results must fall under for the provider operators (site first, narrower)."""
        return (self.site,) if self.site else self.include_domains

    def cache_fields(self) -> dict[str, Any]:
        """Everything that changes the answer, as plain JSON values."""
        return {
            "query": self.query,
            "max_results": self.max_results,
            "region": self.region,
            "freshness": str(self.freshness) if self.freshness else None,
            "time_range": [d.isoformat() for d in self.time_range] if self.time_range else None,
            "site": self.site,
            "include_domains": list(self.include_domains),
            "exclude_domains": list(self.exclude_domains),
        }


@dataclass(frozen=True, slots=True)
class RawResult:
    """One result as a provider gave it, text already cleaned of markup."""

    title: str
    url: str
    snippet: str
    published_at: str | None = None  # ISO 8601 when the provider's date parsed, else None
    score: float | None = None  # the provider's own relevance score, where it gives one


def parse_time_range(value: Any) -> tuple[date, date]:
    if isinstance(value, tuple | list) and len(value) == 2:
        start, end = value
        if isinstance(start, date) and isinstance(end, date):
            return start, end
    if not isinstance(value, str):
        raise _invalid("time_range", "must be a string YYYY-MM-DD..YYYY-MM-DD")
    parts = value.strip().split("..")
    if len(parts) != 2:
        raise _invalid("time_range", "must look like YYYY-MM-DD..YYYY-MM-DD")
    try:
        start, end = (date.fromisoformat(p) for p in parts if re.fullmatch(r"\d{4}-\d\d-\d\d", p))
    except ValueError:
        raise _invalid("time_range", "must hold two valid dates YYYY-MM-DD..YYYY-MM-DD") from None
    if start > end:
        raise _invalid("time_range", "starts after it ends")
    return start, end


def normalise_domain(value: Any, field: str) -> str:
    """A bare domain: lower case, no trailing dot, A-labels; no scheme, port or path."""
    if not isinstance(value, str):
        raise _invalid(field, "must be a domain name string")
    text = value.strip().lower().rstrip(".")
    if text.startswith("*."):
        text = text[2:]  # "*.example.com" means the same here: a domain and its subdomains
    try:
        ascii_name = text.encode("idna").decode("ascii") if text else ""
    except UnicodeError:
        raise _invalid(field, f"{value[:80]!r} is not a valid domain name") from None
    labels = ascii_name.split(".")
    if not ascii_name or len(ascii_name) > 253 or not all(_LABEL.match(lb) for lb in labels):
        raise _invalid(field, f"{value[:80]!r} is not a valid domain name")
    return ascii_name


def host_within(host: str, domain: str) -> bool:
    """True when host is the domain or one of its subdomains."""
    return host == domain or host.endswith("." + domain)


# The Chinese-year rewrite. Decided:
# - a year is four digits (ASCII, full-width, or 〇/零一二三四五六七八九) followed by 年,
#   between 1900 and 2099;
# - rewritten only when the query holds exactly one such year, and the year is not followed by
#   a month or day (2026年3月: a narrower intent), 代 (a decade), 度 (a fiscal year, reported
#   later), 前/后/後/以 (before, after, since) or 初 (early in the year, or 初中, a school), and
#   something else remains of the query;
# - 底/末 right after 年 (the end of the year) go with the year: the window still covers them;
#   中 does not, since 2026年中国 is far more often "China" than "mid-year";
# - with freshness or time_range from the caller, nothing is rewritten: their window stands
#   and the year stays a keyword (query_year still reports it).
_CN_DIGITS = {c: str(i) for i, c in enumerate("零一二三四五六七八九")} | {"〇": "0", "○": "0"}
_YEAR = re.compile(
    r"(?<![0-9〇○零一二三四五六七八九十])"
    r"(?P<digits>[0-9]{4}|[〇○零一二三四五六七八九]{4})\s*年(?P<part>[底末])?"
)
_BLOCKING_NEXT = re.compile(r"^\s*(?:[0-9〇○零一二三四五六七八九十]|[代度前后後以初])")


@dataclass(frozen=True, slots=True)
class YearRewrite:
    query: SearchQuery
    query_rewritten: bool
    query_year: int | None
    freshness_auto_inferred: bool


def rewrite_chinese_year(query: SearchQuery) -> YearRewrite:
    text = unicodedata.normalize("NFKC", query.query)  # full-width digits to ASCII
    matches = list(_YEAR.finditer(text))
    if len(matches) != 1:
        return YearRewrite(query, False, None, False)
    match = matches[0]
    digits = "".join(_CN_DIGITS.get(c, c) for c in match.group("digits"))
    year = int(digits)
    after = text[match.end() :]
    if not 1900 <= year <= 2099 or (match.group("part") is None and _BLOCKING_NEXT.match(after)):
        return YearRewrite(query, False, None, False)
    if query.has_time_filter:
        return YearRewrite(query, False, year, False)
    remaining = re.sub(r"\s+", " ", text[: match.start()] + " " + after).strip()
    if not remaining:
        return YearRewrite(query, False, year, False)
    window = (date(year, 1, 1), date(year, 12, 31))
    return YearRewrite(replace(query, query=remaining, time_range=window), True, year, True)


def _clean_query(value: Any) -> str:
    if not isinstance(value, str):
        raise _invalid("query", "must be a string")
    if _CONTROL.search(value.replace("\t", " ").replace("\n", " ").replace("\r", " ")):
        raise _invalid("query", "must not contain control characters")
    text = re.sub(r"\s+", " ", value).strip()
    if not text:
        raise _invalid("query", "must not be empty")
    if len(text) > MAX_QUERY_CHARS:
        raise _invalid("query", f"must be at most {MAX_QUERY_CHARS} characters")
    return text


def _clean_freshness(value: Any) -> Freshness:
    try:
        return Freshness(value)
    except ValueError:
        raise _invalid("freshness", "must be one of day, week, month, year") from None


def _as_tuple(value: Any, field: str) -> tuple[Any, ...]:
    if value is None:
        return ()
    if isinstance(value, str) or not isinstance(value, list | tuple):
        raise _invalid(field, "must be a list of domain names")
    return tuple(value)


def _clean_domains(values: Any, field: str) -> tuple[str, ...]:
    values = _as_tuple(values, field)
    if len(values) > MAX_DOMAIN_FILTERS:
        raise _invalid(field, f"must hold at most {MAX_DOMAIN_FILTERS} domains")
    return tuple(dict.fromkeys(normalise_domain(v, field) for v in values))


def _invalid(field: str, problem: str) -> InvalidRequestError:
    return InvalidRequestError(f"{field}: {problem}")
