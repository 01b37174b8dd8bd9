"""DLP in audit records: the `dlp` block, and URLs, destination names, search queries and
error messages with what a detector matches replaced, never a recoverable part of it."""

from __future__ import annotations

import json

from gateway.policy.dlp import DlpMode, DlpSettings
from gateway.policy.dlprecords import mark_record, redact_url
from tests.policy.test_dlp import CANARY, ENFORCE, SAMPLES


def test_redaction_replaces_only_the_match() -> None:
    key = SAMPLES["aws_access_key"]
    url = f"https://x.example/search?lang=en&q=my+key+{key}+please&page=2"
    assert (
        redact_url(ENFORCE, url)
        == "https://x.example/search?lang=en&q=my+key+[REDACTED:dlp.aws_access_key]+please&page=2"
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
