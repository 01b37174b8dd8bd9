"""Outbound DLP: each detector, each position and wrapping, the engine's step 2b in both
modes, fingerprints, redaction, and that a finding never carries the secret."""

from __future__ import annotations

import base64
import json
from dataclasses import replace
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gateway.policy import dlp
from gateway.policy.dlp import (
    BUILTIN_DETECTORS,
    CustomPattern,
    DlpMode,
    DlpSettings,
    EntropySettings,
    bits_per_char,
    encoded_signatures,
    split_url,
)
from gateway.policy.dlprecords import redact_url
from gateway.policy.engine import (
    Reason,
    decide_query,
    decide_target,
    decide_untrusted_host,
    decide_url,
)
from gateway.policy.load import load_policy_bytes
from gateway.policy.model import Action, Mode
from gateway.policy.urls import parse_url
from tests.policy.conftest import make_policy

# One sample per known format (made up, shaped as the real ones are).
SAMPLES = {
    "aws_access_key": "AKIAQ3EGRT5LWX7ZP2NB",
    "github_token": "ghp_" + "aB3dE5fG7hJ9kL1mN3pQ5rS7tU9vW1xY3zA5",
    "gitlab_token": "glpat-" + "xY7wV5uT3sR1qP9oN8mL",
    "slack_token": "xoxb-123456789012-" + "AbCdEfGhIjKlMnOpQrStUvWx",
    "stripe_key": "sk_live_" + "4eC39HqLyjWDarjtT1zdp7dc",
    "openai_key": "sk-proj-" + "Ab12Cd34Ef56Gh78Ij90Kl12Mn34Op56Qr78St90Uv12Wx34",
    "google_api_key": "AIza" + "SyD3x9Qw7Ep5Rt1Yu2Io8Pa6Sd4Fg0Hj3KL",
    "private_key": "-----BEGIN OPENSSH PRIVATE KEY-----",
    "jwt": "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiJhZ2VudCJ9.dozjgNryP4J3jVmNHl0w5N_XgL0n3I9PlFUP0THsR8U",
    "basic_auth": "Basic " + base64.b64encode(b"deploy:hunter2hunter2").decode(),
}
CANARY = "tripwire-4c1f7a2b9e"
ENFORCE = DlpSettings(
    mode=DlpMode.ENFORCE,
    canaries=(CANARY,),
    patterns=(CustomPattern("employee_id", "EMP-[0-9]{8}"),),
)
ORDINARY_URLS = [
    "https://en.wikipedia.org/wiki/Python_(programming_language)",
    "https://docs.python.org/3/library/asyncio-task.html#asyncio.gather",
    "https://www.example.com/2025/09/04/top-nutrition-trends-for-fall-2025-what-experts-eat/",
    "https://github.com/aio-libs/aiohttp/commit/4f6c5e1d2b3a49587a6b7c8d9e0f1a2b3c4d5e6f",
    "https://www.google.com/search?q=risk-management+basics&hl=en",
    "https://news.example.org/article?id=123456&utm_source=feed&utm_medium=rss",
    "https://medium.com/@someone/how-to-ask-questions-well-3f2a1b",
    "https://cdn.example.net/img/hero-image-1920x1080.webp",
    "https://www.desk-ask-sk-hynix.example/sk-hynix-quarterly-results-beat-estimates",
    "https://api.example.com/v1/items?page=2&per_page=50&sort=-created_at",
]


def wrapped(secret: str) -> dict[str, str]:
    raw = secret.encode()
    return {
        "as written": secret,
        "percent-encoded": "".join(f"%{b:02X}" for b in raw),
        "base64": base64.b64encode(b"k=" + raw).decode(),
        "base64url": base64.urlsafe_b64encode(b"id: " + raw).decode().rstrip("="),
        "hex": raw.hex(),
    }


def quoted(text: str) -> str:
    return "".join(c if c.isalnum() or c in "-._~%" else f"%{ord(c):02X}" for c in text)


CASES = [
    (name, form, value)
    for name, secret in {**SAMPLES, "canary": CANARY, "employee_id": "EMP-20251130"}.items()
    for form, value in wrapped(secret).items()
]


@pytest.mark.parametrize(("detector", "form", "value"), CASES)
def test_every_detector_in_every_position_and_wrapping(
    detector: str, form: str, value: str
) -> None:
    in_url = quoted(value)
    positions = {
        "query:q": ENFORCE.scan_url(f"https://search.example.org/find?lang=en&q={in_url}"),
        "path[1]": ENFORCE.scan_url(f"https://docs.example.org/files/{in_url}/x#frag"),
        "header:x-context": ENFORCE.scan_headers([("Accept", "*/*"), ("X-Context", value)]),
        "body": ENFORCE.scan_body(json.dumps({"note": value}).encode()),
    }
    for location, found in positions.items():
        assert found is not None, (location, form)
        assert found.detector == detector, (location, form, found)
        assert found.location == location


@pytest.mark.parametrize("detector", ["aws_access_key", "canary", "employee_id"])
def test_host_labels_as_written_and_wrapped(detector: str) -> None:
    secret = {"aws_access_key": SAMPLES["aws_access_key"], "canary": CANARY}.get(
        detector, "EMP-20251130"
    )
    labels = [secret.encode().hex(), base64.urlsafe_b64encode(secret.encode()).decode().rstrip("=")]
    if all(c.isalnum() or c == "-" for c in secret):
        labels.append(secret)
    for label in labels:
        found = ENFORCE.scan_url(f"https://{label}.collector.example/")
        assert found is not None and found.detector == detector, label
        assert found.location == "host_label[0]"


def test_entropy_in_host_labels_by_default_and_paths_only_when_asked() -> None:
    random_label = "k3j9x2m8q7w1z5v4b6n0c2l8p3r7t9y1"
    url = f"https://{random_label}.attacker.example/collect"
    shipped = DlpSettings(mode=DlpMode.REPORT)
    found = shipped.scan_url(url)
    assert found is not None and found.detector == "entropy"
    assert found.location == "host_label[0]"
    in_path = f"https://ok.example/x/{random_label}"
    assert shipped.scan_url(in_path) is None
    opted = DlpSettings(mode=DlpMode.REPORT, entropy=EntropySettings(where=("path", "query")))
    found = opted.scan_url(in_path)
    assert found is not None and found.location == "path[1]"
    assert opted.scan_url(url) is None  # host labels no longer listed
    # Thresholds: a stricter length, or more bits per character, lets the label pass.
    assert (
        DlpSettings(mode=DlpMode.REPORT, entropy=EntropySettings(min_length=40)).scan_url(url)
        is None
    )
    assert (
        DlpSettings(mode=DlpMode.REPORT, entropy=EntropySettings(min_bits_per_char=5.0)).scan_url(
            url
        )
        is None
    )
    # Off entirely.
    assert DlpSettings(mode=DlpMode.REPORT, entropy=None).scan_url(url) is None


def test_entropy_ignores_words_and_numbers() -> None:
    shipped = DlpSettings(mode=DlpMode.REPORT)
    for label in ("averyveryverylongcompanynameforablog", "12345678901234567890123456789012345"):
        assert shipped.scan_url(f"https://{label}.example.com/") is None
    assert bits_per_char("aaaa") == 0.0
    assert bits_per_char("abcd") == 2.0


@pytest.mark.parametrize("url", ORDINARY_URLS)
def test_ordinary_urls_pass(url: str) -> None:
    assert DlpSettings(mode=DlpMode.ENFORCE).scan_url(url) is None
    assert ENFORCE.scan_url(url) is None


def test_look_alikes_are_not_secrets() -> None:
    quiet = DlpSettings(mode=DlpMode.ENFORCE)
    for text in (
        "sk-hynix-quarterly-results-beat-analyst-estimates",  # a slug, not a key
        "AKIAQ3EGRT5LWX7ZP2NBEXTRA",  # longer than a key id: part of another token
        "Basic usage of the API",
        "-----BEGIN PUBLIC KEY-----",
    ):
        assert quiet.scan_text(text) is None, text


def test_detectors_can_be_switched_off() -> None:
    for name, sample in SAMPLES.items():
        others = tuple(n for n in BUILTIN_DETECTORS if n != name)
        assert DlpSettings(mode=DlpMode.ENFORCE).scan_text(sample) is not None, name
        without = DlpSettings(mode=DlpMode.ENFORCE, detectors=others)
        assert without.scan_text(sample) is None, name


def test_signatures_are_what_base64_keeps_of_an_anchor() -> None:
    signatures = encoded_signatures("AKIA")
    for pad in range(3):
        encoded = base64.b64encode(b"?" * pad + b"AKIA" + b"Z").decode()
        assert any(s in encoded for s in signatures), pad
    assert "414b4941" in signatures and "414B4941" in signatures


@settings(max_examples=200, deadline=None)
@given(st.text(max_size=300))
def test_scanning_any_text_never_fails(text: str) -> None:
    ENFORCE.scan_text(text, entropy=True)
    ENFORCE.scan_url(text)
    redact_url(ENFORCE, text)
    split_url(text)


def test_fingerprints_are_keyed_and_stable() -> None:
    secret = SAMPLES["github_token"]
    first = ENFORCE.scan_text(secret)
    assert first is not None
    url = f"https://x.example/p/{secret}"
    print_one = ENFORCE.scan_url(url).fingerprint
    assert ENFORCE.scan_url(url).fingerprint == print_one  # one key per settings
    assert print_one == dlp.fingerprint("github_token", secret, ENFORCE.fingerprint_key)
    keyed = ENFORCE.keyed(b"k" * 32)
    assert keyed.scan_url(url).fingerprint == dlp.fingerprint("github_token", secret, b"k" * 32)
    assert keyed.scan_url(url).fingerprint != print_one
    assert ENFORCE.keyed(b"k" * 32).scan_url(url).fingerprint == keyed.scan_url(url).fingerprint
    assert dlp.fingerprint("github_token", secret + "x", b"k" * 32) != keyed.fingerprint(
        "github_token", secret
    )
    assert keyed == ENFORCE and "k" * 32 not in repr(keyed)  # the key is no policy text
    print_two = keyed.scan_url(url).fingerprint
    assert secret not in print_two and len(print_two) == 24


def test_findings_and_redaction_never_hold_the_secret() -> None:
    for name, sample in SAMPLES.items():
        for form, value in wrapped(sample).items():
            url = f"https://x.example/p/{quoted(value)}?q={quoted(value)}"
            found = ENFORCE.scan_url(url)
            assert found is not None, (name, form)
            shown = json.dumps(found.to_record())
            redacted = redact_url(ENFORCE, url)
            for piece in (sample, quoted(value), value):
                assert piece not in shown and piece not in redacted, (name, form)
            assert f"[REDACTED:dlp.{name}]" in redacted, (name, form, redacted)


def test_locations_never_carry_agent_data() -> None:
    key = SAMPLES["aws_access_key"]
    found = ENFORCE.scan_url(f"https://x.example/?{key}=1")
    assert found is not None and found.location == "query[0]"
    found = ENFORCE.scan_headers([(f"X-{key}", "1")])
    assert found is not None and found.location == "header[0]"
    found = ENFORCE.scan_url(f"https://x.example/?a=1&b=2&secret_code={key}")
    assert found is not None and found.location == "query:secret_code"


# --- the engine: step 2b ------------------------------------------------------------------


def dlp_policy(mode: Mode = Mode.ENFORCE, dlp_mode: DlpMode = DlpMode.ENFORCE, **fields: object):
    return make_policy(
        allow=["x.example", ".search.example"],
        mode=mode,
        dlp=DlpSettings(mode=dlp_mode, canaries=(CANARY,)),
        **fields,
    )


def test_enforce_refuses_before_the_domain_rules() -> None:
    key = SAMPLES["aws_access_key"]
    policy = dlp_policy()
    decision, target = decide_url(policy, f"https://denied.example/?q={key}")
    assert target is not None
    assert not decision.allowed and decision.enforced
    assert decision.reason is Reason.SENSITIVE_DATA and decision.rule == "dlp.aws_access_key"
    assert decision.dlp is not None and decision.dlp.location == "query:q"
    assert key not in decision.describe()
    assert "query:q" in decision.describe()


@pytest.mark.parametrize(
    ("mode", "dlp_mode"),
    [(Mode.ENFORCE, DlpMode.REPORT), (Mode.REPORT, DlpMode.ENFORCE), (Mode.REPORT, DlpMode.REPORT)],
)
def test_report_records_and_lets_through(mode: Mode, dlp_mode: DlpMode) -> None:
    policy = dlp_policy(mode, dlp_mode)
    decision, _ = decide_url(policy, f"https://x.example/{CANARY}")
    assert decision.allowed and not decision.enforced
    assert decision.reason is Reason.SENSITIVE_DATA and decision.rule == "dlp.canary"
    assert decision.to_dict()["decision"] == "deny"
    # A domain denial still decides (and still carries the finding) in report-DLP mode.
    denied, _ = decide_url(policy, f"https://elsewhere.example/{CANARY}")
    if mode is Mode.ENFORCE:
        assert not denied.allowed and denied.reason is Reason.DOMAIN_NOT_ALLOWED
    assert denied.dlp is not None and denied.dlp.detector == "canary"


def test_off_looks_at_nothing() -> None:
    policy = dlp_policy(dlp_mode=DlpMode.OFF)
    decision, _ = decide_url(policy, f"https://x.example/{CANARY}")
    assert decision.allowed and decision.reason is None and decision.dlp is None


def test_what_the_web_chose_is_not_looked_at() -> None:
    policy = dlp_policy()
    decision, _ = decide_url(policy, f"https://x.example/{CANARY}", outbound=False)
    assert decision.allowed and decision.dlp is None
    target = parse_url(f"https://x.example/{CANARY}")
    assert decide_target(policy, target).allowed  # a redirect hop: no `sent`


def test_connect_host_and_invalid_urls() -> None:
    policy = dlp_policy()
    label = base64.urlsafe_b64encode(CANARY.encode()).decode().rstrip("=")
    target = parse_url(f"https://{label}.x.example:443/")
    decision = decide_target(policy, target, tool=None, sent=f"https://{label}.x.example:443")
    assert decision.reason is Reason.SENSITIVE_DATA and decision.dlp is not None
    assert decision.dlp.location == "host_label[0]"
    # Step 1 comes first: a URL that does not parse is invalid_url, not sensitive_data.
    bad, _ = decide_url(policy, f"https://us:{CANARY}@x.example/")
    assert bad.reason is Reason.INVALID_URL


def test_search_queries() -> None:
    policy = dlp_policy()
    decision = decide_query(policy, "WebSearch", ["weather", f"what is {CANARY}"])
    assert decision.reason is Reason.SENSITIVE_DATA and not decision.allowed
    assert decision.dlp is not None and decision.dlp.location == "search_query[1]"
    assert decide_query(policy, "WebSearch", ["weather in Paris"]).allowed
    # Tool enablement comes first.
    disabled = decide_query(policy, "XSearch", [CANARY])
    assert disabled.reason is Reason.TOOL_DISABLED


def test_loaded_policy_reads_its_canaries_file(tmp_path: Path) -> None:
    (tmp_path / "canaries.txt").write_text(f"# tripwires\n\n{CANARY}\n")
    file = tmp_path / "p.yaml"
    file.write_text(
        "domains: {allow: [x.example]}\n"
        "dlp: {mode: enforce, canaries_file: canaries.txt,"
        " patterns: [{name: employee_id, regex: 'EMP-[0-9]{8}'}]}\n"
    )
    policy, _ = load_policy_bytes(file.read_bytes(), source=str(file), default_name="p")
    assert policy.dlp.canaries == (CANARY,)
    for url, rule in (
        (f"https://x.example/?q={CANARY}", "dlp.canary"),
        ("https://x.example/EMP-12345678", "dlp.employee_id"),
    ):
        decision, _ = decide_url(policy, url)
        assert decision.rule == rule and not decision.allowed


def test_untrusted_host_check() -> None:
    token = "Qm7xT2vR9kLp3WzN8bYc4HdF6sJq1GtE5uAo0iVy"
    policy = make_policy(
        allow=["named.example"],
        default=Action.ALLOW,
        dlp=DlpSettings(mode=DlpMode.REPORT, untrusted_hosts=DlpMode.ENFORCE),
    )
    url = f"https://collector.example/c?d={token}"
    decision, target = decide_url(policy, url)
    assert target is not None and decision.allowed and decision.dlp is None  # plain DLP: quiet
    flagged = decide_untrusted_host(policy, decision, target, url, only_from_content=True)
    assert not flagged.allowed and flagged.rule == "dlp.untrusted_host"
    assert flagged.dlp is not None and flagged.dlp.location == "query:d"
    # Not only from content, no secret-shaped data, or a host the policy names: no flag.
    assert decide_untrusted_host(policy, decision, target, url, only_from_content=False).allowed
    plain = "https://collector.example/c?page=2"
    assert decide_untrusted_host(
        policy, decision, parse_url(plain), plain, only_from_content=True
    ).allowed
    named = f"https://named.example/c?d={token}"
    named_decision, named_target = decide_url(policy, named)
    assert named_target is not None
    assert decide_untrusted_host(
        policy, named_decision, named_target, named, only_from_content=True
    ).allowed
    # Report mode for the check alone; off turns it off.
    reporting = replace(
        policy, dlp=DlpSettings(mode=DlpMode.REPORT, untrusted_hosts=DlpMode.REPORT)
    )
    reported = decide_untrusted_host(reporting, decision, target, url, only_from_content=True)
    assert reported.allowed and not reported.enforced and reported.rule == "dlp.untrusted_host"
    off = replace(policy, dlp=DlpSettings(mode=DlpMode.REPORT))
    assert decide_untrusted_host(off, decision, target, url, only_from_content=True).dlp is None
