"""Which restores are refused before anything is touched: a backup of another installation
(the root's data UID it recorded is not this installation's), one of a newer kcp than the
shard runs; and what names an installation."""

from __future__ import annotations

import pytest

from kcp_shard_operator.core.api.model import JSON
from kcp_shard_operator.core.backup.restore import installation_of, refusal

ENTRY: JSON = {"name": "b", "kcpVersion": "0.28.0", "installation": "uid-of-root-a"}


def status(*entries: JSON) -> JSON:
    return {"backups": list(entries)}


def test_the_installation_is_named_by_the_root_shards_data_uid() -> None:
    root = {"dataUID": "uid-of-root-a"}
    assert installation_of(True, root, None) == "uid-of-root-a"
    assert installation_of(False, {"dataUID": "uid-of-shard-1"}, root) == "uid-of-root-a"
    assert installation_of(False, {"dataUID": "uid-of-shard-1"}, None) is None
    assert installation_of(True, {}, None) is None


def test_a_backup_of_another_installation_is_refused_naming_both() -> None:
    why = refusal(status(ENTRY), "b", "0.28.0", True, "uid-of-root-b", "0.30.0")
    assert why is not None
    assert "backup b is of another installation" in why
    assert "uid-of-root-a" in why
    assert "uid-of-root-b" in why
    assert why.endswith("nothing done")


@pytest.mark.parametrize(
    ("entry", "installation"),
    [
        (ENTRY, "uid-of-root-a"),
        # Not known on either side (a backup taken before the field, a root not probed yet):
        # the check cannot be made.
        ({"name": "b", "kcpVersion": "0.28.0"}, "uid-of-root-b"),
        (ENTRY, None),
    ],
)
def test_the_same_installation_or_an_unknown_one_passes(
    entry: JSON, installation: str | None
) -> None:
    assert refusal(status(entry), "b", "0.28.0", True, installation, "0.30.0") is None


def test_a_backup_of_a_newer_kcp_than_the_shard_runs_is_refused() -> None:
    newer = {**ENTRY, "kcpVersion": "0.30.0"}
    why = refusal(status(newer), "b", "0.30.0", True, "uid-of-root-a", "0.28.0")
    assert why is not None
    assert "taken with kcp 0.30.0, newer than the kcp 0.28.0 the shard runs" in why
    # Not running yet (a new Shard): nothing to compare with; the same version passes.
    assert refusal(status(newer), "b", "0.30.0", True, "uid-of-root-a", None) is None
    assert refusal(status(newer), "b", "0.30.0", True, "uid-of-root-a", "0.30.0") is None
