"""The backups a backup claim holds, listed without a Shard (pure): the short-lived pod that
prints their manifests, and what its log says.

A claim left from a deleted Shard has no status to list its backups, and no running shard
whose sidecar could read them. ``kcp-shard-operator backups --claim`` runs this pod on the
backup image instead: non-root, a read-only root filesystem, the claim mounted read-only, no
ServiceAccount token, owned by nothing (the CLI deletes it; ``activeDeadlineSeconds`` ends it
should the CLI be killed first). It prints each ``<shard>/<name>.json`` after a header line;
each is parsed as a restore into a new Shard parses it (:func:`manifest.parse`).
"""

from __future__ import annotations

from dataclasses import dataclass

from kcp_shard_operator.constants import API_GROUP
from kcp_shard_operator.core.api.meta import NAME_LABEL
from kcp_shard_operator.core.api.model import JSON
from kcp_shard_operator.core.backup.manifest import IMPORTED_FROM, SUFFIX, ManifestError, parse
from kcp_shard_operator.core.backup.record import parse_time
from kcp_shard_operator.core.backup.snapshot import BACKUP_MOUNT, BUSYBOX
from kcp_shard_operator.core.kcp.podtemplate import (
    container_security_context,
    pod_security_context,
)

HEADER = "==> "
"""Starts the line before each manifest: no line of a JSON document starts so."""
LISTING_NAME = "kcp-backup-listing"
CLAIM_ANNOTATION = f"{API_GROUP}/backup-claim"
DEADLINE_SECONDS = 600
"""The pod ends by itself after this, should the CLI that made it not delete it."""
SCRIPT = "\n".join(
    [
        f"cd {BACKUP_MOUNT}",
        f"for file in */*{SUFFIX}; do",
        '  [ -f "$file" ] || continue',
        f'  echo "{HEADER}$file"',
        f'  {BUSYBOX} cat "$file"',
        "  echo",
        "done",
    ]
)


def listing_pod(claim: str, namespace: str, name: str, image: str) -> JSON:
    """The pod ``namespace/name`` printing the manifests on the claim ``claim``."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "labels": {
                NAME_LABEL: LISTING_NAME,
                "app.kubernetes.io/component": "backup",
                "app.kubernetes.io/managed-by": "kcp-shard-operator",
            },
            "annotations": {CLAIM_ANNOTATION: claim},
        },
        "spec": {
            "restartPolicy": "Never",
            "activeDeadlineSeconds": DEADLINE_SECONDS,
            "automountServiceAccountToken": False,
            "enableServiceLinks": False,
            "securityContext": pod_security_context(),
            "containers": [
                {
                    "name": "list",
                    "image": image,
                    "command": [BUSYBOX, "sh", "-ec", SCRIPT],
                    "resources": {
                        "requests": {"cpu": "10m", "memory": "16Mi"},
                        "limits": {"memory": "64Mi"},
                    },
                    "securityContext": container_security_context(),
                    "volumeMounts": [
                        {"name": "backups", "mountPath": BACKUP_MOUNT, "readOnly": True}
                    ],
                }
            ],
            "volumes": [
                {
                    "name": "backups",
                    "persistentVolumeClaim": {"claimName": claim, "readOnly": True},
                }
            ],
        },
    }


@dataclass(frozen=True)
class Listed:
    """A backup on the claim: the Shard it was taken of and its entry as its status listed it."""

    shard: str
    entry: JSON


@dataclass(frozen=True)
class Listing:
    """What the pod's log holds: the backups, newest first, and the manifests it could not use
    (the file and why)."""

    backups: list[Listed]
    unusable: list[str]


def parse_listing(log: str, claim: str) -> Listing:
    """The backups the pod's ``log`` describes, each manifest parsed as a restore would."""
    documents: dict[str, list[str]] = {}
    current: list[str] | None = None
    for line in log.splitlines():
        if line.startswith(HEADER):
            current = documents.setdefault(line.removeprefix(HEADER), [])
        elif current is not None:
            current.append(line)
    backups: list[Listed] = []
    unusable: list[str] = []
    for path, lines in documents.items():
        name = path.rsplit("/", 1)[-1].removesuffix(SUFFIX)
        try:
            entry = parse("\n".join(lines), name, claim)
        except ManifestError as err:
            unusable.append(f"{path}: {err}")
            continue
        origin = entry.pop(IMPORTED_FROM)
        backups.append(Listed(str(origin["name"]), entry))
    backups.sort(key=lambda found: parse_time(str(found.entry["time"])), reverse=True)
    return Listing(backups, unusable)
