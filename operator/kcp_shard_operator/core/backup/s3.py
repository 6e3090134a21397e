"""The S3 target (pure): what ``s3copy`` (hack/s3copy, in the backup image) runs in the backup
sidecar and the restore Job, and what its answers mean.

A snapshot is taken and verified as for a claim, on the sidecar's scratch volume at
:data:`~kcp_shard_operator.core.backup.snapshot.BACKUP_MOUNT`; then uploaded with its sha256 as
object metadata, and removed from the scratch volume. ``s3copy`` reads the keys from the
Secret mounted at :data:`CREDENTIALS_MOUNT`, the CA bundle (if any) at :data:`CA_MOUNT`; it
answers one JSON object a line, and fails with one line and an exit code (:func:`failure`).
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from kcp_shard_operator.core.api.model import JSON
from kcp_shard_operator.core.backup.snapshot import BACKUP_MOUNT, AnswerError, Failure
from kcp_shard_operator.core.backup.spec import S3Target

S3COPY = "/s3copy"
CREDENTIALS_MOUNT = "/s3/credentials"
CA_MOUNT = "/s3/ca"
CREDENTIALS_VOLUME = "s3-credentials"
CA_VOLUME = "s3-ca"

TARGET_NOT_FOUND = "TargetNotFound"
ACCESS_DENIED = "AccessDenied"
CREDENTIALS_NOT_FOUND = "CredentialsNotFound"
UPLOAD_FAILED = "UploadFailed"

_NO_BUCKET, _ACCESS, _NO_KEYS, _DIGEST = 3, 4, 5, 6
"""The exit codes of s3copy the operator tells apart (hack/s3copy/main.go)."""


@dataclass(frozen=True)
class Uploaded:
    """What ``s3copy put`` answered."""

    key: str
    size: int
    sha256: str
    seconds: float


def command(target: S3Target, *args: str, bucket: str | None = None) -> list[str]:
    """``s3copy`` against ``target`` (``bucket``: another bucket than the spec's, the one a
    backup was written to)."""
    flags = [
        f"--endpoint={target.endpoint}",
        f"--bucket={bucket or target.bucket}",
        f"--credentials={CREDENTIALS_MOUNT}",
    ]
    if target.region is not None:
        flags.append(f"--region={target.region}")
    if target.ca_secret_ref is not None:
        flags.append(f"--ca-file={CA_MOUNT}/{target.ca_secret_ref.key}")
    return [S3COPY, *flags, *args]


def object_key(target: S3Target, namespace: str, shard: str, file: str) -> str:
    """The key of ``file`` (a backup's ``<name>.db`` or its manifest) of Shard ``shard``."""
    return f"{target.prefix_of(namespace, shard)}/{file}"


def location(bucket: str, key: str) -> str:
    return f"s3://{bucket}/{key}"


def check(target: S3Target) -> list[str]:
    """The bucket exists and the keys may list it: asked before a snapshot is taken."""
    return command(target, "check")


def put(target: S3Target, path: str, key: str) -> list[str]:
    return command(target, "put", f"{BACKUP_MOUNT}/{path}", key)


def get(target: S3Target, bucket: str, key: str, path: str) -> list[str]:
    """Download ``key`` of ``bucket`` to ``path`` under the scratch volume; s3copy checks the
    sha256 the object's metadata records before it renames the file into place."""
    return command(target, "get", key, f"{BACKUP_MOUNT}/{path}", bucket=bucket)


def cat(target: S3Target, key: str) -> list[str]:
    """Print a manifest of the bucket (its sha256 checked against its metadata)."""
    return command(target, "cat", key)


def delete(target: S3Target, bucket: str, keys: list[str]) -> list[str]:
    return command(target, "delete", *keys, bucket=bucket)


def uploaded(answer: str) -> Uploaded:
    """What ``s3copy put`` answered."""
    try:
        found = json.loads(answer)
        return Uploaded(
            str(found["key"]), int(found["size"]), str(found["sha256"]), float(found["seconds"])
        )
    except (ValueError, LookupError, TypeError):
        raise AnswerError(f"s3copy put: unexpected answer {answer.strip()[:200]!r}") from None


def failure(code: int, output: str, target: S3Target, bucket: str | None = None) -> Failure:
    """What a failed ``s3copy`` means, naming the field of spec.backup.s3 to look at."""
    text = output.strip()[-300:]
    bucket = bucket or target.bucket
    if code == _NO_BUCKET:
        return Failure(
            TARGET_NOT_FOUND,
            f"bucket {bucket} (spec.backup.s3.bucket) does not exist at {target.endpoint}: no "
            "snapshot taken, nothing deleted; the shard runs as before",
        )
    if code == _ACCESS:
        return Failure(
            ACCESS_DENIED,
            f"{target.endpoint} refused the keys of Secret {target.credentials_secret_ref.name} "
            f"(spec.backup.s3.credentialsSecretRef) for bucket {bucket} ({text}): nothing "
            "deleted; the shard runs as before",
        )
    if code == _NO_KEYS:
        return Failure(
            CREDENTIALS_NOT_FOUND,
            f"Secret {target.credentials_secret_ref.name} (spec.backup.s3.credentialsSecretRef) "
            f"is missing or lacks a key ({text}): no snapshot taken; the shard runs as before",
        )
    if code == _DIGEST:
        return Failure(UPLOAD_FAILED, f"the object's sha256 does not match: {text}")
    return Failure(UPLOAD_FAILED, f"s3copy exited {code}: {text}")


def entry_fields(bucket: str, key: str, upload: Uploaded) -> JSON:
    """What ``status.backups`` records of a backup in a bucket."""
    return {
        "bucket": bucket,
        "key": key,
        "location": location(bucket, key),
        "uploadSeconds": round(upload.seconds, 3),
    }
