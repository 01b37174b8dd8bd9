"""DLP in audit records: the `dlp` block, and URLs, destination names, search queries and
error messages with what a detector matches replaced, never a recoverable part of it."""

from __future__ import annotations

import json
from urllib.parse import quote

import pytest

from gateway.policy.dlp import DlpMode, DlpSettings
from gateway.policy.dlprecords import mark_record, redact_url
from gateway.policy.urls import parse_url
from tests.policy.test_dlp import CANARY, ENFORCE, SAMPLES


def test_redaction_replaces_the_whole_piece() -> None:
    key = SAMPLES["aws_access_key"]
    url = f"https://x.example/search?lang=en&q=my+key+{key}+please&page=2"
    assert (
        redact_url(ENFORCE, url)
        == "https://x.example/search?lang=en&q=[REDACTED:dlp.aws_access_key]&page=2"
    )
    label = "k3j9x2m8q7w1z5v4b6n0c2l8p3r7t9y1"
    assert (
        redact_url(DlpSettings(mode=DlpMode.REPORT), f"https://{label}.evil.example/?id=7")
        == "https://[REDACTED:dlp.entropy].evil.example/?id=7"
    )


def test_mark_record_adds_the_block_and_redacts_urls_and_queries() -> None:
    key = SAMPLES["stripe_key"]
    found = ENFORCE.scan_url(f"https://x.example/?k={key}")
    record = {
        "url": {"original": f"https://x.example/?k={key}", "full": f"https://y.example/{key}"},
        "search": {"query": f"find {key}", "queries": [f"a {key}", "b"]},
    }
    mark_record(record, ENFORCE, found)
    assert key not in json.dumps(record)
    assert record["dlp"] == {
        "detector": "stripe_key",
        "location": "query:k",
        "fingerprint": ENFORCE.fingerprint("stripe_key", key),
    }
    off = {"url": {"original": f"https://x.example/?k={key}"}}
    mark_record(off, DlpSettings(), None)
    assert key in off["url"]["original"]  # DLP off: the record is left as it is


def test_a_host_label_finding_leaves_no_normalised_copy() -> None:
    """The final URL and the destination name are normalised (lower case): a key id in a
    host label would no longer look like one there, so the label itself goes."""
    key = SAMPLES["aws_access_key"]
    found = ENFORCE.scan_url(f"https://{key}.collector.example:8443/x")
    assert found is not None and found.location == "host_label[0]"
    record = {
        "url": {
            "original": f"https://{key}.collector.example:8443/x",
            "full": f"https://{key.lower()}.collector.example:8443/x",
        },
        "destination": {"domain": f"{key.lower()}.collector.example"},
    }
    mark_record(record, ENFORCE, found)
    shown = json.dumps(record).lower()
    assert key.lower() not in shown
    assert record["url"]["full"] == (
        "https://[REDACTED:dlp.aws_access_key].collector.example:8443/x"
    )
    assert record["destination"]["domain"] == "[REDACTED:dlp.aws_access_key].collector.example"


def test_mark_record_redacts_error_messages() -> None:
    record = {"error": {"code": "invalid_request", "message": f"invalid URL: {CANARY}%zz"}}
    mark_record(record, ENFORCE, None)
    assert CANARY not in record["error"]["message"]
    assert "[REDACTED:dlp.canary]" in record["error"]["message"]


# --- a secret never survives redaction: the whole piece goes, with its companion --------------

AWS_SECRET_KEY = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"  # the companion of an AWS key id
PASSWORD = "Tr0ub4dor-and-3"
# One companion per detector, written beside its secret the way they travel together; JWT:
# the three parts are one token, and a part on its own is a recoverable piece too.
COMPANIONS = {
    "aws_access_key": (f"{SAMPLES['aws_access_key']}:{AWS_SECRET_KEY}", [AWS_SECRET_KEY]),
    "basic_auth": (f"https://deploy:{PASSWORD}@ci.example", [PASSWORD, "deploy:"]),
    "jwt": (SAMPLES["jwt"], SAMPLES["jwt"].split(".")),
}


def _secret_pieces(secret: str) -> list[str]:
    """What must not be in a record: the secret, each of its 8-character windows (a
    recoverable part), and its percent-decoded form's."""
    core = secret.split()[-1]
    return [core[i : i + 8] for i in range(0, max(1, len(core) - 7), 4)]


def _record(url: str, text: str) -> dict:
    return {
        # `full` as the parser gives it: host in lower case, the rest requoted.
        "url": {"original": url, "full": str(parse_url(url).url)},
        "redirects": [{"status": 302, "url": url}],
        "destination": {"domain": "x.example"},
        "error": {"code": "upstream_error", "message": f"could not fetch {text!r}: reset"},
        "search": {"query": f"find {text} now", "queries": [f"a {text} b", "plain"]},
    }


ALL_SECRETS = {**SAMPLES, "canary": CANARY, "employee_id": "EMP-20251130"}


@pytest.mark.parametrize("detector", sorted(ALL_SECRETS))
def test_dlp_redacts_the_whole_piece_a_secret_sits_in(detector: str) -> None:
    secret = ALL_SECRETS[detector]
    # In the middle of a longer value: text on both sides, no delimiter of a URL between.
    value = f"before.{secret}.after"
    in_url = quote(value, safe="")
    for url in (
        f"https://x.example/search?lang=en&q={in_url}&page=2",
        f"https://x.example/files/{in_url}/raw",
        f"https://x.example/?{in_url}=1",
    ):
        found = ENFORCE.scan_url(url)
        assert found is not None and found.detector == detector, (url, found)
        record = _record(url, value)
        mark_record(record, ENFORCE, found)
        shown = json.dumps(record)
        for piece in [*_secret_pieces(secret), "before.", ".after"]:
            # The secret's neighbours in the same piece go too: nothing of the value is left.
            assert piece not in shown.split("lang=en")[-1].replace("find ", ""), (piece, shown)
        assert f"[REDACTED:dlp.{detector}]" in record["url"]["original"]
        assert record["url"]["original"].count("[REDACTED") == 1
        assert (
            "lang=en" in record["url"]["original"]
            or "/raw" in record["url"]["original"]
            or ("=1" in record["url"]["original"])
        )
        # Each word holding part of the match goes (`Basic` and its pair are two words).
        words = record["search"]["query"].split()
        assert words[0] == "find" and words[-1] == "now"
        assert set(words[1:-1]) == {f"[REDACTED:dlp.{detector}]"}
        assert record["search"]["queries"][1] == "plain"


@pytest.mark.parametrize("detector", sorted(COMPANIONS))
def test_dlp_redacts_a_secret_and_its_companion(detector: str) -> None:
    text, companions = COMPANIONS[detector]
    for url in (
        f"https://x.example/?q={quote(text, safe='')}&page=2",
        f"https://x.example/?q={text}&page=2",  # as typed, delimiters and all
        f"https://x.example/a/{quote(text, safe='')}/b",
    ):
        found = ENFORCE.scan_url(url)
        assert found is not None and found.detector == detector, (url, found)
        record = _record(url, text)
        mark_record(record, ENFORCE, found)
        shown = json.dumps(record)
        whole = _secret_pieces(text) if detector != "basic_auth" else []  # not "https://"
        for piece in companions + whole:
            assert piece not in shown and quote(piece, safe="") not in shown, (piece, shown)
        assert f"[REDACTED:dlp.{detector}]" in record["url"]["original"]


def test_dlp_redacts_a_jwt_over_host_labels_whole() -> None:
    jwt = SAMPLES["jwt"]
    url = f"https://{jwt}.collector.example/x"
    found = ENFORCE.scan_url(url)
    assert found is not None and found.detector == "jwt"
    record = _record(url, "nothing")
    mark_record(record, ENFORCE, found)
    for part in jwt.split("."):
        assert part not in json.dumps(record) and part.lower() not in json.dumps(record)
    assert record["url"]["original"].endswith(".collector.example/x")


def test_dlp_redaction_strips_the_padding_the_parser_strips() -> None:
    key = SAMPLES["aws_access_key"]
    url = " " * 40 + f"https://{key}.collector.example/x"
    found = ENFORCE.scan_url(url)
    assert found is not None and found.location == "host_label[0]"
    record = {"url": {"original": url}}
    mark_record(record, ENFORCE, found)
    assert record["url"]["original"] == "https://[REDACTED:dlp.aws_access_key].collector.example/x"


def test_dlp_redacts_a_fullwidth_secret_in_a_host() -> None:
    key = SAMPLES["aws_access_key"]
    wide = "".join(chr(ord(c) + 0xFEE0) for c in key)
    for url in (
        f"https://{wide}.collector.example/x",
        f"https://{wide}\u3002collector\u3002example/x",
    ):
        found = ENFORCE.scan_url(url)
        assert found is not None and found.detector == "aws_access_key"
        record = {"url": {"original": url, "full": f"https://{key.lower()}.collector.example/x"}}
        mark_record(record, ENFORCE, found)
        shown = json.dumps(record, ensure_ascii=False)
        assert wide not in shown and key.lower() not in shown, shown
