"""A pass over a Shard whose spec.backup names a bucket: the sidecar mounts the keys (the
operator never reads them) and a scratch volume; a backup is verified there, uploaded with its
sha256 and removed; a missing bucket or refused keys take no snapshot and delete nothing;
retention deletes the bucket's objects the operator wrote; a restore downloads first."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

import pytest

from kcp_shard_operator.core.api.meta import VERSION_ANNOTATION
from kcp_shard_operator.core.api.model import JSON, SpecError
from kcp_shard_operator.core.backup import s3
from kcp_shard_operator.core.backup.manifest import manifest
from kcp_shard_operator.core.backup.restore import RESTORE_ANNOTATION
from kcp_shard_operator.core.backup.spec import S3Target
from kcp_shard_operator.kube.client import Ran
from tests.conftest import NO_PKI, make, shard_object
from tests.fake_kube import Effects, FakeKube, context, respec, run, settle, watched
from tests.unit.backup.test_pass_backup import DIGEST, NOW, Sidecar, annotate, pod
from tests.unit.backup.test_pass_restore import up_to_the_job
from tests.unit.backup.test_pass_restore_new_shard import pod_of
from tests.unit.controller.test_pass import condition, status

TARGET: JSON = {
    "endpoint": "http://weed.store:8333",
    "bucket": "kcp-backups",
    "credentialsSecretRef": {"name": "s3-keys"},
}
BACKUP: dict[str, Any] = {"s3": TARGET, "retention": {"keep": 2}}
KEY = "ns/root/root-20261207T110700Z.db"
BUCKET_NAME = "kcp-backups"


@dataclass
class Bucket:
    """s3copy in the sidecar, against a bucket that holds ``objects`` (None: no such bucket);
    the other tools answer as :class:`Sidecar`'s defaults."""

    objects: dict[str, str] | None = field(default_factory=dict)
    refused: bool = False
    tools: Sidecar = field(default_factory=Sidecar)
    ran: list[list[str]] = field(default_factory=list)

    def __call__(self, namespace: str, pod: str, container: str, command: list[str]) -> Ran:
        self.ran.append(command)
        if command[0] != s3.S3COPY:
            return self.tools(namespace, pod, container, command)
        args = [word for word in command[1:] if not word.startswith("--")]
        if self.refused:
            return Ran(4, "", "s3copy: the store refused the keys (InvalidAccessKeyId)")
        if self.objects is None:
            return Ran(3, "", 's3copy: bucket "kcp-backups" does not exist (list)')
        verb, rest = args[0], args[1:]
        if verb == "put":
            self.objects[rest[1]] = rest[0]
            answer = {"key": rest[1], "size": 1323040, "sha256": DIGEST, "seconds": 0.25}
            return Ran(0, json.dumps(answer) + "\n", "")
        if verb == "delete":
            for key in rest:
                self.objects.pop(key, None)
        return Ran(0, "{}\n", "")

    def verbs(self) -> list[str]:
        return [
            next(w for w in c[1:] if not w.startswith("--")) for c in self.ran if c[0] == s3.S3COPY
        ]


def shard(**backup: Any) -> JSON:
    return shard_object(**NO_PKI, backup={**BACKUP, **backup})


def running(bucket: Bucket, obj: JSON | None = None) -> tuple[Any, FakeKube, Effects]:
    kube = FakeKube(obj or shard())
    effects = Effects()
    ctx = context(kube, effects)
    kube.containers = bucket
    ctx.wall_clock = lambda: NOW
    settle(ctx, kube, "root")
    watched(ctx, pod())
    return ctx, kube, effects


def pod_spec(kube: FakeKube) -> JSON:
    found: JSON = kube.objects[("Deployment", "ns", "root-kcp")]["spec"]["template"]["spec"]
    return found


def test_the_sidecar_mounts_the_keys_and_a_scratch_volume_and_no_claim_is_read() -> None:
    kube = FakeKube(shard())
    run(context(kube), "root")
    spec = pod_spec(kube)
    assert [c["name"] for c in spec["containers"]] == ["kcp", "backup"]
    volumes = {v["name"]: v for v in spec["volumes"]}
    assert volumes["backups"] == {"name": "backups", "emptyDir": {}}
    assert volumes["s3-credentials"]["secret"] == {"secretName": "s3-keys", "optional": True}
    mounts = {m["name"]: m["mountPath"] for m in spec["containers"][1]["volumeMounts"]}
    assert mounts["s3-credentials"] == s3.CREDENTIALS_MOUNT
    assert "BackedUp" not in {c["type"] for c in status(kube, "root").get("conditions", [])}
    assert [call for call in kube.calls if call[2] == "s3-keys"] == []
    assert ("get", "PersistentVolumeClaim", "backups") not in kube.calls


def test_a_backup_is_verified_uploaded_with_its_manifest_and_removed_from_scratch() -> None:
    bucket = Bucket()
    ctx, kube, _ = running(bucket)
    annotate(ctx, kube, "first")
    run(ctx, "root")
    run(ctx, "root")
    assert bucket.verbs() == ["check", "put", "put"]
    assert bucket.objects == {
        KEY: "/backups/root/root-20261207T110700Z.db",
        "ns/root/root-20261207T110700Z.json": "/backups/root/root-20261207T110700Z.json",
    }
    removed = [c[3:] for c in bucket.ran if c[:3] == ["/busybox", "rm", "-f"]]
    assert removed == [
        ["/backups/root/root-20261207T110700Z.db"],
        ["/backups/root/root-20261207T110700Z.json"],
    ]
    (entry,) = status(kube, "root")["backups"]
    assert "claim" not in entry
    assert {k: entry[k] for k in ("bucket", "key", "location", "sha256", "size")} == {
        "bucket": "kcp-backups",
        "key": KEY,
        "location": f"s3://kcp-backups/{KEY}",
        "sha256": DIGEST,
        "size": 1323040,
    }
    assert condition(kube, "root", "BackedUp") == ("True", "Succeeded")
    message = kube.objects[("Shard", "ns", "root")]["status"]["conditions"]
    assert any(f"at s3://kcp-backups/{KEY}" in c["message"] for c in message)
    assert ctx.metrics.backup_upload_seconds._sum.get() == 0.25


@pytest.mark.parametrize(
    ("bucket", "reason", "named"),
    [
        (Bucket(objects=None), "TargetNotFound", "spec.backup.s3.bucket"),
        (Bucket(refused=True), "AccessDenied", "spec.backup.s3.credentialsSecretRef"),
    ],
)
def test_a_missing_bucket_or_refused_keys_take_no_snapshot_and_delete_nothing(
    bucket: Bucket, reason: str, named: str
) -> None:
    ctx, kube, effects = running(bucket)
    deployment = json.dumps(kube.objects[("Deployment", "ns", "root-kcp")], sort_keys=True)
    annotate(ctx, kube, "first")
    run(ctx, "root")
    run(ctx, "root")
    assert bucket.verbs() == ["check"]
    assert bucket.tools.ran == []
    assert condition(kube, "root", "BackedUp") == ("False", reason)
    conditions = kube.objects[("Shard", "ns", "root")]["status"]["conditions"]
    assert any(named in c["message"] for c in conditions if c["type"] == "BackedUp")
    assert "backups" not in status(kube, "root")
    assert [e.reason for _, e in effects.events].count("BackupFailed") == 1
    after = json.dumps(kube.objects[("Deployment", "ns", "root-kcp")], sort_keys=True)
    assert after == deployment


def test_retention_deletes_only_the_objects_it_wrote_beyond_keep() -> None:
    bucket = Bucket(objects={"ns/root/by-someone-else.db": "x"})
    ctx, kube, _ = running(bucket)
    for hour, token in ((11, "a"), (12, "b"), (13, "c")):
        ctx.wall_clock = lambda hour=hour: NOW.replace(hour=hour)
        annotate(ctx, kube, token)
        run(ctx, "root")
        run(ctx, "root")
    names = [b["name"] for b in status(kube, "root")["backups"]]
    assert names == ["root-20261207T130700Z", "root-20261207T120700Z"]
    deletes = [c for c in bucket.ran if c[0] == s3.S3COPY and "delete" in c]
    assert [c[c.index("delete") + 1 :] for c in deletes] == [
        [KEY, KEY.removesuffix(".db") + ".json"]
    ]
    assert bucket.objects is not None
    assert sorted(bucket.objects) == [
        "ns/root/by-someone-else.db",
        "ns/root/root-20261207T120700Z.db",
        "ns/root/root-20261207T120700Z.json",
        "ns/root/root-20261207T130700Z.db",
        "ns/root/root-20261207T130700Z.json",
    ]


def test_the_restore_job_downloads_the_object_then_restores_as_from_a_claim() -> None:
    entry = {
        "name": "root-20261207T110700Z",
        "time": "2026-12-07T11:07:00Z",
        "trigger": "OnDemand",
        "kcpVersion": "0.34.0",
        "path": "root/root-20261207T110700Z.db",
        "bucket": "old-bucket",
        "key": KEY,
        "location": f"s3://old-bucket/{KEY}",
        "sha256": "ab" * 32,
        "size": 10,
    }
    kube = FakeKube({**shard(), "status": {"backups": [entry]}})
    ctx = context(kube)
    settle(ctx, kube, "root")
    job = up_to_the_job(ctx, kube)
    template = job["spec"]["template"]["spec"]
    script = template["containers"][0]["command"][-1]
    lines = script.splitlines()
    assert lines[0] == "/busybox mkdir -p /backups/root"
    assert lines[1] == (
        "/s3copy --endpoint=http://weed.store:8333 --bucket=old-bucket "
        f"--credentials=/s3/credentials get {KEY} /backups/root/root-20261207T110700Z.db"
    )
    assert f"{'ab' * 32}  /backups/root/root-20261207T110700Z.db" in lines[3]
    volumes = {v["name"]: v for v in template["volumes"]}
    assert volumes["backups"] == {"name": "backups", "emptyDir": {}}
    assert volumes["s3-credentials"]["secret"]["secretName"] == "s3-keys"


@pytest.mark.parametrize(
    "backup",
    [
        {"claimRef": {"name": "backups"}, "s3": TARGET},
        {"retention": {"keep": 2}},
    ],
)
def test_exactly_one_target_is_asked_for(backup: JSON) -> None:
    with pytest.raises(SpecError, match=r"^spec.backup: set exactly one target"):
        make(shard_object(**NO_PKI, backup=backup))


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"endpoint": "ftp://weed.store"}, "spec.backup.s3.endpoint"),
        ({"bucket": "Kcp_Backups"}, "spec.backup.s3.bucket"),
        ({"prefix": "/ns/root/"}, "spec.backup.s3.prefix"),
        ({"credentialsSecretRef": None}, "spec.backup.s3.credentialsSecretRef"),
    ],
)
def test_a_bad_field_of_the_bucket_is_named(change: JSON, field: str) -> None:
    target = {k: v for k, v in {**TARGET, **change}.items() if v is not None}
    with pytest.raises(SpecError, match=rf"^{field}: "):
        make(shard(s3=target))


def test_the_prefix_defaults_to_the_namespace_and_shard() -> None:
    def target(**fields: str) -> S3Target:
        backup = make(shard(s3={**TARGET, **fields})).spec.backup
        assert backup is not None
        assert backup.s3 is not None
        return backup.s3

    assert s3.object_key(target(), "ns", "root", "x.db") == "ns/root/x.db"
    assert s3.object_key(target(prefix="team/a"), "ns", "root", "x.db") == "team/a/x.db"


def test_a_backup_on_a_claim_is_not_restored_while_the_spec_names_a_bucket() -> None:
    entry = {
        "name": "root-20261207T110700Z",
        "time": "2026-12-07T11:07:00Z",
        "trigger": "OnDemand",
        "kcpVersion": "0.34.0",
        "claim": "backups",
        "path": "root/root-20261207T110700Z.db",
        "sha256": "ab" * 32,
        "size": 10,
    }
    kube = FakeKube({**shard(), "status": {"backups": [entry]}})
    ctx = context(kube)
    settle(ctx, kube, "root")
    obj = kube.objects[("Shard", "ns", "root")]
    obj["metadata"]["annotations"] = {RESTORE_ANNOTATION: entry["name"]}
    watched(ctx, kube.put(obj))
    run(ctx, "root")
    assert condition(kube, "root", "Restored") == ("False", "RestoreRefused")
    assert "lies on a claim" in status(kube, "root")["restore"]["message"]
    assert not [key for key in kube.objects if key[0] == "Job"]


def test_a_shard_made_again_imports_a_backup_from_its_manifest_in_the_bucket() -> None:
    """root-2 seeded from root's backup: the manifest read under root's default prefix."""
    taken = {
        "name": "root-20261207T110700Z",
        "time": "2026-12-07T11:07:00Z",
        "trigger": "OnDemand",
        "kcpVersion": "0.34.0",
        "path": "root/root-20261207T110700Z.db",
        "bucket": BUCKET_NAME,
        "key": KEY,
        "location": f"s3://{BUCKET_NAME}/{KEY}",
        "sha256": "ab" * 32,
        "size": 10,
        "revision": 520,
        "keys": 271,
    }
    described = json.dumps(manifest(taken, "root", "ns", "uid-old-root"))
    ran: list[list[str]] = []

    def sidecar(namespace: str, pod: str, container: str, command: list[str]) -> Ran:
        ran.append(command)
        key = "ns/root/root-20261207T110700Z.json"
        if command[0] == s3.S3COPY and command[-2:] == ["cat", key]:
            return Ran(0, described, "")
        return Ran(1, "", "unexpected")

    obj = shard_object("root-2", **NO_PKI, backup=BACKUP)
    obj["metadata"]["annotations"] = {RESTORE_ANNOTATION: taken["name"]}
    kube = FakeKube({**obj, "status": {"dataUID": "uid-of-the-empty-etcd"}})
    kube.containers = sidecar
    ctx = context(kube)
    settle(ctx, kube, "root-2")
    watched(ctx, pod_of(obj))
    run(ctx, "root-2")
    assert len(ran) == 1
    (imported,) = status(kube, "root-2")["backups"]
    assert "claim" not in imported
    assert {k: imported[k] for k in ("bucket", "key", "location")} == {
        "bucket": BUCKET_NAME,
        "key": KEY,
        "location": f"s3://{BUCKET_NAME}/{KEY}",
    }
    assert imported["importedFrom"]["name"] == "root"
    record = status(kube, "root-2")["restore"]
    assert record["phase"] == "Stopping"
    assert record["message"].startswith(
        f"backup root-20261207T110700Z imported from its manifest on s3://{BUCKET_NAME}/{KEY} "
    )


def test_the_keys_secret_is_neither_read_nor_reported_missing() -> None:
    """The Secret is the pod's business: optional, never read by the operator, and its absence
    is no Degraded SecretNotFound (the backup says it, CredentialsNotFound)."""
    kube = FakeKube(shard())
    ctx = context(kube)
    settle(ctx, kube, "root")
    assert ("get", "Secret", "s3-keys") not in kube.calls
    degraded = [c for c in status(kube, "root")["conditions"] if c["type"] == "Degraded"]
    assert all("s3-keys" not in c["message"] for c in degraded), degraded


def test_a_minor_upgrade_waits_for_its_backup_in_the_bucket() -> None:
    bucket = Bucket()
    ctx, kube, _ = running(bucket, shard_object(**NO_PKI, backup=BACKUP, version="0.27.1"))
    respec(ctx, kube, "root", version="0.28.0")
    run(ctx, "root")
    assert condition(kube, "root", "Progressing") == ("False", "WaitingForBackups")
    assert bucket.verbs() == ["check", "put", "put"]
    run(ctx, "root")
    (entry,) = status(kube, "root")["backups"]
    assert (entry["trigger"], entry["upgradeTo"], entry["bucket"]) == (
        "BeforeUpgrade",
        "0.28",
        "kcp-backups",
    )
    run(ctx, "root")
    template = kube.objects[("Deployment", "ns", "root-kcp")]["spec"]["template"]
    assert template["metadata"]["annotations"][VERSION_ANNOTATION] == "0.28.0"


def test_an_upload_whose_digest_differs_is_deleted_and_not_listed() -> None:
    """The file changed between sha256sum and the upload: the object goes, no backup listed."""
    bucket = Bucket()
    bucket.tools.answers["sha256sum"] = Ran(0, f"{'cd' * 32}  /backups/x\n", "")
    ctx, kube, _ = running(bucket)
    annotate(ctx, kube, "first")
    run(ctx, "root")
    run(ctx, "root")
    assert bucket.verbs() == ["check", "put", "delete"]
    assert bucket.objects == {}
    assert condition(kube, "root", "BackedUp") == ("False", "UploadFailed")
    assert "backups" not in status(kube, "root")


def test_a_region_and_a_ca_reach_s3copy_and_the_ca_is_mounted() -> None:
    obj = shard(s3={**TARGET, "region": "eu-west-1", "caSecretRef": {"name": "store-ca"}})
    backup = make(obj).spec.backup
    assert backup is not None
    assert backup.s3 is not None
    assert s3.check(backup.s3) == [
        "/s3copy",
        "--endpoint=http://weed.store:8333",
        "--bucket=kcp-backups",
        "--credentials=/s3/credentials",
        "--region=eu-west-1",
        "--ca-file=/s3/ca/ca.crt",
        "check",
    ]
    kube = FakeKube(obj)
    run(context(kube), "root")
    spec = pod_spec(kube)
    volumes = {v["name"]: v for v in spec["volumes"]}
    assert volumes["s3-ca"]["secret"] == {"secretName": "store-ca", "optional": True}
    mounts = {m["name"]: m["mountPath"] for m in spec["containers"][1]["volumeMounts"]}
    assert mounts["s3-ca"] == s3.CA_MOUNT
