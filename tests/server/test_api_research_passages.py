"""POST /v1/research's passages end to end: their offsets into the pages' whole text, their
ranking, their envelope and its signature."""

from __future__ import annotations

import functools
import hashlib
from urllib.parse import quote

import orjson
import pytest

from gateway.provenance.dsse import DSSEError, generate_keypair, load_public_key
from gateway.provenance.envelope import verify_response
from gateway.provenance.markers import unwrap
from gateway.tools.responses import RESEARCH_RESPONSE
from tests.conformance import assert_conforms
from tests.server.conftest import policies_for


@pytest.fixture
def start(search_gateways, upstream):
    return functools.partial(search_gateways, policies=policies_for(upstream.port, agent={}))


LONG_TEXT = (
    "Notes 😀 on the egress gateway 🚀, written with astral characters first.\n\n"
    "## Installing\n\n" + "Install it with pip. " * 8 + "\n\n"
    "## Timeouts\n\nEvery provider call has a timeout, and the whole search a deadline: "
    "the deadline bounds retries too. 超时 和 截止时间 也适用。\n\n"
    "## Other things\n\n" + "Unrelated words about cats. " * 8
)


def plain(value, nonce):
    return unwrap(value, nonce) if value is not None else None


@pytest.mark.parametrize("mode", ["summary", "full"])
async def test_passage_offsets_slice_the_page_text_exactly(start, upstream, mode) -> None:
    port = upstream.port
    hits = [
        ("Notes", f"http://site.example.com:{port}/text?body={quote(LONG_TEXT)}", "s"),
        ("Test page", f"http://other.example.com:{port}/page", "s"),
    ]
    gateway = await start(hits=hits)
    status, body = await gateway.post(
        "/v1/research", "agent", query="deadline timeout 截止时间", fetch_top_n=2,
        extract_mode=mode, max_page_length=10,
    )  # fmt: skip
    assert status == 200, body
    assert_conforms(RESEARCH_RESPONSE, body)
    env = body["envelope"]
    assert env["tool"] == "Research" and env["passages"] == len(body["passages"]) >= 1
    assert env["search_envelope"] == body["search"]["envelope"]["id"]
    assert env["pages"] == [page["envelope"]["id"] for page in body["pages"]]
    best = body["passages"][0]
    assert best["rank"] == 1 and best["page_index"] == 0
    assert plain(best["heading"], env["marker"]) == "Timeouts"
    assert [p["rank"] for p in body["passages"]] == list(range(1, len(body["passages"]) + 1))
    assert [p["score"] for p in body["passages"]] == sorted(
        (p["score"] for p in body["passages"]), reverse=True
    )
    # The page's whole text, as WebFetch returns it uncut, holds each passage at its offsets
    # (code points: the emoji before them count one each, not two as in UTF-16).
    for passage in body["passages"]:
        page = body["pages"][passage["page_index"]]
        status, fetched = await gateway.post(
            "/v1/fetch", "agent", url=page["envelope"]["final_url"], max_chars=50000,
            extract_mode="markdown" if mode == "summary" else "auto",
        )  # fmt: skip
        assert status == 200
        whole = unwrap(fetched["content"], fetched["envelope"]["marker"])
        if page["envelope"]["content_type"].startswith("text/html") and mode == "full":
            continue  # the whole-page Markdown of Research's full mode has no WebFetch mode
        text = unwrap(passage["text"], env["marker"])
        assert whole[passage["char_start"] : passage["char_end"]] == text
        assert passage["url"] == page["envelope"]["final_url"]
    assert "deadline" in unwrap(best["text"], env["marker"])
    # Pages are still cut as asked; the passages come from their whole text.
    assert all(page["envelope"]["chars"] <= 10 for page in body["pages"])
    # content_sha256 covers the passages with text, title and heading unwrapped.
    unwrapped = [
        {**p, **{k: plain(p[k], env["marker"]) for k in ("text", "title", "heading")}}
        for p in body["passages"]
    ]
    digest = hashlib.sha256(orjson.dumps(unwrapped, option=orjson.OPT_SORT_KEYS)).hexdigest()
    assert env["content_sha256"] == digest


@pytest.mark.parametrize("mode", ["summary", "full"])
async def test_passages_slice_the_pages_own_uncut_content(start, upstream, mode) -> None:
    """The offsets index the text the page itself returns as `content`, in the call's mode."""
    gateway = await start()
    status, body = await gateway.post(
        "/v1/research", "agent", query="second paragraph", fetch_top_n=1, extract_mode=mode
    )
    assert status == 200
    (page,) = body["pages"]
    whole = unwrap(page["content"], page["envelope"]["marker"])
    assert page["envelope"]["truncated"] is False
    (best, *_) = body["passages"]
    text = unwrap(best["text"], body["envelope"]["marker"])
    assert text == whole[best["char_start"] : best["char_end"]]
    assert text.startswith("Second paragraph.")  # short paragraphs are joined
    assert unwrap(best["heading"], body["envelope"]["marker"]) == "Part two"
    assert unwrap(best["title"], body["envelope"]["marker"]) == "Test page"


async def test_answer_with_pages_has_no_passages(start) -> None:
    gateway = await start()
    status, body = await gateway.post(
        "/v1/research", "agent", query="x", fetch_top_n=1, answer_with="pages"
    )
    assert status == 200 and set(body) == {"search", "pages", "note", "cached"}


async def test_max_passages_and_no_match(start) -> None:
    gateway = await start()
    status, body = await gateway.post(
        "/v1/research", "agent", query="paragraph", fetch_top_n=2, max_passages=1
    )
    assert status == 200 and len(body["passages"]) == 1
    status, body = await gateway.post("/v1/research", "agent", query="zebra", fetch_top_n=2)
    assert status == 200 and body["passages"] == [] and body["envelope"]["passages"] == 0


async def test_signed_research_covers_its_passages(start, tmp_path) -> None:
    private, public, _ = generate_keypair(tmp_path / "keys")
    gateway = await start(signing_key=str(private))
    status, body = await gateway.post("/v1/research", "agent", query="second paragraph")
    assert status == 200 and "dsse" in body and body["passages"]
    verify_response(body, [load_public_key(public)])
    forged = {**body, "passages": [{**body["passages"][0], "score": 99.0}]}
    with pytest.raises(DSSEError, match="passages"):
        verify_response(forged, [load_public_key(public)])


async def test_long_texts_are_ranked_off_the_loop_with_the_same_answer(start, monkeypatch) -> None:
    from gateway.tools import research

    gateway = await start()
    fields = {"query": "second paragraph", "fetch_top_n": 2}
    status, inline = await gateway.post("/v1/research", "agent", **fields)
    monkeypatch.setattr(research, "INLINE_RANK_CHARS", 0)
    status2, threaded = await gateway.post("/v1/research", "agent", **fields)
    assert status == status2 == 200
    assert spans(inline) == spans(threaded) and inline["passages"]


def spans(body) -> list[tuple]:
    return [(p["page_index"], p["char_start"], p["char_end"], p["score"]) for p in body["passages"]]
