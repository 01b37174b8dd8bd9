"""Reciprocal rank fusion with domain weights."""

from __future__ import annotations

import pytest

from gateway.policy.hosts import PatternError
from gateway.search.canonical import SearchResult, result_id
from gateway.search.fusion import RRF_K, DomainWeights, fuse


def result(url: str, mirrors: tuple[str, ...] = ()) -> SearchResult:
    host = url.split("/")[2]
    return SearchResult(result_id(url), f"title {url}", url, "", host, None, mirrors)


A, B, C, D = (f"https://{h}.example.org/" for h in "abcd")


def test_pages_found_by_several_phrasings_rise() -> None:
    fused, folded = fuse([[result(A), result(B)], [result(C), result(B)], [result(D), result(B)]])
    assert [r.url for r in fused] == [B, A, C, D]
    assert folded == 2


def test_one_list_without_weights_keeps_its_order() -> None:
    fused, folded = fuse([[result(u) for u in (A, B, C)]])
    assert [r.url for r in fused] == [A, B, C] and folded == 0


def test_weights_by_pattern_most_specific_first() -> None:
    weights = DomainWeights.from_mapping(
        {".example.org": 0.5, "c.example.org": 3.0, "*.python.org": 1.3}
    )
    assert weights.weight("c.example.org") == 3.0
    assert weights.weight("x.example.org") == 0.5 and weights.weight("example.org") == 0.5
    assert weights.weight("docs.python.org") == 1.3 and weights.weight("python.org") == 1.0
    fused, _ = fuse([[result(A), result(B), result(C)]], weights)
    assert [r.url for r in fused] == [C, A, B]
    # c at rank 3 with 3.0 beats a at rank 1 with 0.5: 3/(K+3) > 0.5/(K+1)
    assert 3.0 / (RRF_K + 3) > 0.5 / (RRF_K + 1)


def test_http_and_https_twins_are_one_and_keep_mirrors() -> None:
    fused, folded = fuse(
        [[result("http://a.example.org/", ("https://m.example.net/",))], [result(A)]]
    )
    assert len(fused) == 1 and folded == 1
    assert fused[0].also_at == ("https://m.example.net/",)


@pytest.mark.parametrize(
    ("weights", "error"),
    [({"https://x.org": 1.0}, PatternError), ({"x.org": 11}, ValueError),
     ({"x.org": True}, ValueError)],
)  # fmt: skip
def test_bad_weights(weights, error) -> None:
    with pytest.raises(error):
        DomainWeights.from_mapping(weights)
