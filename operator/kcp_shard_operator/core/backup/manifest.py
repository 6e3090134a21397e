"""The manifest written beside each backup on the claim (pure): what ``status.backups`` says of
it, so that the claim describes its backups by itself once the Shard and its status are gone.

``<shard>/<name>.json`` beside ``<shard>/<name>.db``: the Shard it was taken of (name,
namespace, UID) and the backup's entry as the status lists it (time, trigger, kcp version, data
UID, size, sha256, what etcdutl read). Written after the snapshot is verified, replaced
atomically (a ``.part`` renamed), removed with the snapshot by retention.
"""

from __future__ import annotations

import json

from kcp_shard_operator.constants import API_GROUP
from kcp_shard_operator.core.api.model import JSON
from kcp_shard_operator.core.backup.snapshot import BACKUP_MOUNT, BUSYBOX

KIND = "BackupManifest"
API_VERSION = f"{API_GROUP}/v1alpha1"
SUFFIX = ".json"


def manifest_path(path: str) -> str:
    """Where the manifest of the backup at ``path`` (``<shard>/<name>.db``) lies."""
    return path.removesuffix(".db") + SUFFIX


def manifest(entry: JSON, name: str, namespace: str, uid: str) -> JSON:
    """The manifest of the backup ``entry`` of Shard ``namespace/name`` (UID ``uid``)."""
    return {
        "apiVersion": API_VERSION,
        "kind": KIND,
        "shard": {"name": name, "namespace": namespace, "uid": uid},
        "backup": dict(entry),
    }


def write(path: str, content: JSON) -> list[str]:
    """The sidecar's command writing ``content`` at ``path`` on the claim: the JSON is an
    argument of the script (never part of it), written to a ``.part`` renamed when complete."""
    target = f"{BACKUP_MOUNT}/{path}"
    script = f'{BUSYBOX} printf "%s\\n" "$1" > "$2.part" && {BUSYBOX} mv "$2.part" "$2"'
    text = json.dumps(content, sort_keys=True, separators=(",", ":"))
    return [BUSYBOX, "sh", "-c", script, "manifest", text, target]


def with_manifests(paths: list[str]) -> list[str]:
    """``paths`` of backups and the paths of their manifests, for retention to remove both."""
    return [found for path in paths for found in (path, manifest_path(path))]
