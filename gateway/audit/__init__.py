"""The tamper-evident audit log: the chained JSONL writer with checkpoints, URL
redaction, the verifier, and the reviewers' summary and tail. Records are built by the tools;
this package adds `@timestamp`, `observer` and `chain`, and never decides anything itself.
"""

from __future__ import annotations

from gateway.audit.chain import AuditAction, CheckpointPayload
from gateway.audit.log import AuditLog
from gateway.audit.redaction import redact_url
from gateway.audit.verify import FileReport, verify_files

__all__ = [
    "AuditAction",
    "AuditLog",
    "CheckpointPayload",
    "FileReport",
    "redact_url",
    "verify_files",
]
