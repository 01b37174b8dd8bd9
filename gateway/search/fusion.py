"""Reciprocal rank fusion of several ranked result lists, with domain weights.

Each result scores sum(weight(domain) / (K + rank)) over the lists it appears in (rank from
1, K = 60 as in Cormack et al.) and, when several lists were fused, carries that score; the
same page in several lists is one result (canonical twins), keeping the best-ranked copy's
text and every copy's `also_at`. `DomainWeights` maps host patterns (`example.com` exactly,
`*.example.com` subdomains only, `.example.com` both; the most specific match wins) to a
factor. One list with weights is simply re-ranked (the provider's scores kept). Pure.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace

from gateway.policy.hosts import HostPattern, PatternKind, parse_pattern
from gateway.search.canonical import SearchResult, twin_key
from gateway.search.dedupe import with_also_at

RRF_K = 60
MIN_WEIGHT = 0.0
MAX_WEIGHT = 10.0


@dataclass(frozen=True, slots=True)
class DomainWeights:
    patterns: tuple[tuple[HostPattern, float], ...] = ()

    @classmethod
    def from_mapping(cls, weights: Mapping[str, float] | None) -> DomainWeights:
        """Raises ValueError naming a bad pattern or weight (the config loader checks first)."""
        parsed = []
        for text, weight in (weights or {}).items():
            pattern = parse_pattern(text)
            if isinstance(weight, bool) or not isinstance(weight, int | float):
                raise ValueError(f"search.weights[{text!r}] must be a number")
            if not MIN_WEIGHT <= float(weight) <= MAX_WEIGHT:
                raise ValueError(
                    f"search.weights[{text!r}] must be between {MIN_WEIGHT:g} and {MAX_WEIGHT:g}"
                )
            parsed.append((pattern, float(weight)))
        # Most specific first: an exact name, then longer domains, subdomain-only before both.
        parsed.sort(key=lambda item: _specificity(item[0]))
        return cls(tuple(parsed))

    def __bool__(self) -> bool:
        return bool(self.patterns)

    def weight(self, host: str) -> float:
        for pattern, weight in self.patterns:
            if pattern.matches(host):
                return weight
        return 1.0


def _specificity(pattern: HostPattern) -> tuple[bool, int, bool]:
    exact = pattern.kind is PatternKind.EXACT
    return (not exact, -len(pattern.domain), pattern.kind is PatternKind.DOMAIN_AND_SUBDOMAINS)


def fuse(
    lists: Sequence[Sequence[SearchResult]], weights: DomainWeights = DomainWeights()
) -> tuple[list[SearchResult], int]:
    """One ranking from several, best first, and how many entries were folded into another
    (the same page found by more than one list)."""
    scores: dict[str, float] = {}
    best: dict[str, tuple[int, int]] = {}  # key -> (rank, list index) of the copy kept
    chosen: dict[str, SearchResult] = {}
    folded = 0
    for index, ranked in enumerate(lists):
        for rank, result in enumerate(ranked, start=1):
            key = twin_key(result.url)
            share = weights.weight(result.domain) / (RRF_K + rank)
            if key not in chosen:
                scores[key] = share
                best[key] = (rank, index)
                chosen[key] = result
                continue
            folded += 1
            scores[key] += share
            kept = chosen[key]
            if (rank, index) < best[key]:
                best[key] = (rank, index)
                chosen[key] = with_also_at(result, (*kept.also_at, *result.also_at))
            else:
                chosen[key] = with_also_at(kept, result.also_at)
    order = sorted(chosen, key=lambda key: (-scores[key], best[key]))
    if len(lists) == 1:  # re-ranked by weight only: the provider's own score stays
        return [chosen[key] for key in order], folded
    return [replace(chosen[key], score=json_number(scores[key], 6)) for key in order], folded


def json_number(value: float, places: int) -> float:
    """`value` rounded, an integral one as an int: written the same by orjson and by RFC 8785
    (`3`, not `3.0`), so digests over results stay canonical."""
    rounded = round(value, places)
    return int(rounded) if rounded.is_integer() else rounded
