from __future__ import annotations

import pytest

from gateway.search.canonical import SearchResult, canonical_url, dedup, result_id


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        pytest.param("HTTPS://Example.COM/a", "https://example.com/a", id="host-case"),
        pytest.param("https://example.com:443/a", "https://example.com/a", id="default-https-port"),
        pytest.param("http://example.com:80/a", "http://example.com/a", id="default-http-port"),
        pytest.param("https://example.com:8443/a", "https://example.com:8443/a", id="other-port"),
        pytest.param("https://example.com/a#top", "https://example.com/a", id="fragment"),
        pytest.param("https://example.com", "https://example.com/", id="empty-path"),
        pytest.param("https://example.com./a", "https://example.com/a", id="trailing-dot"),
        pytest.param("https://u:p@example.com/a", "https://example.com/a", id="userinfo"),
        pytest.param(
            "https://example.com/a?utm_source=x&id=7&UTM_Medium=y&gclid=1&fbclid=2",
            "https://example.com/a?id=7",
            id="tracking",
        ),
        pytest.param(
            "https://example.com/a?msclkid=1&mc_eid=2&ref_src=twsrc&b=2&a=1",
            "https://example.com/a?b=2&a=1",
            id="tracking-keeps-order",
        ),
        pytest.param("https://example.com/a?utm_x=1", "https://example.com/a", id="only-tracking"),
        pytest.param("https://例子.测试/路径", "https://xn--fsqu00a.xn--0zwm56d/%E8%B7%AF%E5%BE%84",
                     id="idn"),
        pytest.param("http://[::1]:80/", "http://[::1]/", id="ipv6"),
        pytest.param("https://example.com/a/../b", "https://example.com/b", id="dot-segments"),
        pytest.param("javascript:alert(1)", None, id="javascript"),
        pytest.param("ftp://example.com/", None, id="ftp"),
        pytest.param("/relative/path", None, id="relative"),
        pytest.param("https://example.com/a b", None, id="space"),
        pytest.param("https://example.com:99999/", None, id="bad-port"),
        pytest.param("https://example.com/" + "a" * 3000, None, id="too-long"),
    ],
)  # fmt: skip
def test_canonical_url(raw: str, expected: str | None) -> None:
    assert canonical_url(raw) == expected


def test_result_id_is_stable_hex16() -> None:
    rid = result_id("https://example.com/a")
    assert rid == result_id("https://example.com/a")
    assert len(rid) == 16 and int(rid, 16) >= 0
    assert rid != result_id("https://example.com/b")


def _result(url: str, title: str = "t") -> SearchResult:
    return SearchResult(result_id(url), title, url, "", "example.com", None)


@pytest.mark.parametrize(
    ("urls", "kept", "dropped"),
    [
        pytest.param(["https://a.com/1", "https://a.com/2"], ["https://a.com/1", "https://a.com/2"],
                     0, id="distinct"),
        pytest.param(["https://a.com/1", "https://b.com/", "https://a.com/1"],
                     ["https://a.com/1", "https://b.com/"], 1, id="repeat-keeps-first-rank"),
        pytest.param(["http://a.com/1", "https://b.com/", "https://a.com/1"],
                     ["https://a.com/1", "https://b.com/"], 1, id="https-twin-upgrades-in-place"),
        pytest.param(["https://a.com/1", "http://a.com/1"], ["https://a.com/1"], 1,
                     id="http-twin-dropped"),
        pytest.param(["http://a.com:8080/x", "https://a.com:8080/x"],
                     ["http://a.com:8080/x", "https://a.com:8080/x"], 0,
                     id="explicit-port-twins-are-two-origins"),
        pytest.param(["https://a.com:8443/x", "http://a.com:8443/x"],
                     ["https://a.com:8443/x", "http://a.com:8443/x"], 0,
                     id="explicit-port-https-first-not-merged"),
        pytest.param(["http://a.com:8080/x", "http://a.com:8080/x"], ["http://a.com:8080/x"], 1,
                     id="explicit-port-repeat-dropped"),
        pytest.param(["http://a.com:443/x", "https://a.com/x"],
                     ["http://a.com:443/x", "https://a.com/x"], 0,
                     id="http-on-443-is-not-https"),
        pytest.param(["https://a.com:80/x", "http://a.com/x"],
                     ["https://a.com:80/x", "http://a.com/x"], 0,
                     id="https-on-80-is-not-http"),
        pytest.param([], [], 0, id="empty"),
    ],
)  # fmt: skip
def test_dedup(urls: list[str], kept: list[str], dropped: int) -> None:
    results, count = dedup(_result(u, title=str(i)) for i, u in enumerate(urls))
    assert [r.url for r in results] == kept
    assert count == dropped
    assert all(r.id == result_id(r.url) for r in results)


def test_twin_upgrade_keeps_first_title() -> None:
    results, _ = dedup([_result("http://a.com/1", "first"), _result("https://a.com/1", "second")])
    assert results[0].title == "first"
