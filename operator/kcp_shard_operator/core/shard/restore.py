"""The Job that restores a Shard's embedded etcd from one of its backups (pure).

It runs on the backup image with the shard's claim and the backup claim, while the shard is
stopped (a backup in a bucket is first downloaded to a scratch volume, its sha256 checked
against the object's metadata): the backup's sha256 checked against the status, ``etcdutl
snapshot restore`` into a directory beside etcd's, then the member directories swapped (the
replaced one kept as ``member.before-restore-<time>``). The member name and peer URL are those
of kcp's embedded etcd (``default``, ``https://localhost:2380``), so kcp starts on the restored
data as it is.
"""

from __future__ import annotations

import hashlib
import shlex

from kcp_shard_operator.core.api.meta import stamped
from kcp_shard_operator.core.api.model import JSON
from kcp_shard_operator.core.backup import s3
from kcp_shard_operator.core.backup.snapshot import BACKUP_MOUNT, BUSYBOX, ETCDUTL
from kcp_shard_operator.core.backup.spec import BackupSpec
from kcp_shard_operator.core.kcp.podtemplate import (
    container_security_context,
    pod_security_context,
)
from kcp_shard_operator.core.shard.args import ROOT_DIRECTORY
from kcp_shard_operator.core.shard.backup import ETCD_DIRECTORY, target_mounts, target_volumes
from kcp_shard_operator.core.shard.claim import claim_name
from kcp_shard_operator.core.shard.meta import metadata
from kcp_shard_operator.core.shard.names import child_name
from kcp_shard_operator.core.shard.spec import Shard

MEMBER = "default"
PEER_URL = "https://localhost:2380"
"""The member name and peer URL of kcp's embedded etcd (its --embedded-etcd-peer-port
default): a snapshot restored with them starts without --embedded-etcd-force-new-cluster."""


def restore_job_name(shard: Shard, backup: str, started: str) -> str:
    """One Job per restore (a Job's template cannot change): a digest of what it restores."""
    digest = hashlib.sha256(f"{backup}/{started}".encode()).hexdigest()[:8]
    return f"{child_name(shard)}-restore-{digest}"


def download(backup: BackupSpec, entry: JSON) -> list[str]:
    """The lines that fetch a backup kept in a bucket to the Job's scratch volume (none for a
    claim's): s3copy checks the sha256 of the object's metadata, the script then the status's."""
    if backup.s3 is None or not entry.get("key"):
        return []
    path = str(entry["path"])
    directory = f"{BACKUP_MOUNT}/{path.rpartition('/')[0]}"
    fetch = s3.get(backup.s3, str(entry.get("bucket") or backup.s3.bucket), str(entry["key"]), path)
    return [f"{BUSYBOX} mkdir -p {shlex.quote(directory)}", shlex.join(fetch)]


def restore_script(path: str, sha256: str, fetch: list[str] | None = None) -> str:
    backup = f"{BACKUP_MOUNT}/{path}"
    return "\n".join(
        [
            *(fetch or []),
            f"cd {ETCD_DIRECTORY}",
            f'echo "{sha256}  {backup}" | {BUSYBOX} sha256sum -c -',
            f"{BUSYBOX} rm -rf restore.tmp",
            f"{ETCDUTL} snapshot restore {backup} --data-dir restore.tmp --name {MEMBER} "
            f"--initial-cluster {MEMBER}={PEER_URL} --initial-advertise-peer-urls {PEER_URL}",
            f"if [ -d member ]; then {BUSYBOX} mv member "
            f"member.before-restore-$({BUSYBOX} date +%s); fi",
            f"{BUSYBOX} mv restore.tmp/member member",
            f"{BUSYBOX} rmdir restore.tmp",
        ]
    )


def restore_job(shard: Shard, root_name: str | None, entry: JSON, name: str) -> JSON:
    """The Job restoring backup ``entry`` (of ``status.backups``) into ``shard``'s claim."""
    backup = shard.spec.backup
    assert backup is not None
    container = {
        "name": "restore",
        "image": backup.image,
        "command": [
            BUSYBOX,
            "sh",
            "-ec",
            restore_script(str(entry["path"]), str(entry["sha256"]), download(backup, entry)),
        ],
        "securityContext": container_security_context(),
        "volumeMounts": [
            {"name": "data", "mountPath": ROOT_DIRECTORY},
            *target_mounts(backup, read_only=True),
        ],
    }
    return stamped(
        {
            "apiVersion": "batch/v1",
            "kind": "Job",
            "metadata": metadata(shard, root_name, name=name),
            "spec": {
                "backoffLimit": 0,
                "template": {
                    "metadata": {
                        "labels": {
                            "app.kubernetes.io/name": "kcp-restore",
                            "kcpshard.dev/shard": shard.name,
                        }
                    },
                    "spec": {
                        "restartPolicy": "Never",
                        "securityContext": pod_security_context(),
                        "containers": [container],
                        "volumes": [
                            {
                                "name": "data",
                                "persistentVolumeClaim": {"claimName": claim_name(shard)},
                            },
                            *target_volumes(backup),
                        ],
                    },
                },
            },
        }
    )
