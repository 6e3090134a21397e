"""No backup of data that is not the shard's: while it reports DataLost a backup due is refused
(BackedUp=False DataLost, nothing run in the sidecar, no backup deleted by retention), and after
a rollout none starts before kcp's first answer about the new pod."""

from __future__ import annotations

import copy
from typing import Any

from kcp_shard_operator.core.api.model import JSON
from kcp_shard_operator.core.shard.health import Probe
from tests.conftest import shard_object
from tests.fake_kube import SECRETS, Effects, FakeKube, run, watched
from tests.unit.backup.test_pass_backup import BACKUP, Sidecar, annotate, running
from tests.unit.controller.test_pass import condition, conditions, status
from tests.unit.controller.test_pass_health import ADMIN_SECRETS, ROOT_ADMIN, later

KEPT: JSON = {
    "name": "root-20261207T100000Z",
    "time": "2026-12-07T10:00:00Z",
    "trigger": "Scheduled",
    "kcpVersion": "0.34.0",
    "claim": "backups",
    "path": "root/root-20261207T100000Z.db",
    "sha256": "cd" * 32,
    "dataUID": "data-root",
    "size": 10,
}
"""A backup of the recorded data, the one to restore from."""


def checked(sidecar: Sidecar) -> tuple[Any, FakeKube, Effects]:
    """root with spec.backup (keep: 2), its admin kubeconfig (kcp asked about it), verified on
    data UID data-root, one backup listed; its pod's sidecar running."""
    obj = shard_object(**ROOT_ADMIN, backup=BACKUP)
    root = {**obj, "status": {"backups": [KEPT]}}
    ctx, kube, effects = running(sidecar, *SECRETS, *ADMIN_SECRETS, root=root)
    assert condition(kube, "root", "DataVerified") == ("True", "Verified")
    return ctx, kube, effects


def test_a_shard_that_lost_its_data_is_not_backed_up_and_keeps_its_backups() -> None:
    sidecar = Sidecar()
    ctx, kube, effects = checked(sidecar)
    effects.answers = lambda target: Probe(data_uid="data-root-2")
    later(ctx, effects, "root")
    assert condition(kube, "root", "DataVerified") == ("False", "DataLost")
    for token in ("first", "second"):
        annotate(ctx, kube, token)
        run(ctx, "root")
        run(ctx, "root")
        assert condition(kube, "root", "BackedUp") == ("False", "DataLost")
        assert status(kube, "root")["backup"]["lastRequest"] == token
    assert sidecar.ran == []
    assert status(kube, "root")["backups"] == [KEPT]
    assert "kcp-shard-operator restore" in conditions(kube, "root")["BackedUp"]["message"]
    assert [e.reason for _, e in effects.events].count("BackupFailed") == 2

    # The restored etcd answers with the recorded UID: backups are taken again.
    effects.answers = lambda target: Probe(data_uid="data-root")
    later(ctx, effects, "root")
    annotate(ctx, kube, "third")
    run(ctx, "root")
    run(ctx, "root")
    assert condition(kube, "root", "BackedUp") == ("True", "Succeeded")
    assert [b["dataUID"] for b in status(kube, "root")["backups"]] == ["data-root", "data-root"]


def test_after_a_rollout_no_backup_starts_before_kcp_answered_about_the_new_pod() -> None:
    sidecar = Sidecar()
    ctx, kube, effects = checked(sidecar)
    deployment = copy.deepcopy(kube.objects[("Deployment", "ns", "root-kcp")])
    deployment["status"]["updatedReplicas"] = 0
    watched(ctx, kube.put(deployment))
    run(ctx, "root")
    # The new pod is up on an empty etcd; kcp's answer about it is still to come.
    effects.answers = lambda target: Probe(data_uid="data-root-2")
    asked = len(effects.probed)
    pending: list[Any] = []
    ctx.background.request = lambda key, work, again=True: pending.append(work)
    watched(ctx, kube.roll_out("ns", "root-kcp"))
    annotate(ctx, kube, "first")
    run(ctx, "root")
    assert len(pending) == 1, "kcp asked about the new pod"
    assert len(effects.probed) == asked
    assert sidecar.ran == []
    assert "lastRequest" not in status(kube, "root").get("backup", {})
    pending[0]()
    run(ctx, "root")
    run(ctx, "root")
    assert condition(kube, "root", "DataVerified") == ("False", "DataLost")
    assert condition(kube, "root", "BackedUp") == ("False", "DataLost")
    assert sidecar.ran == []
