"""The shared request and response shapes of provider adapters: JSON objects, results under
named keys, and the failure a status maps to."""

from __future__ import annotations

import orjson
import pytest

from gateway.search.failures import ErrorClass, ProviderError
from gateway.search.providers.adapter import bearer_json, json_post, query_get
from gateway.search.providers.decoding import (
    error_text,
    keyed_failure,
    load_json_object,
    raw_results,
    unexpected_status,
)
from gateway.search.transport import ProviderResponse


def _response(status: int, body: bytes = b"") -> ProviderResponse:
    return ProviderResponse(status, {}, body)


def test_json_post_and_query_get_shapes() -> None:
    post = json_post("https://api.example/", "/search", {"q": "x"}, bearer_json("k"))
    assert (post.method, post.url, orjson.loads(post.body or b"")) == (
        "POST",
        "https://api.example/search",
        {"q": "x"},
    )
    assert dict(post.headers) == {
        "Content-Type": "application/json",
        "Accept": "application/json",
        "Authorization": "Bearer k",
    }
    get = query_get("https://api.example", "/s", {"q": "a b"}, {"Accept": "x"})
    assert (get.method, get.url, get.body) == ("GET", "https://api.example/s?q=a+b", None)


@pytest.mark.parametrize(
    ("body", "list_key", "message"),
    [
        pytest.param(b"[]", None, "expected a JSON object", id="list-not-object"),
        pytest.param(b'{"results": 5}', "results", "expected an object with a results list",
                     id="results-not-a-list"),
        pytest.param(b"[]", "results", "expected an object with a results list",
                     id="list-with-list-key"),
    ],
)  # fmt: skip
def test_load_json_object_refuses(body: bytes, list_key: str | None, message: str) -> None:
    with pytest.raises(ProviderError) as caught:
        load_json_object(_response(200, body), list_key=list_key)
    assert caught.value.error_class is ErrorClass.INVALID_RESPONSE
    assert caught.value.message == message


def test_load_json_object_accepts_a_missing_list() -> None:
    assert load_json_object(_response(200, b'{"other": 1}'), list_key="results") == {"other": 1}


def test_raw_results_takes_the_first_key_with_a_value_and_skips_bad_urls() -> None:
    entries = [
        {"t": "A", "u": "https://a.example/", "s": "", "s2": "second", "d": "2025-01-02"},
        {"t": "B", "u": "ftp://b.example/", "s": "x"},
        {"t": "C", "u": "http://c.example/", "s": "first", "s2": "second"},
    ]
    results = raw_results(entries, title="t", url="u", snippet=("s", "s2"), published="d")
    assert [(r.title, r.url, r.snippet, r.published_at) for r in results] == [
        ("A", "https://a.example/", "second", "2025-01-02T00:00:00"),
        ("C", "http://c.example/", "first", None),
    ]


@pytest.mark.parametrize(
    ("status", "error_class", "message"),
    [
        pytest.param(401, ErrorClass.HTTP_4XX, "HTTP 401: the API key was refused (bad)", id="401"),
        pytest.param(403, ErrorClass.HTTP_4XX, "HTTP 403: the API key was refused (bad)", id="403"),
        pytest.param(404, ErrorClass.HTTP_4XX, "HTTP 404: bad", id="404"),
        pytest.param(503, ErrorClass.SERVER_ERROR, "HTTP 503: bad", id="503"),
        pytest.param(204, ErrorClass.INVALID_RESPONSE, "unexpected HTTP 204: bad", id="204"),
    ],
)
def test_keyed_failure(status: int, error_class: ErrorClass, message: str) -> None:
    failure = keyed_failure(_response(status), "bad")
    assert (failure.error_class, failure.message) == (error_class, message)


def test_unexpected_status_leaves_401_to_its_class() -> None:
    failure = unexpected_status(_response(401), "bad")
    assert (failure.error_class, failure.message) == (ErrorClass.HTTP_4XX, "HTTP 401: bad")


@pytest.mark.parametrize(
    ("message", "expected"),
    [
        pytest.param("quota\nspent", "quota spent", id="message"),
        pytest.param(None, "raw body", id="body-when-no-message"),
    ],
)
def test_error_text(message: str | None, expected: str) -> None:
    assert error_text(_response(400, b"raw   body"), message) == expected
