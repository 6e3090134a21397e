"""What the sidecar's tools answer, and what it means for a backup."""

from __future__ import annotations

import pytest

from kcp_shard_operator.core.backup import snapshot
from kcp_shard_operator.core.backup.snapshot import AnswerError, Facts

# Answers of etcdctl 3.6.5 and etcdutl 3.6.5 against kcp 0.27.1's embedded etcd (3.5.14).
ENDPOINT_STATUS = (
    '[{"Endpoint":"https://localhost:2379","Status":{"header":{"revision":447},'
    '"version":"3.5.14","dbSize":1323008,"dbSizeInUse":1323008}}]'
)
SNAPSHOT_STATUS = (
    '{"hash":1532794802,"revision":447,"totalKey":249,"totalSize":1323008,"version":""}'
)
DF = (
    "Filesystem           1K-blocks      Used Available Use% Mounted on\n"
    "/dev/mapper/very-long-volume-name\n"
    "                      264212084  55569136  39932128  58% /backups\n"
)


def test_the_commands_reach_the_embedded_etcd_with_kcps_client_certificate() -> None:
    etcd = snapshot.embedded_etcd("/var/lib/kcp/etcd-server")
    command = snapshot.save(etcd, etcd.endpoints[0], "root/root-1.db")
    assert command[:5] == [
        "/etcdctl",
        "--endpoints=https://localhost:2379",
        "--cacert=/var/lib/kcp/etcd-server/secrets/ca/cert.pem",
        "--cert=/var/lib/kcp/etcd-server/secrets/client/cert.pem",
        "--key=/var/lib/kcp/etcd-server/secrets/client/key.pem",
    ]
    assert command[-3:] == ["snapshot", "save", "/backups/root/root-1.db"]


EXTERNAL = snapshot.external_etcd(
    ["https://etcd-0.etcd:2379", "https://etcd-1.etcd:2379", "https://etcd-2.etcd:2379"],
    "/etc/kcp/etcd",
)
# etcdctl 3.6.5 endpoint health --write-out=json, the first member down (it exits 1).
HEALTH = (
    '[{"endpoint":"https://etcd-1.etcd:2379","health":true,"took":"4.1ms"},'
    '{"endpoint":"https://etcd-2.etcd:2379","health":true,"took":"5.3ms"},'
    '{"endpoint":"https://etcd-0.etcd:2379","health":false,"took":"10.0s",'
    '"error":"context deadline exceeded"}]'
)


def test_an_external_etcd_is_reached_with_the_tls_secret_kcp_mounts() -> None:
    command = snapshot.save(EXTERNAL, "https://etcd-1.etcd:2379", "root/root-1.db")
    assert command == [
        "/etcdctl",
        "--endpoints=https://etcd-1.etcd:2379",
        "--cacert=/etc/kcp/etcd/ca.crt",
        "--cert=/etc/kcp/etcd/tls.crt",
        "--key=/etc/kcp/etcd/tls.key",
        "--command-timeout=600s",
        "snapshot",
        "save",
        "/backups/root/root-1.db",
    ]
    plain = snapshot.external_etcd(["http://etcd:2379"], None)
    assert snapshot.endpoint_status(plain, "http://etcd:2379") == [
        "/etcdctl",
        "--endpoints=http://etcd:2379",
        "--command-timeout=600s",
        "endpoint",
        "status",
        "--write-out=json",
    ]


def test_the_health_check_asks_every_endpoint_and_waits_briefly() -> None:
    command = snapshot.endpoint_health(EXTERNAL)
    assert command[1] == f"--endpoints={','.join(EXTERNAL.endpoints)}"
    assert "--command-timeout=10s" in command
    assert command[-3:] == ["endpoint", "health", "--write-out=json"]


def test_the_snapshot_is_taken_from_the_first_healthy_endpoint_in_the_specs_order() -> None:
    assert snapshot.healthy_endpoint(HEALTH, EXTERNAL) == "https://etcd-1.etcd:2379"


def test_no_healthy_endpoint_names_each_ones_error() -> None:
    down = (
        '[{"endpoint":"https://etcd-0.etcd:2379","health":false,"error":"connection refused"},'
        '{"endpoint":"https://etcd-1.etcd:2379","health":false,"error":"deadline exceeded"}]'
    )
    with pytest.raises(AnswerError) as raised:
        snapshot.healthy_endpoint(down, EXTERNAL)
    assert str(raised.value) == (
        "no healthy endpoint of spec.etcd.endpoints (https://etcd-0.etcd:2379: connection "
        "refused; https://etcd-1.etcd:2379: deadline exceeded; https://etcd-2.etcd:2379: no "
        "answer): no snapshot taken"
    )
    with pytest.raises(AnswerError, match="endpoint health: not JSON"):
        snapshot.healthy_endpoint("Error: open /etc/kcp/etcd/ca.crt: permission denied", EXTERNAL)


def test_answers_are_read() -> None:
    assert snapshot.database_size(ENDPOINT_STATUS) == 1323008
    assert snapshot.available_bytes(DF) == 39932128 * 1024
    assert snapshot.facts(SNAPSHOT_STATUS) == Facts(1532794802, 447, 249, 1323008)
    digest = "eb2d951f68a6b6beec3ec88fc0380ac20355923a6511db31e40ca8aeb822fd77"
    assert snapshot.sha256_of(f"{digest}  /backups/root/root-1.db\n") == digest


@pytest.mark.parametrize(
    "read",
    [
        lambda: snapshot.database_size("Error: context deadline exceeded"),
        lambda: snapshot.database_size("[]"),
        lambda: snapshot.available_bytes("df: /backups: No such file or directory"),
        lambda: snapshot.facts('{"hash": 1}'),
        lambda: snapshot.sha256_of("sha256sum: can't open"),
    ],
)
def test_unexpected_answers_are_refused(read: object) -> None:
    with pytest.raises(AnswerError):
        read()  # type: ignore[operator]


def test_room_asks_for_headroom_and_names_the_claim() -> None:
    assert snapshot.room_for(100 * 2**20, 121 * 2**20, "backups") is None
    full = snapshot.room_for(100 * 2**20, 119 * 2**20, "backups")
    assert full is not None
    assert full.reason == snapshot.VOLUME_FULL
    assert "backups has 119.0 MiB free" in full.message
    assert "no backup deleted" in full.message


def test_verification_refuses_an_empty_or_unreadable_snapshot() -> None:
    assert snapshot.unverified(Facts(1, 447, 249, 10), None, "r.db") is None
    empty = snapshot.unverified(Facts(0, 0, 0, 10), None, "r.db")
    assert empty is not None
    assert empty.reason == snapshot.VERIFICATION_FAILED
    broken = snapshot.unverified(None, "snapshot file integrity check failed", "r.db")
    assert broken is not None
    assert "integrity check failed" in broken.message
    assert "kept as r.db.unverified" in broken.message


def test_a_save_that_fills_the_volume_says_so() -> None:
    out = "Error: write /backups/root/x.db.part: no space left on device"
    assert snapshot.failed_save(out, "backups").reason == snapshot.VOLUME_FULL
    assert snapshot.failed_save("Error: context deadline exceeded", "b").reason == (
        snapshot.SNAPSHOT_FAILED
    )
