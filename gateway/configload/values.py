"""The configuration's own kinds of value: file paths (resolved against the file's folder),
durations, ids, environment variable names, http(s) and redis URLs, listen hosts.

Each reader records an Issue and returns None for a value it cannot take. Referenced files
are only checked to exist; no message ever repeats a value that may be a secret.
"""

from __future__ import annotations

import ipaddress
import os
import re

import yarl
from yaml.nodes import Node, ScalarNode

from gateway.policy.hosts import HostError, normalize_name
from gateway.policy.urls import InvalidURLError, parse_url
from gateway.yamlstrict.issues import Severity
from gateway.yamlstrict.source import FLOAT_TAG, STR_TAG
from gateway.yamlstrict.walk import Field, Section, Walker

MAX_SECONDS = 30 * 86_400.0  # no duration in the file needs more than 30 days
STDOUT_PATH = "-"
INSTANCE_PLACEHOLDER = "{instance}"

_ID_RE = re.compile(r"[A-Za-z0-9._-]{1,64}\Z")
_ENV_NAME_RE = re.compile(r"[A-Z_][A-Z0-9_]*\Z")
_PLACEHOLDER_RE = re.compile(r"\{[^{}]*\}")
CONTROL_RE = re.compile(r"[\x00-\x1f\x7f]")
_REDIS_DB_RE = re.compile(r"/?(?:[0-9]{1,5})?\Z")


class ConfigWalker(Walker):
    """A walker that knows the folder relative paths in the file resolve against."""

    base_dir: str = "."


def _base_dir(w: Walker) -> str:
    return w.base_dir if isinstance(w, ConfigWalker) else os.getcwd()


def file_problem(resolved: str) -> str | None:
    """Why `resolved` is not a readable regular file, or None."""
    try:
        if os.path.isfile(resolved):
            if os.access(resolved, os.R_OK):
                return None
            what = "not readable by this user"
        else:
            what = "is a directory" if os.path.isdir(resolved) else "no such file"
    except (OSError, ValueError):
        what = "cannot be checked"
    return f"{what}: {resolved}"


def read_path(
    w: Walker,
    node: Node,
    path: str,
    *,
    must_exist: bool = True,
    allow_stdout: bool = False,
    template: bool = False,
) -> str | None:
    """A file path resolved against the configuration's folder (`-` kept when allowed)."""
    text = w.string(node, path)
    if text is None:
        return None
    if not text.strip():
        w.error(node, "bad_path", f"{path} must not be empty (write null for the default)")
        return None
    if CONTROL_RE.search(text):
        w.error(node, "bad_path", f"{path} must be a file path without control characters")
        return None
    if allow_stdout and text == STDOUT_PATH:
        return text
    if template:
        for match in _PLACEHOLDER_RE.finditer(text):
            if match.group() != INSTANCE_PLACEHOLDER:
                w.error(
                    node,
                    "bad_path",
                    f"{path}: unknown placeholder {match.group()}; the only one is "
                    f"{INSTANCE_PLACEHOLDER}",
                )
                return None
    resolved = os.path.normpath(os.path.join(_base_dir(w), text))
    if must_exist:
        problem = file_problem(resolved)
        if problem:
            hint = "; '~' is not expanded, write the full path" if text.startswith("~") else ""
            w.error(node, "missing_file", f"{path}: {problem}{hint}")
            return None
    return resolved


def path_field(**options: bool) -> Field:
    return Field(lambda w, n, p: read_path(w, n, p, **options), None)


def path_list_field() -> Field:
    """Existing files, each once (a repeat is an error)."""
    return Field(
        lambda w, node, path: w.unique_items(
            node,
            path,
            lambda item, where: read_path(w, item, where),
            duplicates=Severity.ERROR,
            shown=lambda resolved, _: resolved,
        ),
        (),
    )


def _read_seconds(w: Walker, node: Node, path: str, *, allow_zero: bool) -> float | None:
    kind = "a non-negative" if allow_zero else "a positive"
    expected = f"{kind} number of seconds up to {MAX_SECONDS:.0f} (30 days)"
    if (
        isinstance(node, ScalarNode)
        and node.tag == FLOAT_TAG
        and node.value.lower().lstrip("+-") in (".inf", ".nan")
    ):
        w.error(node, "out_of_range", f"{path} must be {expected}, got {node.value}")
        return None
    value = w.number(node, path)
    if value is None:
        return None
    low_ok = value >= 0 if allow_zero else value > 0
    if not low_ok or value > MAX_SECONDS:
        shown = node.value if isinstance(node, ScalarNode) else value
        w.error(node, "out_of_range", f"{path} must be {expected}, got {shown}")
        return None
    return value


def seconds_field(default: float | None, *, allow_zero: bool = False) -> Field:
    return Field(lambda w, n, p: _read_seconds(w, n, p, allow_zero=allow_zero), default)


def is_valid_id(text: str) -> bool:
    """An id (client, provider, instance): 1 to 64 letters, digits, '.', '_' or '-', not
    only dots (it names files and audit chains)."""
    return bool(_ID_RE.match(text)) and set(text) != {"."}


def read_id(w: Walker, node: Node, path: str) -> str | None:
    text = w.string(node, path)
    if text is None:
        return None
    if not is_valid_id(text):
        w.error(
            node,
            "bad_id",
            f"{path} must be 1 to 64 letters, digits, '.', '_' or '-' (not only dots), "
            f"got {text[:70]!r}",
        )
        return None
    return text


def claim_unique(
    w: Walker,
    entry: Section,
    key: str,
    owners: dict[str, str],
    where: str,
    *,
    code: str = "duplicate_id",
    secret: bool = False,
    advice: str = "",
) -> None:
    """Record that the entry at `where` owns its valid `key` value, or report (and mark
    invalid) a value an earlier entry already owns; a `secret` value is never shown."""
    value = entry[key]
    if value is None or not entry.valid(key):
        return
    owner = owners.setdefault(value, where)
    if owner == where:
        return
    if secret:
        message = f"{where}.{key} is the same as {owner}'s{advice}"
    else:
        message = f"{where}.{key}: {value!r} is already the {key} of {owner}{advice}"
    w.error(entry.nodes[key], code, message)
    entry.invalid.add(key)


def read_env_name(w: Walker, node: Node, path: str) -> str | None:
    if not (isinstance(node, ScalarNode) and node.tag == STR_TAG):
        # Never `describe` the value: it may be the key itself, pasted in by mistake.
        if not w.is_reported(node):
            w.error(node, "wrong_type", f"{path} must be the name of an environment variable")
        return None
    text = str(node.value)
    if not _ENV_NAME_RE.match(text) or len(text) > 128:
        w.error(
            node,
            "bad_env_name",
            f"{path} must name an environment variable (upper-case letters, digits and '_', "
            "e.g. BRAVE_API_KEY) that holds the key, never the key itself",
        )
        return None
    return text


def read_http_url(w: Walker, node: Node, path: str) -> str | None:
    text = w.string(node, path)
    if text is None:
        return None
    try:
        parse_url(text)
    except InvalidURLError as exc:
        w.error(node, "bad_url", f"{path} must be an absolute http(s) URL: {exc}")
        return None
    raw = yarl.URL(text.strip(), encoded=True)
    if raw.raw_query_string or raw.raw_fragment or "?" in text or "#" in text:
        w.error(node, "bad_url", f"{path} must not carry a query or fragment")
        return None
    return text.strip()


def read_redis_url(w: Walker, node: Node, path: str) -> str | None:
    # The URL may carry a password: messages describe the problem, never the value.
    text = w.string(node, path)
    if text is None:
        return None
    problem = None
    try:
        url = yarl.URL(text)
    except (ValueError, TypeError):
        problem = "it does not parse"
    else:
        if url.scheme not in ("redis", "rediss"):
            problem = "the scheme must be redis:// or rediss:// (TLS)"
        elif not url.host:
            problem = "it names no host"
        elif not _REDIS_DB_RE.match(url.raw_path) or url.raw_fragment:
            problem = "the path may only be a database number (redis://host:6379/0)"
    if problem or CONTROL_RE.search(text):
        w.error(node, "bad_url", f"{path} must be a redis:// or rediss:// URL: {problem}")
        return None
    return text


def read_listen_host(w: Walker, node: Node, path: str) -> str | None:
    text = w.string(node, path)
    if text is None:
        return None
    normalised, problem = listen_host(text)
    if problem:
        w.error(node, "bad_value", f"{path}: {problem}")
        return None
    return normalised


def listen_host(text: str) -> tuple[str, str | None]:
    """(normalised host, None), or (text, why it cannot be listened on)."""
    if text.startswith("[") and text.endswith("]"):
        return text, f"write {text[1:-1]!r} without brackets"
    try:
        ip = ipaddress.ip_address(text)
    except ValueError:
        pass
    else:
        if isinstance(ip, ipaddress.IPv6Address) and ip.scope_id:
            return text, "IPv6 zone identifiers are not supported; use an address without '%'"
        return ip.compressed, None
    try:
        return normalize_name(text), None
    except HostError as exc:
        return text, f"{text[:70]!r} is neither an IP address nor a host name: {exc}"
