"""Audit of a kcp server (pure): the spec's ``audit`` block, the default policy, and the
flags, volumes and mounts it renders to.

kcp takes the Kubernetes API server's audit flags (``--audit-policy-file``,
``--audit-log-path`` and the ``--audit-log-max*`` rotation flags) unchanged in every kcp
version the operator supports (0.27.1 lists them in ``kcp start options``; they come from
the embedded control plane's options), so they are no row of the flag table.
"""

from __future__ import annotations

from dataclasses import dataclass

import yaml

from kcp_shard_operator.core.api.model import JSON, SpecError, field
from kcp_shard_operator.core.api.quantity import quantity
from kcp_shard_operator.core.kcp.podtemplate import Pod

POLICY_KEY = "policy.yaml"
POLICY_DIRECTORY = "/etc/kcp/audit"
LOG_DIRECTORY = "/var/log/kcp-audit"
STDOUT = "-"
DEFAULT_POLICY: JSON = {
    "apiVersion": "audit.k8s.io/v1",
    "kind": "Policy",
    "omitStages": ["RequestReceived"],
    "rules": [
        {
            "level": "None",
            "nonResourceURLs": ["/healthz*", "/livez*", "/readyz*", "/version", "/openapi*"],
        },
        {"level": "None", "verbs": ["get", "list", "watch"]},
        {"level": "None", "resources": [{"group": "", "resources": ["events"]}]},
        {"level": "None", "resources": [{"group": "coordination.k8s.io", "resources": ["leases"]}]},
        {"level": "Metadata"},
    ],
}
"""Who changed what, when: every write at ``Metadata`` (user, groups, verb, object, answer;
never a body, so no Secret's data), without reads, Events, leases and health checks."""


@dataclass(frozen=True)
class ConfigMapKeyRef:
    """A key of a ConfigMap in the object's namespace."""

    name: str = field("name", "Name of the ConfigMap.", minLength=1)
    key: str = field("key", "Key in the ConfigMap.", default=POLICY_KEY, minLength=1)


@dataclass(frozen=True)
class AuditLogFileSpec:
    """The audit log as a file on a volume, rotated by kcp."""

    claim_name: str | None = field(
        "claimName",
        "PersistentVolumeClaim (same namespace) the log is written to; it must allow the "
        "shard's pods to mount it. Unset: an emptyDir (the log goes with the pod).",
        default=None,
    )
    size_limit: str = field(
        "sizeLimit",
        "Size limit of the emptyDir (without claimName).",
        default="1Gi",
        maxLength=32,
    )
    max_age_days: int = field(
        "maxAgeDays", "Days a rotated file is kept (--audit-log-maxage).", default=7, minimum=0
    )
    max_backups: int = field(
        "maxBackups",
        "Rotated files kept (--audit-log-maxbackup).",
        default=10,
        minimum=0,
    )
    max_size_mb: int = field(
        "maxSizeMB",
        "Megabytes a file grows to before it is rotated (--audit-log-maxsize).",
        default=100,
        minimum=1,
    )
    compress: bool = field("compress", "gzip rotated files (--audit-log-compress).", default=False)


@dataclass(frozen=True)
class AuditSpec:
    """What kcp audits and where the log goes."""

    policy_config_map_ref: ConfigMapKeyRef | None = field(
        "policyConfigMapRef",
        "The audit policy (an audit.k8s.io/v1 Policy) in a ConfigMap; kcp reads it at start. "
        "Unset: the operator's default (every write at Metadata level, no reads), in the "
        "ConfigMap <name>-kcp-audit-policy.",
        default=None,
    )
    log_file: AuditLogFileSpec | None = field(
        "logFile",
        "Write the log to a file on a volume, rotated. Unset: to the container's stdout "
        "(kubectl logs), one JSON event a line.",
        default=None,
    )


def check_audit(audit: AuditSpec | None) -> None:
    log = audit.log_file if audit is not None else None
    if log is not None and not log.claim_name:
        size = quantity(log.size_limit)
        if size is None or size <= 0:
            raise SpecError(
                "spec.audit.logFile.sizeLimit",
                f"{log.size_limit!r} is not a positive quantity (e.g. 1Gi)",
            )


def default_policy() -> str:
    return yaml.safe_dump(DEFAULT_POLICY, sort_keys=False)


def audit_flags(pod: Pod, audit: AuditSpec, default_config_map: str) -> None:
    """Add the audit flags to ``pod`` and mount what they name: the policy from its
    ConfigMap (``default_config_map`` when the spec names none) and the log's volume."""
    ref = audit.policy_config_map_ref or ConfigMapKeyRef(default_config_map)
    pod.volumes.append(
        {
            "name": "audit-policy",
            "configMap": {
                "name": ref.name,
                "items": [{"key": ref.key, "path": POLICY_KEY}],
                "defaultMode": 0o440,
            },
        }
    )
    pod.mounts.append({"name": "audit-policy", "mountPath": POLICY_DIRECTORY, "readOnly": True})
    pod.args.append(f"--audit-policy-file={POLICY_DIRECTORY}/{POLICY_KEY}")
    log = audit.log_file
    if log is None:
        pod.args.append(f"--audit-log-path={STDOUT}")
        return
    volume: JSON = (
        {"persistentVolumeClaim": {"claimName": log.claim_name}}
        if log.claim_name
        else {"emptyDir": {"sizeLimit": log.size_limit}}
    )
    pod.volumes.append({"name": "audit-log", **volume})
    pod.mounts.append({"name": "audit-log", "mountPath": LOG_DIRECTORY})
    pod.args += [
        f"--audit-log-path={LOG_DIRECTORY}/audit.log",
        f"--audit-log-maxage={log.max_age_days}",
        f"--audit-log-maxbackup={log.max_backups}",
        f"--audit-log-maxsize={log.max_size_mb}",
    ]
    if log.compress:
        pod.args.append("--audit-log-compress")


AUDIT_FLAGS = (
    "--audit-policy-file",
    "--audit-log-path",
    "--audit-log-maxage",
    "--audit-log-maxbackup",
    "--audit-log-maxsize",
    "--audit-log-compress",
)
"""What ``spec.audit`` renders: extra arguments may not set them too."""
