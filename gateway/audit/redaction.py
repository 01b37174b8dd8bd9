"""URL redaction for the audit log: user info removed, credential query values replaced by
`REDACTED`, and each piece holding a credential-shaped string (a host label, path segment,
query name or value; a word of free text) replaced whole, so the secret written beside one
(`AKIA…:<secret key>`) goes with it; the fragment dropped. Never raises: whatever the input,
the output is printable ASCII with every other character percent-encoded.
"""

from __future__ import annotations

import functools
import re
from urllib.parse import unquote

from gateway.audit.chain import REDACTED

# Credential parameter names whose values are redacted, compared after
# percent-decoding and case folding (and with `-` read as `_`, so `x-api-key` counts as
# ending in `_key`).
SENSITIVE_PARAMS = frozenset(
    {
        "key",
        "api_key",
        "apikey",
        "token",
        "access_token",
        "id_token",
        "refresh_token",
        "auth",
        "password",
        "passwd",
        "secret",
        "client_secret",
        "sig",
        "signature",
        "code",
        "session",
        # OpenTelemetry's default list adds the AWS v2 signed-URL key id.
        "awsaccesskeyid",
    }
)
SENSITIVE_SUFFIXES = ("_key", "_token", "_secret")
# Signed-URL parameters of S3 (SigV4) and GCS (V4): credential scope, signature, session token.
_CLOUD_PREFIXES = ("x_amz_", "x_goog_")
_CLOUD_SECRET_WORDS = ("credential", "signature", "token", "security")

# Each shape starts only at a token boundary, which also keeps matching linear in the input.
_CREDENTIAL_SHAPES = re.compile(
    r"(?<![A-Za-z0-9_-])(?:"
    r"eyJ[A-Za-z0-9_-]{4,}\.[A-Za-z0-9_-]{4,}\.[A-Za-z0-9_-]*"  # JWT (JWS compact form)
    r"|sk-[A-Za-z0-9_-]{16,}"  # OpenAI / Anthropic style secret keys
    r"|gh[pousr]_[A-Za-z0-9]{20,}"  # GitHub tokens
    r"|github_pat_[A-Za-z0-9_]{20,}"  # GitHub fine-grained tokens
    r"|xox[a-z]-[A-Za-z0-9-]{8,}"  # Slack tokens
    r"|(?:AKIA|ASIA)[0-9A-Z]{16}"  # AWS access key ids
    r"|AIza[0-9A-Za-z_-]{35}"  # Google API keys
    r")"
)

_SCHEME = re.compile(r"[A-Za-z][A-Za-z0-9+.\-]{0,31}:")
# Characters a URL may carry unencoded; everything else (controls, spaces, quotes, non-ASCII,
# a `%` that starts no escape) is percent-encoded.
_UNSAFE_RAW = re.compile(r"%(?![0-9A-Fa-f]{2})|[^A-Za-z0-9\-._~!$&'()*+,;=:@/?%\[\]]")
_QUERY_SEPARATORS = re.compile(r"([&;])")


def redact_url(url: str) -> str:
    """The URL as the audit log may show it; see the module docstring."""
    if isinstance(url, str):
        return _cached_redact_url(url)
    return _redact_url(url)


# A record's original and final URL, and an agent's repeated fetches, are often one string.
@functools.lru_cache(maxsize=1024)
def _cached_redact_url(url: str) -> str:
    return _redact_url(url)


def _redact_url(url: str) -> str:
    try:
        return _redact(url)
    except Exception:
        # Hostile input must never cost the record: fall back to the bluntest safe form.
        try:
            head = str(url).split("#", 1)[0].split("?", 1)[0]
            if _CREDENTIAL_SHAPES.search(head):
                return REDACTED
            return _requote_raw(head.rsplit("@", 1)[-1])
        except Exception:
            return REDACTED


def is_sensitive_param(name: str) -> bool:
    if "%" in name:
        name = unquote(name, errors="replace")
    folded = name.strip().casefold().replace("-", "_")
    if folded in SENSITIVE_PARAMS or folded.endswith(SENSITIVE_SUFFIXES):
        return True
    return folded.startswith(_CLOUD_PREFIXES) and any(w in folded for w in _CLOUD_SECRET_WORDS)


def redact_text(text: str) -> str:
    """Free text with each word (a run without whitespace) that holds a credential shape
    replaced whole by `REDACTED`."""
    if _CREDENTIAL_SHAPES.search(text) is None:
        return text
    return _WORD.sub(_redacted_word, text)


_WORD = re.compile(r"\S+")
_LABEL_DELIMITERS = re.compile(r"([.:])")


def _redacted_word(match: re.Match[str]) -> str:
    return REDACTED if _CREDENTIAL_SHAPES.search(match.group()) else match.group()


def _redact_labels(authority: str) -> str:
    """An authority with each label (or the port) that holds a credential shape replaced."""
    if _CREDENTIAL_SHAPES.search(authority) is None:
        return authority
    shapes = [m.span() for m in _CREDENTIAL_SHAPES.finditer(authority)]
    out = []
    at = 0
    for index, piece in enumerate(_LABEL_DELIMITERS.split(authority)):
        start, at = at, at + len(piece)
        touched = any(s < at and e > start for s, e in shapes)
        out.append(REDACTED if index % 2 == 0 and piece and touched else piece)
    return "".join(out)


def _redact(url: str) -> str:
    # What the URL parser strips around a URL is not part of it (and would hide its scheme).
    text = url.split("#", 1)[0].strip(" \t\r\n\f\v")
    scheme = ""
    match = _SCHEME.match(text)
    if match:
        scheme = match.group(0).lower()
        text = text[match.end() :]
    authority: str | None = None
    if text[:2] in ("//", "\\\\", "/\\", "\\/"):
        rest = text[2:]
        end = len(rest)
        for delimiter in "/\\?":
            found = rest.find(delimiter)
            if found != -1 and found < end:
                end = found
        # Everything up to the last `@` is user info, which never reaches the log.
        authority = rest[:end].rsplit("@", 1)[-1]
        text = rest[end:]
    path, has_query, query = text.partition("?")
    # Most URLs hold no credential shape at all: then each part is re-quoted whole, and only
    # the query's parameter names need a look.
    shaped = _CREDENTIAL_SHAPES.search(text) is not None or (
        "%" in text and _CREDENTIAL_SHAPES.search(unquote(text, errors="replace")) is not None
    )
    out = [scheme]
    if authority is not None:
        out.append("//" + _requote_raw(_redact_labels(authority)))
    if shaped:
        out.append("/".join(_redact_component(segment) for segment in path.split("/")))
    else:
        out.append(_requote_raw(path))
    if has_query:
        out.append("?" + _redact_query(query, shaped))
    return "".join(out)


def _redact_query(query: str, shaped: bool) -> str:
    parts = _QUERY_SEPARATORS.split(query)
    for index in range(0, len(parts), 2):
        name, has_value, value = parts[index].partition("=")
        if not shaped:
            if has_value and is_sensitive_param(name):
                parts[index] = f"{name}={REDACTED}"
            continue
        safe_name = _redact_component(name)
        if has_value and is_sensitive_param(name):
            parts[index] = f"{safe_name}={REDACTED}"
        elif has_value:
            parts[index] = f"{safe_name}={_redact_component(value)}"
        else:
            parts[index] = safe_name
    joined = "".join(parts)
    return joined if shaped else _requote_raw(joined)


def _redact_component(raw: str) -> str:
    """One path segment, query name or value: `REDACTED` whole when it holds a credential
    shape (also percent-encoded); otherwise as it was, with its escapes."""
    if _CREDENTIAL_SHAPES.search(raw):
        return REDACTED
    decoded = unquote(raw, errors="replace")
    if decoded != raw and _CREDENTIAL_SHAPES.search(decoded):
        return REDACTED
    return _requote_raw(raw)


def _requote_raw(text: str) -> str:
    return _UNSAFE_RAW.sub(_percent_encode, text)


def _percent_encode(match: re.Match[str]) -> str:
    return "".join(f"%{b:02X}" for b in match.group(0).encode("utf-8", "surrogatepass"))
