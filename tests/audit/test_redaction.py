"""`redact_url`: the published parameter list, credential shapes (the whole piece one sits in,
with the secret beside it), user info, fragments, and inputs built to break it."""

from __future__ import annotations

import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gateway.audit import redact_url
from gateway.audit.redaction import SENSITIVE_PARAMS, redact_text

PRINTABLE_ASCII = re.compile(r"[\x21-\x7e]*")

LISTED = sorted(SENSITIVE_PARAMS - {"awsaccesskeyid"})
CLOUD = [
    "X-Amz-Credential",
    "X-Amz-Signature",
    "X-Amz-Security-Token",
    "X-Goog-Credential",
    "X-Goog-Signature",
]


def test_the_published_list_is_complete() -> None:
    assert set(LISTED) >= {
        "key", "api_key", "apikey", "token", "access_token", "id_token", "refresh_token",
        "auth", "password", "passwd", "secret", "client_secret", "sig", "signature", "code",
        "session",
    }  # fmt: skip


@pytest.mark.parametrize("name", [*LISTED, *CLOUD, "AWSAccessKeyId"])
def test_each_listed_parameter_is_redacted(name: str) -> None:
    url = f"https://api.example.com/v1?q=cats&{name}=hunter2&page=2"
    assert redact_url(url) == f"https://api.example.com/v1?q=cats&{name}=REDACTED&page=2"


@pytest.mark.parametrize(
    "name",
    [
        pytest.param("TOKEN", id="upper-case"),
        pytest.param("Api_Key", id="mixed-case"),
        pytest.param("%74oken", id="percent-encoded-name"),
        pytest.param("stripe_key", id="suffix-key"),
        pytest.param("github_token", id="suffix-token"),
        pytest.param("webhook_secret", id="suffix-secret"),
        pytest.param("x-api-key", id="dashed-suffix"),
        pytest.param("X-AMZ-SIGNATURE", id="cloud-upper"),
    ],
)
def test_parameter_names_are_matched_after_decoding_and_case_folding(name: str) -> None:
    assert redact_url(f"https://e.example/?{name}=v4lue") == f"https://e.example/?{name}=REDACTED"


@pytest.mark.parametrize(
    "query",
    ["q=token", "keyword=rust", "monkey=1", "tokens=3", "X-Amz-Date=20260101T000000Z", "page=2"],
)
def test_other_parameters_are_kept(query: str) -> None:
    assert redact_url(f"https://e.example/search?{query}") == f"https://e.example/search?{query}"


def test_every_separator_and_repeated_names() -> None:
    url = "https://e.example/?a=1;token=x&token=y&token&empty="
    assert redact_url(url) == "https://e.example/?a=1;token=REDACTED&token=REDACTED&token&empty="


JWT = "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.dozjgNryP4J3jVmNHl0w5N_XgL0n3I9PlFUP0THsR8U"
SHAPES = {
    "jwt": JWT,
    "unsigned-jwt": "eyJhbGciOiJub25lIn0.eyJzdWIiOiJ4In0.",
    "openai": "sk-proj-abcdefghijklmnopqrstuvwxyz012345",
    "anthropic": "sk-ant-api03-abcdefghijklmnopqrstu",
    "github": "ghp_" + "a1B2" * 9,
    "github-oauth": "gho_" + "Z9y8" * 9,
    "github-pat": "github_pat_11ABCDEFG0123456789_abcdefghijklmnop",
    "slack-bot": "xoxb-123456789012-abcdefABCDEF",
    "slack-user": "xoxp-1234-5678-abcdef",
    "aws": "AKIAIOSFODNN7EXAMPLE",
    "aws-temporary": "ASIAIOSFODNN7EXAMPLE",
    "google": "AIzaSyA-abcdefghijklmnopqrstuvwxyz01234",
}


@pytest.mark.parametrize("secret", SHAPES.values(), ids=SHAPES.keys())
@pytest.mark.parametrize(
    "template",
    [
        pytest.param("https://e.example/files/{}/raw", id="path"),
        pytest.param("https://e.example/?q={}", id="benign-param"),
        pytest.param("https://e.example/?{}=1", id="param-name"),
        pytest.param("https://{}.attacker.example/", id="host-label"),
        pytest.param("https://e.example/a?x=prefix:{}", id="after-punctuation"),
    ],
)
def test_credential_shapes_are_redacted_wherever_they_stand(template: str, secret: str) -> None:
    redacted = redact_url(template.format(secret))
    assert secret not in redacted
    assert "REDACTED" in redacted


@pytest.mark.parametrize("secret", [SHAPES["openai"], SHAPES["aws"], SHAPES["github"]])
def test_percent_encoded_credentials_are_found_too(secret: str) -> None:
    encoded = "".join(f"%{ord(c):02X}" for c in secret)
    redacted = redact_url(f"https://e.example/?q={encoded}")
    assert redacted == "https://e.example/?q=REDACTED"


@pytest.mark.parametrize(
    "url",
    [
        "https://e.example/task-1234567890abcdefghijklmn",  # "sk-" inside a word
        "https://e.example/?q=sk-short",
        "https://e.example/AKIAshort",
        "https://e.example/ghp_tooShort",
        "https://e.example/?q=eyJ-not-a-jwt",
        "https://e.example/blog/how-to-rotate-keys",
    ],
)
def test_look_alikes_that_are_not_credentials_are_kept(url: str) -> None:
    assert redact_url(url) == url


@pytest.mark.parametrize(
    "url, expected",
    [
        ("https://user:pass@e.example/p", "https://e.example/p"),
        ("https://user@e.example:8443/p", "https://e.example:8443/p"),
        ("https://a@b:c@e.example/p", "https://e.example/p"),
        ("https://user:pass@e.example", "https://e.example"),
        ("https://user:pass@e.example?x=1", "https://e.example?x=1"),
        ("http:\\\\user:pass@e.example\\p", "http://e.example%5Cp"),
        (
            "https://e.example/mail/someone@example.org",
            "https://e.example/mail/someone@example.org",
        ),
        ("https://[::1]:8080/p", "https://[::1]:8080/p"),
    ],
)
def test_user_info_is_removed(url: str, expected: str) -> None:
    assert redact_url(url) == expected


@pytest.mark.parametrize(
    "url, expected",
    [
        ("https://e.example/p#section", "https://e.example/p"),
        ("https://e.example/p?x=1#access_token=abc", "https://e.example/p?x=1"),
        ("https://e.example/#", "https://e.example/"),
    ],
)
def test_fragments_are_dropped(url: str, expected: str) -> None:
    assert redact_url(url) == expected


@pytest.mark.parametrize(
    "url",
    [
        pytest.param("", id="empty"),
        pytest.param("not a url at all", id="words"),
        pytest.param("http://[", id="broken-ipv6"),
        pytest.param("::::////????&&&===", id="punctuation"),
        pytest.param("https://e.example/\x00\x1b[31mred\x1b[0m\r\n", id="controls-and-ansi"),
        pytest.param("https://e.example/caf\u00e9/\u202eevil", id="non-ascii-and-bidi"),
        pytest.param("https://e.example/\ud800", id="lone-surrogate"),
        pytest.param("https://e.example/%zz%4", id="broken-escapes"),
        pytest.param("https://e.example/?q=" + "eyJ" * 20000, id="many-jwt-starts"),
        pytest.param("https://e.example/" + "a." * 20000, id="many-dots"),
        pytest.param("https://" + "@" * 10000 + "e.example", id="many-ats"),
    ],
)
def test_hostile_input_never_raises_and_prints_safely(url: str) -> None:
    redacted = redact_url(url)
    assert PRINTABLE_ASCII.fullmatch(redacted)
    assert "#" not in redacted


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=200))
def test_any_text_gives_printable_ascii(text: str) -> None:
    assert PRINTABLE_ASCII.fullmatch(redact_url(text))


@settings(max_examples=200, deadline=None)
@given(
    st.sampled_from(list(SHAPES.values())),
    st.sampled_from(["/", "?q=", "?a=1&b=", "?", "/x/"]),
    st.text(alphabet=st.characters(codec="ascii"), max_size=30),
)
def test_a_credential_never_survives_whatever_surrounds_it(
    secret: str, where: str, noise: str
) -> None:
    url = f"https://e.example{where}{secret}"
    # whatever an agent appends after a non-token character, the secret itself is gone
    assert secret not in redact_url(url + "&" + noise)


# --- the whole piece goes, with the secret written beside the shape -----------------------------

AWS_PAIR = "AKIAIOSFODNN7EXAMPLE:wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"


@pytest.mark.parametrize("secret", SHAPES.values(), ids=SHAPES.keys())
@pytest.mark.parametrize(
    "template, expected",
    [
        pytest.param(
            "https://e.example/?q=before.{}.after&p=2",
            "https://e.example/?q=REDACTED&p=2",
            id="query-value",
        ),
        pytest.param(
            "https://e.example/files/before.{}.after/raw",
            "https://e.example/files/REDACTED/raw",
            id="path-segment",
        ),
        pytest.param(
            "https://e.example/?before.{}.after=1", "https://e.example/?REDACTED=1", id="query-name"
        ),
    ],
)
def test_redaction_takes_the_whole_piece_a_shape_sits_in(
    template: str, expected: str, secret: str
) -> None:
    assert redact_url(template.format(secret)) == expected


@pytest.mark.parametrize(
    "url, expected",
    [
        (f"https://e.example/?q={AWS_PAIR}&p=2", "https://e.example/?q=REDACTED&p=2"),
        (f"https://e.example/k/{AWS_PAIR.replace('/', '%2F')}", "https://e.example/k/REDACTED"),
        (
            f"https://{SHAPES['jwt']}.attacker.example/",
            "https://REDACTED.REDACTED.REDACTED.attacker.example/",
        ),
        (
            f"https://{SHAPES['aws'].lower()}x.{SHAPES['aws']}:8443/",
            f"https://{SHAPES['aws'].lower()}x.REDACTED:8443/",
        ),
    ],
    ids=["aws-pair-in-query", "aws-pair-in-path", "jwt-over-labels", "host-label"],
)
def test_redaction_takes_a_shapes_companion_too(url: str, expected: str) -> None:
    assert redact_url(url) == expected


def test_redact_text_takes_the_whole_word() -> None:
    assert redact_text(f"keys {AWS_PAIR} please") == "keys REDACTED please"
    assert redact_text(f"'{SHAPES['github']}',next") == "REDACTED"
    assert redact_text("nothing to see here") == "nothing to see here"
