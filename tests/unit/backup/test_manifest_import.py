"""A manifest read back for a restore into a new Shard: the entry it describes, imported on
the claim it lies on now and marked with the Shard it was taken of; every field it cannot use
named; a backup name that is not the operator's form never becomes a path."""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest

from kcp_shard_operator.core.api.model import JSON
from kcp_shard_operator.core.backup.manifest import (
    ManifestError,
    manifest,
    named,
    parse,
    read,
    shard_of,
)
from kcp_shard_operator.core.backup.record import Request, Trigger, expired, upgrade_backup, wanted
from kcp_shard_operator.core.backup.spec import RetentionSpec
from tests.unit.backup.test_record import NOW, ON_DEMAND

NAME = "root-20261207T110700Z"
ENTRY: JSON = {
    "name": NAME,
    "time": "2026-12-07T11:07:00Z",
    "trigger": "Scheduled",
    "kcpVersion": "0.27.1",
    "claim": "old-backups",
    "path": f"root/{NAME}.db",
    "size": 1323040,
    "sha256": "ab" * 32,
    "etcdHash": 123,
    "revision": 520,
    "keys": 271,
    "dataUID": "uid-of-the-data",
    "installation": "uid-of-the-data",
    "durationSeconds": 0.3,
}
ORIGIN = {"name": "root", "namespace": "ns", "uid": "uid-old-root"}


def written() -> JSON:
    return manifest(ENTRY, "root", "ns", "uid-old-root")


def text(content: Any) -> str:
    return json.dumps(content)


def test_a_manifest_the_operator_wrote_gives_its_entry_on_the_claim_it_lies_on_now() -> None:
    entry = parse(text(written()), NAME, "backups")
    assert entry == {**ENTRY, "claim": "backups", "importedFrom": ORIGIN}


def test_the_manifest_of_a_backup_lies_in_the_directory_its_name_gives() -> None:
    assert shard_of("root-2-20261207T110700Z") == "root-2"
    assert read("root-2-20261207T110700Z") == [
        "/busybox",
        "cat",
        "/backups/root-2/root-2-20261207T110700Z.json",
    ]


@pytest.mark.parametrize(
    "name",
    [
        "root",
        "../etc-20261207T110700Z",
        "a/b-20261207T110700Z",
        "Root-20261207T110700Z",
        "root-20261207T110700Z.db",
        "-20261207T110700Z",
    ],
)
def test_a_name_of_another_form_is_never_a_path(name: str) -> None:
    assert not named(name)
    with pytest.raises(ManifestError, match="is not <shard>-<YYYYMMDDTHHMMSSZ>"):
        read(name)


def spoiled(where: str, value: Any) -> JSON:
    """The manifest with the field at ``where`` (dotted) set to ``value`` (None: removed)."""
    content = copy.deepcopy(written())
    *parents, last = where.split(".")
    holder = content
    for part in parents:
        holder = holder[part]
    if value is None:
        holder.pop(last)
    else:
        holder[last] = value
    return content


@pytest.mark.parametrize(
    ("where", "value", "named_in_error"),
    [
        ("kind", "Shard", "kind/apiVersion"),
        ("apiVersion", "kcpshard.dev/v2", "kind/apiVersion"),
        ("shard", None, "shard is missing"),
        ("shard.uid", None, "shard.uid"),
        ("shard.namespace", 3, "shard.namespace"),
        ("backup", "x", "backup is missing or not an object"),
        ("backup.name", "root-20261207T110800Z", "backup.name"),
        ("backup.time", "yesterday", "backup.time"),
        ("backup.trigger", "Manual", "backup.trigger"),
        ("backup.kcpVersion", None, "backup.kcpVersion"),
        ("backup.path", "/etc/shadow.db", "backup.path"),
        ("backup.path", "root/../../x.db", "backup.path"),
        ("backup.path", "root//x.db", "backup.path"),
        ("backup.path", f"root/{NAME}.json", "backup.path"),
        ("backup.sha256", "ab" * 31, "backup.sha256"),
        ("backup.sha256", "AB" * 32, "backup.sha256"),
        ("backup.sha256", "zz" * 32, "backup.sha256"),
        ("backup.size", -1, "backup.size"),
        ("backup.size", "10", "backup.size"),
        ("backup.keys", True, "backup.keys"),
        ("backup.revision", None, "backup.revision"),
        ("backup.dataUID", 7, "backup.dataUID"),
        ("backup.installation", "", "backup.installation"),
    ],
)
def test_a_field_it_cannot_use_is_named(where: str, value: Any, named_in_error: str) -> None:
    with pytest.raises(ManifestError, match=named_in_error.replace(".", r"\.")):
        parse(text(spoiled(where, value)), NAME, "backups")


@pytest.mark.parametrize(("content", "why"), [("{", "not JSON"), ("[1]", "not a JSON object")])
def test_what_is_not_a_manifest_is_refused(content: str, why: str) -> None:
    with pytest.raises(ManifestError, match=why):
        parse(content, NAME, "backups")


def test_retention_never_deletes_nor_counts_an_imported_backup() -> None:
    def entry(name: str, time: str, imported: bool = False) -> JSON:
        found: JSON = {"name": name, "time": time, "trigger": "Scheduled"}
        return {**found, "importedFrom": ORIGIN} if imported else found

    backups = [
        entry("new", "2026-12-07T11:00:00Z"),
        entry("mine", "2026-12-06T11:00:00Z"),
        entry("old-root", "2026-11-01T11:00:00Z", imported=True),
        entry("old-root-2", "2026-10-01T11:00:00Z", imported=True),
    ]
    assert expired(backups, RetentionSpec(keep=2, max_age_days=7), NOW) == []
    assert [e["name"] for e in expired(backups, RetentionSpec(keep=1), NOW)] == ["mine"]


def test_an_imported_backup_before_an_upgrade_is_not_the_one_the_next_upgrade_waits_for() -> None:
    before = {**ENTRY, "trigger": "BeforeUpgrade", "upgradeTo": "0.28"}
    imported = {**before, "importedFrom": ORIGIN}
    assert upgrade_backup({"backups": [before]}, "0.28") == before
    assert upgrade_backup({"backups": [imported]}, "0.28") is None
    assert wanted(ON_DEMAND, {"backups": [imported]}, {}, NOW, "0.28") == Request(
        Trigger.BEFORE_UPGRADE, upgrade_to="0.28"
    )
