"""The manifest written beside each backup on the claim (pure): what ``status.backups`` says of
it, so that the claim describes its backups by itself once the Shard and its status are gone.

``<shard>/<name>.json`` beside ``<shard>/<name>.db``: the Shard it was taken of (name,
namespace, UID) and the backup's entry as the status lists it (time, trigger, kcp version, data
UID, size, sha256, what etcdutl read). Written after the snapshot is verified, replaced
atomically (a ``.part`` renamed), removed with the snapshot by retention.

A restore into a new Shard reads it back (:func:`read`, :func:`parse`): the backup a Shard's
status does not list is looked up on its backup claim, checked field by field, and imported
into ``status.backups`` marked ``importedFrom`` (retention never removes its files).
"""

from __future__ import annotations

import json
import re

from kcp_shard_operator.constants import API_GROUP
from kcp_shard_operator.core.api.model import JSON
from kcp_shard_operator.core.backup.record import Trigger, backup_path, parse_time
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


IMPORTED_FROM = "importedFrom"
"""The field of an entry imported from a manifest: the Shard the backup was taken of."""
_NAME = re.compile(r"^(?P<shard>[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?)-\d{8}T\d{6}Z$")
_SHA256 = re.compile(r"^[0-9a-f]{64}$")


class ManifestError(ValueError):
    """A manifest that cannot be used, naming the field."""


def shard_of(name: str) -> str:
    """The Shard a backup named ``name`` (``<shard>-<UTC time>``) was taken of, whose
    directory on the claim holds it; a name of another form (a path, ``..``) is refused."""
    found = _NAME.match(name)
    if found is None:
        raise ManifestError(
            f"backup name {name!r} is not <shard>-<YYYYMMDDTHHMMSSZ> (the names the operator "
            "gives its backups): no manifest to look up"
        )
    return found.group("shard")


def named(name: str) -> bool:
    """Whether ``name`` has the form of the operator's backup names (so that its manifest may
    be looked up on the claim)."""
    return _NAME.match(name) is not None


def read(name: str) -> list[str]:
    """The sidecar's command printing the manifest of backup ``name`` on the claim."""
    return [BUSYBOX, "cat", f"{BACKUP_MOUNT}/{manifest_path(backup_path(shard_of(name), name))}"]


def parse(text: str, name: str, claim: str | None, found_at: JSON | None = None) -> JSON:
    """The ``status.backups`` entry the manifest ``text`` of backup ``name`` describes, on the
    backup claim ``claim`` now (or, ``claim`` None, in the bucket and at the key ``found_at``
    names: :func:`~kcp_shard_operator.core.backup.s3.entry_fields`' bucket, key, location),
    marked :data:`IMPORTED_FROM` its Shard; :class:`ManifestError` naming the field it cannot
    use."""
    try:
        found = json.loads(text)
    except ValueError as err:
        raise ManifestError(f"not JSON ({err})") from None
    if not isinstance(found, dict):
        raise ManifestError("not a JSON object")
    if found.get("kind") != KIND or found.get("apiVersion") != API_VERSION:
        raise ManifestError(
            f"kind/apiVersion are {found.get('kind')!r}/{found.get('apiVersion')!r}, not "
            f"{KIND}/{API_VERSION}"
        )
    shard = _object(found, "shard")
    for field in ("name", "namespace", "uid"):
        _text(shard, field, "shard")
    entry = _object(found, "backup")
    if _text(entry, "name", "backup") != name:
        raise ManifestError(f"backup.name is {entry['name']!r}, not the backup asked, {name!r}")
    try:
        parse_time(_text(entry, "time", "backup"))
    except ValueError:
        raise ManifestError(f"backup.time {entry['time']!r} is not an RFC 3339 time") from None
    if entry.get("trigger") not in {trigger.value for trigger in Trigger}:
        raise ManifestError(f"backup.trigger {entry.get('trigger')!r} is not a trigger")
    _text(entry, "kcpVersion", "backup")
    _under_claim(_text(entry, "path", "backup"))
    if not _SHA256.match(_text(entry, "sha256", "backup")):
        raise ManifestError(f"backup.sha256 {entry['sha256']!r} is not 64 hex digits")
    for field in ("size", "revision", "keys"):
        value = entry.get(field)
        if not isinstance(value, int) or isinstance(value, bool) or value < 0:
            raise ManifestError(f"backup.{field} {value!r} is not a count")
    for field in ("dataUID", "installation", "upgradeTo"):
        if field in entry:
            _text(entry, field, "backup")
    origin = {field: shard[field] for field in ("name", "namespace", "uid")}
    if claim is None:
        where = {**(found_at or {})}
        return {
            **{k: v for k, v in entry.items() if k != "claim"},
            **where,
            IMPORTED_FROM: origin,
        }
    kept = {k: v for k, v in entry.items() if k not in ("bucket", "key", "location")}
    return {**kept, "claim": claim, IMPORTED_FROM: origin}


def _object(found: JSON, field: str) -> JSON:
    value = found.get(field)
    if not isinstance(value, dict):
        raise ManifestError(f"{field} is missing or not an object")
    return value


def _text(found: JSON, field: str, within: str) -> str:
    value = found.get(field)
    if not isinstance(value, str) or not value:
        raise ManifestError(f"{within}.{field} is missing or not a string")
    return value


def _under_claim(path: str) -> None:
    """A snapshot path the Job may read: relative, under the claim's mount, a ``.db`` file."""
    parts = path.split("/")
    if path.startswith("/") or any(part in ("", ".", "..") for part in parts):
        raise ManifestError(f"backup.path {path!r} is not a path under the backup claim")
    if not path.endswith(".db"):
        raise ManifestError(f"backup.path {path!r} is not a snapshot (.db)")
