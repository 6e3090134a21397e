"""What a snapshot runs in the backup sidecar, and what the answers mean (pure).

The sidecar shares the kcp pod's network namespace, where kcp's embedded etcd listens
(https://localhost:2379, client certificates kcp generated under ``<etcd dir>/secrets``), and
mounts kcp's root directory read-only and the backup claim at :data:`BACKUP_MOUNT`; on an
external etcd it mounts the client TLS Secret kcp uses instead, and reaches the endpoints kcp
reaches. The steps: on an external etcd, one healthy endpoint picked (``etcdctl snapshot
save`` takes one); the etcd's size, the free space of the claim, ``etcdctl snapshot save``
(etcd streams a consistent snapshot from the running member, which keeps serving),
``etcdutl snapshot status`` (bbolt opens the file and hashes every key: a truncated or corrupt
file fails) and its sha256.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from kcp_shard_operator.core.status.conditions import Failure as Failure

BACKUP_MOUNT = "/backups"
BUSYBOX = "/busybox"
ETCDCTL = "/etcdctl"
ETCDUTL = "/etcdutl"
EMBEDDED_ETCD_ENDPOINT = "https://localhost:2379"
"""Where kcp's embedded etcd listens (its --embedded-etcd-client-port default)."""
HEADROOM = 1.2
"""Free space asked for beyond the etcd's size: the snapshot is about the size of the database
(its free pages included), and the claim must not fill up."""
COMMAND_TIMEOUT = "600s"
HEALTH_TIMEOUT = "10s"
"""How long the health check waits for each endpoint of an external etcd: one that does not
answer must not hold the backup for the snapshot's timeout."""

VOLUME_FULL = "VolumeFull"
VERIFICATION_FAILED = "VerificationFailed"
SNAPSHOT_FAILED = "SnapshotFailed"
TARGET_NOT_FOUND = "TargetNotFound"
NOT_RUNNING = "ShardNotRunning"


class AnswerError(ValueError):
    """An answer of a tool that does not have the expected shape."""


@dataclass(frozen=True)
class Facts:
    """What ``etcdutl snapshot status`` read from a snapshot file."""

    hash: int
    revision: int
    keys: int
    size: int


@dataclass(frozen=True)
class Etcd:
    """The etcd a snapshot is taken of, as the sidecar reaches it: its client URLs and the
    client TLS files (CA, certificate, key; None: plain HTTP)."""

    endpoints: tuple[str, ...]
    tls: tuple[str, str, str] | None
    external: bool


def embedded_etcd(etcd_dir: str) -> Etcd:
    """kcp's embedded etcd in the pod, with the client certificate kcp generated for it."""
    secrets = f"{etcd_dir}/secrets"
    tls = (f"{secrets}/ca/cert.pem", f"{secrets}/client/cert.pem", f"{secrets}/client/key.pem")
    return Etcd((EMBEDDED_ETCD_ENDPOINT,), tls, external=False)


def external_etcd(endpoints: list[str], tls_dir: str | None) -> Etcd:
    """An external etcd at ``endpoints``, with the TLS Secret kcp uses mounted at ``tls_dir``
    (``ca.crt``, ``tls.crt``, ``tls.key``; None: no client TLS)."""
    tls = None
    if tls_dir is not None:
        tls = (f"{tls_dir}/ca.crt", f"{tls_dir}/tls.crt", f"{tls_dir}/tls.key")
    return Etcd(tuple(endpoints), tls, external=True)


def etcdctl(etcd: Etcd, endpoints: str, *args: str, timeout: str = COMMAND_TIMEOUT) -> list[str]:
    """etcdctl against ``endpoints`` (comma-separated) of ``etcd``, with its client TLS."""
    command = [ETCDCTL, f"--endpoints={endpoints}"]
    if etcd.tls is not None:
        ca, cert, key = etcd.tls
        command += [f"--cacert={ca}", f"--cert={cert}", f"--key={key}"]
    return [*command, f"--command-timeout={timeout}", *args]


def endpoint_health(etcd: Etcd) -> list[str]:
    """The health of every endpoint (exits 1 when one is unhealthy, and answers all the same)."""
    return etcdctl(
        etcd, ",".join(etcd.endpoints), "endpoint", "health", "--write-out=json",
        timeout=HEALTH_TIMEOUT,
    )  # fmt: skip


def healthy_endpoint(answer: str, etcd: Etcd) -> str:
    """The first endpoint, in the order the spec names them, that ``etcdctl endpoint health
    --write-out=json`` found healthy; AnswerError naming each one's error when none is."""
    found = _json(answer, "endpoint health")
    try:
        health = {str(e["endpoint"]): (bool(e["health"]), str(e.get("error", ""))) for e in found}
    except (LookupError, TypeError):
        raise AnswerError(f"endpoint health: unexpected answer {answer.strip()[:200]!r}") from None
    for endpoint in etcd.endpoints:
        if health.get(endpoint, (False, ""))[0]:
            return endpoint
    errors = "; ".join(
        f"{endpoint}: {health.get(endpoint, (False, 'no answer'))[1] or 'unhealthy'}"
        for endpoint in etcd.endpoints
    )
    raise AnswerError(f"no healthy endpoint of spec.etcd.endpoints ({errors}): no snapshot taken")


def endpoint_status(etcd: Etcd, endpoint: str) -> list[str]:
    return etcdctl(etcd, endpoint, "endpoint", "status", "--write-out=json")


def free_space() -> list[str]:
    return [BUSYBOX, "df", "-k", BACKUP_MOUNT]


def make_directory(directory: str) -> list[str]:
    return [BUSYBOX, "mkdir", "-p", f"{BACKUP_MOUNT}/{directory}"]


def save(etcd: Etcd, endpoint: str, path: str) -> list[str]:
    """``etcdctl snapshot save`` from ``endpoint`` (it takes one): written to ``<path>.part``
    and renamed when complete."""
    return etcdctl(etcd, endpoint, "snapshot", "save", f"{BACKUP_MOUNT}/{path}")


def status(path: str) -> list[str]:
    return [ETCDUTL, "snapshot", "status", f"{BACKUP_MOUNT}/{path}", "--write-out=json"]


def checksum(path: str) -> list[str]:
    return [BUSYBOX, "sha256sum", f"{BACKUP_MOUNT}/{path}"]


def file_size(path: str) -> list[str]:
    return [BUSYBOX, "stat", "-c", "%s", f"{BACKUP_MOUNT}/{path}"]


def remove(paths: list[str]) -> list[str]:
    """Remove files the operator wrote (expired backups, a partial snapshot)."""
    return [BUSYBOX, "rm", "-f", *(f"{BACKUP_MOUNT}/{path}" for path in paths)]


def set_aside(path: str) -> list[str]:
    """Keep a snapshot that failed verification, under a name no restore takes."""
    return [BUSYBOX, "mv", f"{BACKUP_MOUNT}/{path}", f"{BACKUP_MOUNT}/{path}.unverified"]


def _json(text: str, what: str) -> Any:
    try:
        return json.loads(text)
    except ValueError:
        raise AnswerError(f"{what}: not JSON: {text.strip()[:200]!r}") from None


def database_size(answer: str) -> int:
    """The etcd's database size in bytes, from ``etcdctl endpoint status --write-out=json``."""
    found = _json(answer, "endpoint status")
    try:
        return int(found[0]["Status"]["dbSize"])
    except (LookupError, TypeError, ValueError):
        raise AnswerError(f"endpoint status: no dbSize in {answer.strip()[:200]!r}") from None


def available_bytes(answer: str) -> int:
    """Bytes available on the claim, from ``df -k`` (its last line: ... Available Use% Mount)."""
    words = answer.strip().splitlines()[-1].split() if answer.strip() else []
    if len(words) < 4 or not words[-3].isdigit():
        raise AnswerError(f"df: unexpected answer {answer.strip()[:200]!r}")
    return int(words[-3]) * 1024


def facts(answer: str) -> Facts:
    """What ``etcdutl snapshot status --write-out=json`` says of a snapshot."""
    found = _json(answer, "snapshot status")
    try:
        return Facts(
            int(found["hash"]),
            int(found["revision"]),
            int(found["totalKey"]),
            int(found["totalSize"]),
        )
    except (LookupError, TypeError, ValueError):
        raise AnswerError(f"snapshot status: unexpected answer {answer.strip()[:200]!r}") from None


def sha256_of(answer: str) -> str:
    """The digest from ``sha256sum FILE``."""
    digest = answer.split()[0] if answer.split() else ""
    if len(digest) != 64 or any(c not in "0123456789abcdef" for c in digest):
        raise AnswerError(f"sha256sum: unexpected answer {answer.strip()[:200]!r}")
    return digest


CLAIM_ADVICE = "grow the claim or lower spec.backup.retention.keep"
SCRATCH = "the backup sidecar's scratch volume (an emptyDir, on the node's disk)"
"""Where a snapshot bound for a bucket is written and verified before it is uploaded."""
SCRATCH_ADVICE = "free space on the node's disk: the snapshot is uploaded from there"


def volume_of(claim: str | None) -> tuple[str, str]:
    """The volume a snapshot is written to and what to do when it is full: the claim
    ``claim``, or the scratch volume of a bucket target (``claim`` None)."""
    if claim is None:
        return SCRATCH, SCRATCH_ADVICE
    return f"PersistentVolumeClaim {claim}", CLAIM_ADVICE


def room_for(database: int, available: int, claim: str | None) -> Failure | None:
    """Why a snapshot of ``database`` bytes does not fit into ``available`` bytes of the claim
    ``claim`` (None: the scratch volume of a bucket target), or None."""
    needed = int(database * HEADROOM)
    if available >= needed:
        return None
    volume, advice = volume_of(claim)
    return Failure(
        VOLUME_FULL,
        f"{volume} has {_mib(available)} free, a snapshot of this shard's "
        f"etcd ({_mib(database)}) needs {_mib(needed)}: no snapshot taken, no backup deleted; "
        f"{advice}",
    )


def unverified(found: Facts | None, problem: str | None, path: str) -> Failure | None:
    """Why the snapshot at ``path`` is not a backup to restore from, or None."""
    if problem is not None:
        why = problem
    elif found is None or found.keys == 0 or found.revision == 0:
        why = f"it holds no keys (revision {found.revision if found else 0})"
    else:
        return None
    return Failure(
        VERIFICATION_FAILED,
        f"the snapshot {path} failed verification ({why}); kept as {path}.unverified, not "
        "counted as a backup; the shard runs on",
    )


def failed_save(output: str, claim: str | None) -> Failure:
    """What a failed ``etcdctl snapshot save`` means (``claim`` as for :func:`room_for`)."""
    text = output.strip()[-400:]
    if "no space left" in text:
        return Failure(
            VOLUME_FULL,
            f"{volume_of(claim)[0]} filled up during the snapshot ({text}); the partial "
            "file was removed, no backup deleted",
        )
    return Failure(SNAPSHOT_FAILED, f"etcdctl snapshot save failed: {text}")


def _mib(size: int) -> str:
    return f"{size / 2**20:.1f} MiB"
