"""The backup block of a Shard's spec (pure): where snapshots go, when, how many are kept."""

from __future__ import annotations

from dataclasses import dataclass

from kcp_shard_operator.core.api.model import SpecError, field
from kcp_shard_operator.core.api.refs import CASecretKeyRef, LocalObjectRef
from kcp_shard_operator.core.backup.schedule import CronError, parse_cron

BACKUP_ANNOTATION = "kcpshard.dev/backup"
"""Set to a new value (any: a time, a ticket) to ask for one backup now; the status records
the value handled as ``status.backup.lastRequest``."""
DEFAULT_KEEP = 7
DEFAULT_BACKUP_IMAGE = "kcp-shard-operator-backup:v3.6.5"
"""etcdctl and etcdutl of the etcd release the project pins, and a static busybox (hack/image.sh
backup): the image of the sidecar a snapshot runs in."""


@dataclass(frozen=True)
class RetentionSpec:
    """Which verified backups are kept; a backup is deleted when either rule says so, never the
    newest one."""

    keep: int = field(
        "keep",
        "How many backups of this shard are kept, newest first.",
        default=DEFAULT_KEEP,
        minimum=1,
        maximum=1000,
    )
    max_age_days: int | None = field(
        "maxAgeDays",
        "Backups older than this many days are deleted (the newest one is kept whatever its "
        "age). Unset: no limit by age.",
        default=None,
        minimum=1,
    )


S3_ENDPOINT_PATTERN = r"^https?://(\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9.-]+)(:[0-9]{1,5})?/?$"
S3_BUCKET_PATTERN = r"^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$"
ACCESS_KEY_ID = "accessKeyID"
SECRET_ACCESS_KEY = "secretAccessKey"


@dataclass(frozen=True)
class S3Target:
    """An S3-compatible bucket that receives the snapshots (AWS S3, SeaweedFS, Ceph RGW...).

    The keys and the CA are read by the backup sidecar and the restore Job, which mount them;
    the operator itself never reads them."""

    endpoint: str = field(
        "endpoint",
        "URL of the S3 API: https://host[:port] (http:// only for a store inside the cluster), "
        "e.g. https://s3.eu-west-1.amazonaws.com.",
        pattern=S3_ENDPOINT_PATTERN,
    )
    bucket: str = field(
        "bucket",
        "Bucket (made by you; the operator never makes or deletes one).",
        pattern=S3_BUCKET_PATTERN,
    )
    credentials_secret_ref: LocalObjectRef = field(
        "credentialsSecretRef",
        f"Secret (same namespace, made by you) with the keys {ACCESS_KEY_ID} and "
        f"{SECRET_ACCESS_KEY}; mounted into the backup sidecar and the restore Job.",
    )
    prefix: str | None = field(
        "prefix",
        "Key prefix of this shard's objects, without a trailing /. Unset: <namespace>/<shard "
        "name>.",
        default=None,
        pattern=r"^[^/\s]([^\s]*[^/\s])?$",
        maxLength=512,
    )
    region: str | None = field(
        "region", "Region of the bucket. Unset: the store's default.", default=None, minLength=1
    )
    ca_secret_ref: CASecretKeyRef | None = field(
        "caSecretRef",
        "CA bundle that signed the endpoint's certificate. Unset: the public roots.",
        default=None,
    )

    def prefix_of(self, namespace: str, shard: str) -> str:
        return self.prefix if self.prefix is not None else f"{namespace}/{shard}"


@dataclass(frozen=True)
class BackupSpec:
    """Snapshots of the shard's etcd, verified, into a PersistentVolumeClaim or an S3 bucket
    (one of claimRef and s3): the embedded one,
    or the external etcd of spec.etcd through one healthy endpoint (the whole etcd, whatever
    key prefixes share it; the operator restores only an embedded etcd).

    Setting this block adds a sidecar to the shard's pod (one rollout, as any pod template
    change): the snapshot is taken through it from the running kcp, which a backup never
    restarts. Removing the block removes the sidecar (another rollout); the claim and its
    backups stay."""

    claim_ref: LocalObjectRef | None = field(
        "claimRef",
        "PersistentVolumeClaim (same namespace, made by you) that receives the snapshots, "
        "under <shard name>/; the operator never deletes it. Several Shards may share one on a "
        "ReadWriteMany volume, or on a ReadWriteOnce volume when their pods share a node. "
        "Set this or s3.",
        default=None,
    )
    s3: S3Target | None = field(
        "s3",
        "An S3-compatible bucket that receives the snapshots (each verified in the sidecar, "
        "then uploaded with its sha256). Set this or claimRef.",
        default=None,
    )
    schedule: str | None = field(
        "schedule",
        "When to take a backup, in cron syntax (UTC, 5 fields or @hourly, @daily...). Unset: "
        "only on demand (annotation kcpshard.dev/backup, or kcp-shard-operator backup).",
        default=None,
        minLength=1,
        maxLength=128,
    )
    retention: RetentionSpec = field(
        "retention", "Which backups are kept.", default_factory=RetentionSpec
    )
    before_minor_upgrade: bool = field(
        "beforeMinorUpgrade",
        "On a root shard: before the first pod of a new kcp minor release starts, take and "
        "verify a backup of every shard of the installation (each needs spec.backup) and hold "
        "the upgrade until they are recorded; a failed one stops it (condition BackedUp names "
        "why). false: upgrade without them.",
        default=True,
    )
    image: str = field(
        "image",
        "Image of the backup sidecar: etcdctl and etcdutl of etcd 3.6 and a busybox.",
        default=DEFAULT_BACKUP_IMAGE,
        minLength=1,
    )


def check_backup(backup: BackupSpec | None) -> None:
    """What the schema cannot say: one target, and the schedule is cron syntax."""
    if backup is None:
        return
    if (backup.claim_ref is None) == (backup.s3 is None):
        raise SpecError(
            "spec.backup", "set exactly one target: claimRef (a PersistentVolumeClaim) or s3"
        )
    if backup.schedule is None:
        return
    try:
        parse_cron(backup.schedule)
    except CronError as err:
        raise SpecError("spec.backup.schedule", f"{backup.schedule!r}: {err}") from None
