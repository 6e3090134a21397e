"""The manifest written beside each backup on the claim (pure): what ``status.backups`` says of
it, so that the claim describes its backups by itself once the Shard and its status are gone.

``<shard>/<name>.json`` beside ``<shard>/<name>.db``: the Shard it was taken of (name,
namespace, UID) and the backup's entry as the status lists it (time, trigger, kcp version, data
UID, size, sha256, what etcdutl read). Written after the snapshot is verified, replaced
atomically (a ``.part`` renamed), removed with the snapshot by retention.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

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


@dataclass(frozen=True)
class Imported:
    """A backup found on the claim: its entry as the status would list it, and the Shard it
    was taken of (``namespace/name``, UID)."""

    entry: JSON
    shard: JSON


REQUIRED = {"name": str, "time": str, "kcpVersion": str, "path": str, "sha256": str, "size": int}
TYPE_NAMES = {str: "a string", int: "an integer"}


def imported(text: str, name: str) -> Imported | str:
    """The manifest of backup ``name`` read from the claim, or why it cannot be restored from
    (naming the field): for a restore into a Shard whose status no longer lists it."""
    try:
        found = json.loads(text)
    except ValueError as err:
        return f"the manifest of backup {name} is not JSON ({err})"
    if not isinstance(found, dict):
        return f"the manifest of backup {name} is not a JSON object"
    if (found.get("apiVersion"), found.get("kind")) != (API_VERSION, KIND):
        return f"the manifest of backup {name} is not a {API_VERSION} {KIND}"
    entry, shard = found.get("backup"), found.get("shard")
    if not isinstance(entry, dict) or not isinstance(shard, dict):
        return f"the manifest of backup {name} lacks its backup or its shard"
    for key, kind in REQUIRED.items():
        if not isinstance(entry.get(key), kind) or isinstance(entry.get(key), bool):
            return (
                f"the manifest of backup {name}: backup.{key} is missing or not {TYPE_NAMES[kind]}"
            )
    if entry["name"] != name:
        return f"the manifest of backup {name} describes backup {entry['name']}"
    path = str(entry["path"])
    directory = path.rpartition("/")[0]
    parts = path.split("/")
    if path != f"{directory}/{name}.db" or not all(parts) or ".." in parts:
        return f"the manifest of backup {name}: backup.path {path!r} is not <shard>/{name}.db"
    digest = str(entry["sha256"])
    if len(digest) != 64 or any(c not in "0123456789abcdef" for c in digest):
        return f"the manifest of backup {name}: backup.sha256 is not a sha256 digest"
    return Imported(dict(entry), dict(shard))
