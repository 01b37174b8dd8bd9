"""DLP decides what is dialled, and finds what its encodings hide.

Every detector's secret is spelled in each Unicode form the URL parser maps (fullwidth,
mathematical and circled letters and digits, one fullwidth character in the middle, the
ideographic and fullwidth full stops between labels) and behind each whitespace padding the
parser strips, in a host label, a path segment and a query value; the decision (step 2b,
through `decide_url`) must refuse it by that detector's rule, while the host it would dial is
the mapped ASCII name. Then the entropy detector's alphabets (hex and base32 held to their own
maximum) and decodings that carry bytes that are not printable, or a stray nibble.
"""

from __future__ import annotations

import base64
import json
import random
import string
from collections.abc import Callable
from urllib.parse import quote

import pytest

from gateway.policy.dlp import DlpMode, DlpSettings, EntropySettings, fold
from gateway.policy.engine import Reason, decide_url
from gateway.policy.model import Action
from tests.policy.conftest import make_policy
from tests.policy.test_dlp import CANARY, ENFORCE, ORDINARY_URLS, SAMPLES

POLICY = make_policy(default=Action.ALLOW, dlp=ENFORCE)
_RNG = random.Random(26)
RANDOM_LABEL = "".join(_RNG.choice(string.ascii_lowercase + string.digits) for _ in range(40))
SECRETS = {**SAMPLES, "canary": CANARY, "employee_id": "EMP-20251130", "entropy": RANDOM_LABEL}
# What a host label can carry (letters, digits, '-', '_'; a JWT's parts are three labels).
IN_HOSTS = [
    name
    for name, secret in SECRETS.items()
    if all(c.isalnum() or c in "-_." for c in secret) and len(secret) <= 63 or name == "jwt"
]


def _shifted(letters_upper: int, letters_lower: int, digits: int | None) -> Callable[[str], str]:
    def spell(text: str) -> str:
        out = []
        for c in text:
            if "A" <= c <= "Z":
                out.append(chr(letters_upper + ord(c) - ord("A")))
            elif "a" <= c <= "z":
                out.append(chr(letters_lower + ord(c) - ord("a")))
            elif "0" <= c <= "9" and digits is not None:
                out.append(chr(digits + ord(c) - ord("0")))
            else:
                out.append(c)
        return "".join(out)

    return spell


def _fullwidth(text: str) -> str:
    return "".join(chr(ord(c) + 0xFEE0) if "!" <= c <= "~" else c for c in text)


def _circled(text: str) -> str:
    letters = _shifted(0x24B6, 0x24D0, None)(text)
    return "".join(
        "\u24ea" if c == "0" else chr(0x2460 + int(c) - 1) if c.isdigit() else c for c in letters
    )


def _one_in_the_middle(text: str) -> str:
    middle = len(text) // 2
    while not text[middle].isalnum():
        middle += 1
    return text[:middle] + _fullwidth(text[middle]) + text[middle + 1 :]


SPELLINGS: dict[str, Callable[[str], str]] = {
    "fullwidth": _fullwidth,
    "one fullwidth character in the middle": _one_in_the_middle,
    "mathematical bold": _shifted(0x1D400, 0x1D41A, 0x1D7CE),
    "mathematical monospace": _shifted(0x1D670, 0x1D68A, 0x1D7F6),
    "circled": _circled,
}
# The whitespace the URL parser strips around a URL, as the URL corpus pads with it.
PADDINGS = {
    "40 spaces before": (" " * 40, ""),
    "tab": ("\t", ""),
    "newline and space": ("\n ", ""),
    "carriage return, line feed": ("\r\n", ""),
    "form feed and vertical tab": ("\f\v", ""),
    "spaces around": ("   ", "  \t"),
}
STOPS = {"ideographic full stop": "\u3002", "fullwidth full stop": "\uff0e", "halfwidth": "\uff61"}


def _refused_by(url: str, detector: str) -> str | None:
    """None when `decide_url` refuses `url` by `dlp.<detector>`; else what it did."""
    decision, target = decide_url(POLICY, url)
    if decision.allowed or decision.reason is not Reason.SENSITIVE_DATA:
        return f"{decision.allowed} {decision.reason} {decision.rule} (dialled {target})"
    if decision.rule != f"dlp.{detector}":
        return f"refused by {decision.rule}"
    return None


def _host_url(label: str, detector: str) -> str:
    return f"http://{label}.collector.example/x"


def _quoted_spaces(text: str) -> str:
    return text.replace(" ", "%20")


@pytest.mark.parametrize("spelling", sorted(SPELLINGS))
@pytest.mark.parametrize("detector", IN_HOSTS)
def test_dlp_sees_mapped_host_label(detector: str, spelling: str) -> None:
    label = SPELLINGS[spelling](SECRETS[detector])
    url = _host_url(label, detector)
    decision, target = decide_url(make_policy(default=Action.ALLOW), url)
    assert target is not None and target.host.isascii()  # what would be dialled: mapped
    assert fold(label).lower() in target.host or detector == "jwt"
    assert _refused_by(url, detector) is None, (url, _refused_by(url, detector))


@pytest.mark.parametrize("stop", sorted(STOPS))
@pytest.mark.parametrize("detector", ["jwt", "aws_access_key", "canary", "entropy"])
def test_dlp_sees_mapped_host_with_unicode_full_stops(detector: str, stop: str) -> None:
    secret = SECRETS[detector].replace(".", STOPS[stop])
    url = f"http://{secret}{STOPS[stop]}collector{STOPS[stop]}example/"
    assert _refused_by(url, detector) is None, url


@pytest.mark.parametrize("spelling", sorted(SPELLINGS))
@pytest.mark.parametrize("detector", sorted(SECRETS))
def test_dlp_sees_mapped_path_and_query(detector: str, spelling: str) -> None:
    spelled = _quoted_spaces(SPELLINGS[spelling](SECRETS[detector]))
    settings = (
        POLICY
        if detector != "entropy"
        else make_policy(
            default=Action.ALLOW,
            dlp=DlpSettings(mode=DlpMode.ENFORCE, entropy=EntropySettings(where=("path", "query"))),
        )
    )
    for url in (
        f"https://docs.example.org/files/{spelled}/x",
        f"https://search.example.org/find?lang=en&q={spelled}",
        # The same, percent-encoded as UTF-8 (what the parser sends).
        "https://search.example.org/find?q="
        + "".join(c if c.isascii() else "".join(f"%{b:02X}" for b in c.encode()) for c in spelled),
    ):
        decision, _ = decide_url(settings, url)
        assert not decision.allowed and decision.rule == f"dlp.{detector}", (url, decision)


@pytest.mark.parametrize("padding", sorted(PADDINGS))
@pytest.mark.parametrize("detector", sorted(SECRETS))
def test_dlp_sees_host_behind_whitespace(detector: str, padding: str) -> None:
    before, after = PADDINGS[padding]
    secret = SECRETS[detector]
    if detector in IN_HOSTS:
        url = before + _host_url(secret, detector) + after
        assert _refused_by(url, detector) is None, repr(url)
        # The finding names the host label, as it would without the padding.
        decision, _ = decide_url(POLICY, url)
        assert decision.dlp is not None and decision.dlp.location.startswith("host_label[")
    if detector != "entropy":
        url = before + f"https://x.example/a?q={_quoted_spaces(secret)}" + after
        assert _refused_by(url, detector) is None, repr(url)


def test_dlp_sees_mapped_host_in_any_case() -> None:
    # A name is sent in whatever case it is written (and UTS 46 lowers it): the canaries and
    # AWS key ids are found in any case in a host; words that look like one are not.
    for label, detector in (
        (CANARY.upper(), "canary"),
        (SAMPLES["aws_access_key"].lower(), "aws_access_key"),
        (_fullwidth(SAMPLES["aws_access_key"].lower()), "aws_access_key"),
    ):
        assert _refused_by(_host_url(label, detector), detector) is None, label
    for label in ("asiapacificnewsroom", "accaglobalstudents", "akiaprogramschedule"):
        assert ENFORCE.scan_url(f"https://{label}.example.com/") is None, label


def test_dlp_sees_mapped_host_in_punycode() -> None:
    # One non-ASCII letter that maps to no ASCII one: the label is dialled as an A-label whose
    # long random ASCII part the entropy detector sees.
    label = RANDOM_LABEL[:20] + "\u0436" + RANDOM_LABEL[21:]
    decision, target = decide_url(POLICY, _host_url(label, "entropy"))
    assert target is not None and target.host.startswith("xn--")
    assert not decision.allowed and decision.rule == "dlp.entropy"


def test_dlp_folding_keeps_ordinary_unicode_urls() -> None:
    for url in (
        "https://de.wikipedia.org/wiki/M\u00fcnchen",
        "https://\u4f8b\u3048.jp/\u30c6\u30b9\u30c8?q=\u691c\u7d22",
        "https://b\u00fccher.example/\uff21\uff22\uff23",
        "https://example.com/caf\u00e9/\u20ac?q=\u00fc",
        *(" \t" + url for url in ORDINARY_URLS),
    ):
        decision, _ = decide_url(POLICY, url)
        assert decision.allowed and decision.dlp is None, url


def test_dlp_fold_drops_every_default_ignorable() -> None:
    key = SAMPLES["aws_access_key"]
    for ignorable in (
        "\u00ad",
        "\u200b",
        "\u200c",
        "\u200d",
        "\u2060",
        "\ufe0f",
        "\u202e",
        "\U000e0041",
        "\u180e",
    ):
        spelled = key[:8] + ignorable + key[8:]
        assert fold(spelled) == key, hex(ord(ignorable))
        found = ENFORCE.scan_url(f"https://x.example/?q={spelled}")
        assert found is not None and found.detector == "aws_access_key", hex(ord(ignorable))


# --- the entropy detector's alphabets -----------------------------------------------------------


@pytest.mark.parametrize("length", [32, 40, 62, 63])
def test_dlp_entropy_flags_hex_labels(length: int) -> None:
    rng = random.Random(length)
    shipped = DlpSettings(mode=DlpMode.REPORT)
    missed = []
    for _ in range(200):
        label = "".join(rng.choice("0123456789abcdef") for _ in range(length))
        found = shipped.scan_url(f"https://{label}.attacker.example/")
        if found is None or found.detector != "entropy":
            missed.append(label)
    assert not missed, missed[:3]


@pytest.mark.parametrize("length", [32, 63])
def test_dlp_entropy_flags_base32_labels(length: int) -> None:
    rng = random.Random(length)
    shipped = DlpSettings(mode=DlpMode.REPORT)
    for _ in range(200):
        label = "".join(rng.choice("abcdefghijklmnopqrstuvwxyz234567") for _ in range(length))
        found = shipped.scan_url(f"https://{label}.attacker.example/")
        assert found is not None and found.detector == "entropy", label


@pytest.mark.parametrize(
    "password", ["hunter2hunter2hunter2", "correct horse battery staple", "P@ssw0rd!2024-Secret"]
)
def test_dlp_entropy_flags_a_hex_encoded_password(password: str) -> None:
    label = password.encode().hex()
    found = DlpSettings(mode=DlpMode.REPORT).scan_url(f"https://{label}.attacker.example/")
    assert found is not None and found.detector == "entropy"
    assert found.location == "host_label[0]"


def test_dlp_entropy_keeps_words_dates_and_short_hex() -> None:
    shipped = DlpSettings(mode=DlpMode.REPORT)
    for label in (
        "averyveryverylongcompanynameforablog",
        "deadbeefcafe0123",  # short: under min_length
        "20251204083000000000000000000000000",  # digits alone
        "aaaaaaaaaaaaaaaa0000000000000000",  # hex, but no randomness
        "abcabcabcabcabcabcabc2abcabcabcabcab",  # base32, repeated
    ):
        assert shipped.scan_url(f"https://{label}.example.com/") is None, label


# --- decodings ---------------------------------------------------------------------------------

# The custom pattern's match with a few words after it: its encoding then reaches the 20
# characters a URL's run needs to be decoded at all (`dlp.RUN_LENGTH`).
WRAPPED_SECRETS = {**SAMPLES, "canary": CANARY, "employee_id": "EMP-20251130 (staff)"}


def _odd_wrappings(secret: str) -> dict[str, str]:
    raw = secret.encode()
    return {
        "base64, one byte not printable before": base64.b64encode(b"\x01" + raw).decode(),
        "base64, bytes not printable around": base64.b64encode(
            b"\xff\xfe" + raw + b"\x00"
        ).decode(),
        "base64url, a NUL before": base64.urlsafe_b64encode(b"\0" + raw).decode().rstrip("="),
        "hex, one byte not printable before": (b"\x02" + raw).hex(),
        "hex, one extra leading nibble": "f" + raw.hex(),
        "hex, one extra trailing nibble": raw.hex() + "0",
        "hex, upper case, a nibble and a NUL before": "A" + (b"\0" + raw).hex().upper(),
    }


@pytest.mark.parametrize("detector", sorted(WRAPPED_SECRETS))
def test_dlp_searches_decodings_for_secrets(detector: str) -> None:
    for form, value in _odd_wrappings(WRAPPED_SECRETS[detector]).items():
        in_url = quote(value, safe="")
        positions = {
            "query:v": ENFORCE.scan_url(f"https://x.example/a?v={in_url}"),
            "path[0]": ENFORCE.scan_url(f"https://x.example/{in_url}"),
            "header:x-data": ENFORCE.scan_headers([("X-Data", value)]),
            "body": ENFORCE.scan_body(json.dumps({"blob": value}).encode()),
        }
        for location, found in positions.items():
            assert found is not None and found.detector == detector, (form, location, found)
            assert found.location == location, (form, found)
