"""`gateway config check`: a configuration file and every policy it names, checked as `serve`
would load them, with what only shows at run time reported too (a provider's API key missing
from the environment, a key file that is not an Ed25519 key, a bind `serve` would refuse).

Every problem is a `FILE:LINE:COL: code: message` line, warnings written `warning[code]`, as
`gateway policy check` prints them; nothing here touches the network.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from yaml.nodes import MappingNode

from gateway.config import GatewayConfig
from gateway.configload.load import MAX_CONFIG_BYTES, ConfigError, load_config_file
from gateway.configload.serving import check_bind_safety, default_instance_id
from gateway.configload.values import INSTANCE_PLACEHOLDER, STDOUT_PATH
from gateway.policy.load import PolicyValidationError, load_policy_file
from gateway.yamlstrict.issues import Issue, Severity, SourceError
from gateway.yamlstrict.source import compose, read_bounded


@dataclass(slots=True)
class CheckResult:
    """Every issue found, in file order per file, and one summary line per usable file."""

    issues: list[Issue] = field(default_factory=list)
    summaries: list[str] = field(default_factory=list)
    config: GatewayConfig | None = None

    @property
    def valid(self) -> bool:
        return self.config is not None and not any(i.is_error for i in self.issues)

    def lines(self) -> list[str]:
        return [str(issue) for issue in self.issues] + self.summaries


def check_config(path: str, *, environ: Mapping[str, str] | None = None) -> CheckResult:
    """The configuration at `path`, then each policy it names (the embedded default when it
    names none), then what the environment must provide."""
    result = CheckResult()
    warnings: list[Issue] = []
    try:
        config = load_config_file(path, warnings=warnings)
    except ConfigError as exc:
        result.issues.extend(exc.issues)
        return result
    result.issues.extend(warnings)
    try:
        check_bind_safety(config)
    except ConfigError as exc:
        result.issues.extend(_at_key(path, ("listen", "host"), issue) for issue in exc.issues)
    result.issues.extend(missing_api_keys(config, path, os.environ if environ is None else environ))
    result.issues.extend(unusable_keys(config, path))
    result.issues.extend(unwritable_audit(config, path))
    result.config = config
    policies = _named_policies(config)
    for policy_path in policies:
        shown = display_path(policy_path)
        try:
            policy, policy_warnings = load_policy_file(shown)
        except PolicyValidationError as exc:
            result.issues.extend(exc.issues)
            continue
        result.issues.extend(policy_warnings)
        result.summaries.append(f"{shown}: ok (name {policy.name}, sha256 {policy.sha256})")
    if not policies:
        result.summaries.append("policy: the embedded default (no policy file named)")
    errors = sum(1 for issue in result.issues if issue.is_error)
    if errors:  # never "ok" under an error: serve would not start with this file
        result.summaries.append(
            f"{path}: {errors} error{'s' if errors != 1 else ''}; `gateway serve` would refuse it"
        )
        return result
    clients = len(config.clients)
    result.summaries.append(
        f"{path}: ok ({clients} client{'s' if clients != 1 else ''}, "
        f"{len(policies)} polic{'ies' if len(policies) != 1 else 'y'})"
    )
    return result


def unwritable_audit(config: GatewayConfig, path: str) -> list[Issue]:
    """An audit folder (or checkpoints file) that `serve` could not open: a read-only or
    unwritable folder, a file where a folder should be, a folder where the file should be.
    Checked with the default instance id; a folder that does not exist yet is fine when the
    nearest existing one can hold it (serve makes it)."""
    instance = config.instance_id or default_instance_id()
    issues = []
    for key, target in (
        ("path", config.audit.path),
        ("checkpoints_path", config.audit.checkpoints_path),
    ):
        if target is None or target == STDOUT_PATH:
            continue
        problem = _write_problem(target.replace(INSTANCE_PLACEHOLDER, instance))
        if problem is None:
            continue
        line, col = _key_position(path, ("audit", key))
        written = "" if (line, col) != (1, 1) else " (its default)"
        issues.append(
            Issue(
                path,
                line,
                col,
                "unwritable_audit",
                f"audit.{key}{written}: {problem}; `gateway serve` could not open its audit "
                "log there. Point audit.path at a writable folder (in a container, a volume)",
            )
        )
    return issues


def _write_problem(file_path: str) -> str | None:
    """Why a process could not create or append to `file_path`, or None."""
    if os.path.isdir(file_path):
        return f"{file_path} is a folder, not a file"
    if os.path.lexists(file_path):
        if not os.path.isfile(file_path):
            return f"{file_path} is not a regular file"
        return None if os.access(file_path, os.W_OK) else f"{file_path} is not writable"
    folder = os.path.dirname(os.path.abspath(file_path))
    while not os.path.lexists(folder):
        folder = os.path.dirname(folder)
    if not os.path.isdir(folder):
        return f"{folder} is a file where a folder should be"
    if not os.access(folder, os.W_OK | os.X_OK):
        return f"the folder {folder} is not writable (read-only file system or permissions)"
    return None


def missing_api_keys(config: GatewayConfig, path: str, environ: Mapping[str, str]) -> list[Issue]:
    """A search provider whose API key variable is unset would fail at its first search; say
    so now, at the line that names the variable."""
    text = _read_text(path)
    issues = []
    for i, provider in enumerate(config.search.providers or ()):  # the automatic chain: none
        name = provider.api_key_env
        if name is None or environ.get(name):
            continue
        line, col = _position_of(text, name)
        issues.append(
            Issue(
                path,
                line,
                col,
                "missing_env",
                f"search.providers[{i}] ({provider.id}): the environment variable {name} is not "
                f"set here, so {provider.kind} searches would fail; set it where the gateway runs",
                Severity.WARNING,
            )
        )
    return issues


def unusable_keys(config: GatewayConfig, path: str) -> list[Issue]:
    """Key files that exist but that `serve` could not load (not PEM, not Ed25519)."""
    from gateway.provenance.dsse import DSSEError, Signer, load_public_key

    text = _read_text(path)
    issues = []
    checks: list[tuple[str, str | None, Callable[[str], object]]] = [
        ("signing_key", config.signing_key, Signer.from_pem_file)
    ]
    checks += [
        (f"retired_keys[{i}]", key, load_public_key) for i, key in enumerate(config.retired_keys)
    ]
    for where, key_path, load in checks:
        if key_path is None:
            continue
        try:
            load(key_path)
        except DSSEError as exc:
            line, col = _position_of(text, where.split("[", 1)[0] + ":")
            issues.append(Issue(path, line, col, "bad_key", f"{where}: {exc}"))
    return issues


def _named_policies(config: GatewayConfig) -> list[str]:
    paths = [config.policy, *(client.policy for client in config.clients)]
    return list(dict.fromkeys(p for p in paths if p is not None))


def display_path(path: str) -> str:
    """A path as the user would type it: relative to the working directory when inside it."""
    relative = os.path.relpath(path)
    return path if relative.startswith("..") else relative


def _at_key(path: str, keys: tuple[str, ...], issue: Issue) -> Issue:
    """A check across the whole file (the bind rule) reported at the key that decides it."""
    line, col = _key_position(path, keys)
    return Issue(path, line, col, issue.code, issue.message, issue.severity)


def _key_position(path: str, keys: tuple[str, ...]) -> tuple[int, int]:
    """The 1-based line and column of the deepest of `keys` (a path of mapping keys, e.g.
    listen, host) the file writes; 1:1 when it writes none of them (a default decides)."""
    try:
        document = compose(read_bounded(path, max_bytes=MAX_CONFIG_BYTES), source=path)
    except SourceError:
        return 1, 1
    node, found = document.root, (1, 1)
    for key in keys:
        if not isinstance(node, MappingNode):
            break
        match = next((pair for pair in node.value if pair[0].value == key), None)
        if match is None:
            break
        found = (match[0].start_mark.line + 1, match[0].start_mark.column + 1)
        node = match[1]
    return found


def _read_text(path: str) -> str:
    try:
        with open(path, "rb") as handle:
            return handle.read(1 << 20).decode("utf-8", "replace")
    except OSError:
        return ""


def _position_of(text: str, needle: str) -> tuple[int, int]:
    """The 1-based line and column of the first `needle` outside a comment, else 1:1."""
    for number, line in enumerate(text.splitlines(), start=1):
        col = line.split("#", 1)[0].find(needle)
        if col >= 0:
            return number, col + 1
    return 1, 1
