"""URL redaction for the audit log: user info removed, credential query values and
credential-shaped strings replaced by `REDACTED`, the fragment dropped. Never raises: whatever
the input, the output is printable ASCII with every other character percent-encoded.
"""

from __future__ import annotations

import functools
import re
from urllib.parse import quote, unquote

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
            return _requote_raw(_CREDENTIAL_SHAPES.sub(REDACTED, head.rsplit("@", 1)[-1]))
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
    """Credential-shaped substrings of any text replaced by `REDACTED`."""
    return _CREDENTIAL_SHAPES.sub(REDACTED, text)


def _redact(url: str) -> str:
    text = url.split("#", 1)[0]
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
        out.append("//" + _requote_raw(redact_text(authority)))
    if shaped:
        out.append("/".join(_redact_component(segment, "") for segment in path.split("/")))
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
        safe_name = _redact_component(name, "")
        if has_value and is_sensitive_param(name):
            parts[index] = f"{safe_name}={REDACTED}"
        elif has_value:
            parts[index] = f"{safe_name}={_redact_component(value, '=')}"
        else:
            parts[index] = safe_name
    joined = "".join(parts)
    return joined if shaped else _requote_raw(joined)


def _redact_component(raw: str, extra_safe: str) -> str:
    """One path segment, query name or value: credential shapes found even when
    percent-encoded; otherwise the original escapes are kept."""
    if _CREDENTIAL_SHAPES.search(raw):
        return _requote_raw(redact_text(raw))
    decoded = unquote(raw, errors="replace")
    if decoded != raw and _CREDENTIAL_SHAPES.search(decoded):
        return quote(redact_text(decoded), safe="-._~!$'()*+,:@" + extra_safe, errors="replace")
    return _requote_raw(raw)


def _requote_raw(text: str) -> str:
    return _UNSAFE_RAW.sub(_percent_encode, text)


def _percent_encode(match: re.Match[str]) -> str:
    return "".join(f"%{b:02X}" for b in match.group(0).encode("utf-8", "surrogatepass"))
