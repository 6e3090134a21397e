"""``kcp-shard-operator backups``: the table of the backups the statuses list."""

from __future__ import annotations

from kcp_shard_operator.cli.backup import phases, rows, table
from kcp_shard_operator.core.api.model import JSON


def test_the_table_lists_each_shards_backups_newest_first() -> None:
    entry = {
        "name": "root-20261207T120000Z",
        "time": "2026-12-07T12:00:00Z",
        "trigger": "Scheduled",
        "kcpVersion": "0.27.1",
        "size": 1323040,
        "keys": 249,
        "claim": "kcp-backups",
        "path": "root/root-20261207T120000Z.db",
    }
    older = {**entry, "name": "root-1", "time": "2026-12-06T12:00:00Z"}
    shards: list[JSON] = [
        {"metadata": {"name": "root"}, "status": {"backups": [entry, older]}},
        {"metadata": {"name": "shard-1"}, "status": {}},
    ]
    lines = table(rows(shards)).splitlines()
    assert lines[0].split() == [
        "SHARD",
        "NAME",
        "TIME",
        "TRIGGER",
        "KCP",
        "SIZE",
        "KEYS",
        "TARGET",
        "PATH",
        "IMPORTED-FROM",
    ]
    assert lines[1].split() == [
        "root",
        "root-20261207T120000Z",
        "2026-12-07T12:00:00Z",
        "Scheduled",
        "0.27.1",
        "1323040",
        "249",
        "kcp-backups",
        "root/root-20261207T120000Z.db",
        "-",
    ]
    assert lines[2].split()[1] == "root-1"
    assert len(lines) == 3


def test_a_backup_imported_from_its_manifest_names_the_shard_it_was_taken_of() -> None:
    own = {"name": "root-2-20261207T130000Z", "path": "root-2/root-2-20261207T130000Z.db"}
    imported = {
        "name": "root-20261207T120000Z",
        "path": "root/root-20261207T120000Z.db",
        "importedFrom": {"name": "root", "namespace": "kcp", "uid": "uid-of-the-deleted-root"},
    }
    shards: list[JSON] = [{"metadata": {"name": "root-2"}, "status": {"backups": [own, imported]}}]
    header, mine, theirs = table(rows(shards)).splitlines()
    column = header.index("IMPORTED-FROM")
    assert header.rstrip().endswith("IMPORTED-FROM")
    assert mine[column:].strip() == "-"
    assert theirs[column:].strip() == "kcp/root"


def test_restore_prints_each_phase_of_its_request_once_as_the_status_records_it() -> None:
    printed: list[str] = []
    show = phases("root", "root-b", printed.append)
    for record in (
        {"request": "root-a", "phase": "Done", "message": "an earlier restore"},
        {},
        {"request": "root-b", "phase": "Stopping", "message": "restoring backup root-b"},
        {"request": "root-b", "phase": "Stopping", "message": "restoring backup root-b"},
        {"request": "root-b", "phase": "Restoring", "message": "the Job runs"},
        {"request": "root-b", "phase": "Starting", "message": "kcp 0.27.1 starts"},
        {"request": "root-b", "phase": "Done", "message": "restored"},
    ):
        show(record)
    assert [line.split("s  ", 1)[1] for line in printed] == [
        "root: Stopping: restoring backup root-b\n",
        "root: Restoring: the Job runs\n",
        "root: Starting: kcp 0.27.1 starts\n",
        "root: Done: restored\n",
    ]
    assert all(line.split("s  ", 1)[0].strip().isdigit() for line in printed)


def test_a_backup_in_a_bucket_shows_the_bucket_and_its_key() -> None:
    key = "ns/root/root-20261207T120000Z.db"
    entry = {
        "name": "root-20261207T120000Z",
        "path": "root/root-20261207T120000Z.db",
        "bucket": "kcp-backups",
        "key": key,
    }
    line = table(rows([{"metadata": {"name": "root"}, "status": {"backups": [entry]}}]))
    assert line.splitlines()[1].split()[-3:] == ["s3://kcp-backups", key, "-"]
