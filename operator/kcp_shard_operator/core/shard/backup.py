"""The backup sidecar of a Shard's pod (pure).

Only a Shard with ``spec.backup`` has it, and only once the claim it names exists: the
sidecar changes the pod template, and so rolls the shard once, when the user sets the block
(never when a backup is taken); a sidecar on every shard would roll every shard of every
installation when the operator is upgraded, for a feature most of them would not use, and
could not mount a backup claim nobody named. A claim that does not exist would leave the new
pod Pending and the shard down; without it the pod stays as it is and ``BackedUp`` says why.
"""

from __future__ import annotations

from kcp_shard_operator.core.api.model import JSON
from kcp_shard_operator.core.backup import s3
from kcp_shard_operator.core.backup.snapshot import (
    BACKUP_MOUNT,
    BUSYBOX,
    Etcd,
    embedded_etcd,
    external_etcd,
)
from kcp_shard_operator.core.backup.spec import BackupSpec
from kcp_shard_operator.core.kcp.podtemplate import container_security_context
from kcp_shard_operator.core.shard.args import ETCD_TLS_DIRECTORY, ETCD_TLS_VOLUME, ROOT_DIRECTORY
from kcp_shard_operator.core.shard.health import DATA_LOST, Failure, Health
from kcp_shard_operator.core.shard.spec import Shard

CONTAINER = "backup"
VOLUME = "backups"
ETCD_DIRECTORY = f"{ROOT_DIRECTORY}/etcd-server"
"""kcp's embedded etcd under its root directory (--embedded-etcd-directory's default)."""
IDLE = "trap 'exit 0' TERM; while true; do sleep 3600 & wait $!; done"
"""The sidecar waits for the operator's commands; it exits at once on SIGTERM, so that it never
lengthens a restart of the shard."""
RESOURCES = {"requests": {"cpu": "10m", "memory": "32Mi"}}


def etcd_of(shard: Shard) -> Etcd:
    """The etcd a snapshot of ``shard`` is taken of, as its sidecar reaches it: kcp's embedded
    etcd on localhost, or the external etcd's endpoints with the TLS Secret kcp uses, mounted
    where kcp's container mounts it."""
    etcd = shard.spec.etcd
    if shard.spec.embedded_etcd:
        return embedded_etcd(ETCD_DIRECTORY)
    return external_etcd(etcd.endpoints, ETCD_TLS_DIRECTORY if etcd.tls_secret_ref else None)


def target_volumes(backup: BackupSpec) -> list[JSON]:
    """The volumes of the backup target: the claim; or, for a bucket, a scratch volume the
    snapshot is verified on before it is uploaded (and downloaded to before a restore), the
    keys' Secret and the CA's. Both Secrets are optional: a missing one leaves the pod as it
    is, and s3copy's failure names it in ``BackedUp``."""
    if backup.s3 is None:
        assert backup.claim_ref is not None
        return [{"name": VOLUME, "persistentVolumeClaim": {"claimName": backup.claim_ref.name}}]
    target = backup.s3
    volumes: list[JSON] = [
        {"name": VOLUME, "emptyDir": {}},
        {
            "name": s3.CREDENTIALS_VOLUME,
            "secret": {"secretName": target.credentials_secret_ref.name, "optional": True},
        },
    ]
    if target.ca_secret_ref is not None:
        volumes.append(
            {
                "name": s3.CA_VOLUME,
                "secret": {"secretName": target.ca_secret_ref.name, "optional": True},
            }
        )
    return volumes


def target_mounts(backup: BackupSpec, read_only: bool = False) -> list[JSON]:
    """Where :func:`target_volumes` are mounted (``read_only``: the claim, in a restore Job)."""
    claim: JSON = {"name": VOLUME, "mountPath": BACKUP_MOUNT}
    if backup.s3 is None:
        return [{**claim, "readOnly": True} if read_only else claim]
    mounts = [
        claim,
        {"name": s3.CREDENTIALS_VOLUME, "mountPath": s3.CREDENTIALS_MOUNT, "readOnly": True},
    ]
    if backup.s3.ca_secret_ref is not None:
        mounts.append({"name": s3.CA_VOLUME, "mountPath": s3.CA_MOUNT, "readOnly": True})
    return mounts


def sidecar_mounts(shard: Shard, data_volume: str) -> list[JSON]:
    """What the sidecar mounts: kcp's root directory read-only (the embedded etcd's client
    certificates), or the external etcd's client TLS Secret read-only, and the backup target
    (:func:`target_mounts`)."""
    backup = shard.spec.backup
    assert backup is not None
    target = target_mounts(backup)
    if shard.spec.embedded_etcd:
        return [{"name": data_volume, "mountPath": ROOT_DIRECTORY, "readOnly": True}, *target]
    if shard.spec.etcd.tls_secret_ref is None:
        return target
    return [
        {"name": ETCD_TLS_VOLUME, "mountPath": ETCD_TLS_DIRECTORY, "readOnly": True},
        *target,
    ]


def with_backup_sidecar(pod_spec: JSON, shard: Shard, data_volume: str) -> None:
    """Add the sidecar and the backup claim's volume to ``pod_spec`` when ``spec.backup`` is
    set (:func:`sidecar_mounts`), in kcp's network namespace (its embedded etcd listens on
    localhost)."""
    backup = shard.spec.backup
    if backup is None:
        return
    pod_spec["containers"].append(
        {
            "name": CONTAINER,
            "image": backup.image,
            "command": [BUSYBOX, "sh", "-c", IDLE],
            "resources": RESOURCES,
            "securityContext": container_security_context(),
            "volumeMounts": sidecar_mounts(shard, data_volume),
        }
    )
    pod_spec["volumes"].extend(target_volumes(backup))


def backup_container_ready(pod: JSON) -> bool:
    """Whether ``pod`` (as the watch store keeps it: labels, conditions, container states) is
    Ready, which its kcp container is only once it serves, and its backup sidecar runs."""
    status = pod.get("status") or {}
    ready = any(
        c.get("type") == "Ready" and c.get("status") == "True"
        for c in status.get("conditions") or []
    )
    sidecar: JSON = next(
        (c for c in status.get("containerStatuses") or [] if c.get("name") == CONTAINER), {}
    )
    return ready and "running" in (sidecar.get("state") or {})


def backup_gate(health: Health | None) -> bool | Failure:
    """Whether a backup due now may be taken: True; False to wait for kcp's first answer since
    the shard's last rollout (``health`` None: a pod that started on an empty etcd is not known
    for one until then, and its snapshot would be listed under the recorded data UID); a
    Failure while kcp serves other data than the recorded (``DataLost``): a snapshot of it
    would be no way back, and retention would delete the backups to restore from."""
    if health is None:
        return False
    if any(reason == DATA_LOST for reason, _ in health.problems):
        return Failure(
            DATA_LOST,
            "no backup while the shard reports DataLost: kcp runs on an etcd that is not the "
            "one the backups were taken of, and a snapshot of it (with retention) would replace "
            "them. Restore the shard from one of them (kcp-shard-operator restore), or accept "
            "the new data (see Degraded); backups resume then, nothing was deleted",
        )
    return True
