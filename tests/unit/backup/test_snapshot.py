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
    command = snapshot.save("/var/lib/kcp/etcd-server", "root/root-1.db")
    assert command[:5] == [
        "/etcdctl",
        "--endpoints=https://localhost:2379",
        "--cacert=/var/lib/kcp/etcd-server/secrets/ca/cert.pem",
        "--cert=/var/lib/kcp/etcd-server/secrets/client/cert.pem",
        "--key=/var/lib/kcp/etcd-server/secrets/client/key.pem",
    ]
    assert command[-3:] == ["snapshot", "save", "/backups/root/root-1.db"]


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
