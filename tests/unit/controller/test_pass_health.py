"""A pass asks kcp about a rolled-out Shard; Ready, Degraded and DataVerified follow the answers."""

from __future__ import annotations

import copy
from typing import Any

from kcp_shard_operator.controller.health import PROBE_INTERVAL_SECONDS, probe_delay
from kcp_shard_operator.core.api.model import JSON
from kcp_shard_operator.core.shard.health import (
    ACCEPT_DATA_UID_ANNOTATION,
    Failure,
    NotRegistered,
    Probe,
    ProbeTarget,
    Registered,
)
from kcp_shard_operator.core.status.deployments import SETTLE_RETRY_SECONDS, SETTLE_SECONDS
from tests.conftest import NO_PKI, non_root_object, shard_object
from tests.fake_kube import (
    SECRETS,
    Effects,
    FakeKube,
    context,
    healthy,
    respec,
    run,
    secret,
    settle,
    watched,
)
from tests.unit.controller.test_pass import condition, conditions, status

ROOT_ADMIN: dict[str, Any] = {"adminKubeconfigSecretRef": {"name": "root-kcp-admin"}}
SHARD_ADMIN: dict[str, Any] = {"adminKubeconfigSecretRef": {"name": "shard-1-kcp-admin"}}
ADMIN_SECRETS = (
    secret("root-kcp-admin", kubeconfig="cm9vdA=="),  # "root"
    secret("shard-1-kcp-admin", kubeconfig="c2hhcmQ="),  # "shard"
)


def sharded() -> tuple[FakeKube, Effects]:
    kube = FakeKube(
        shard_object(**ROOT_ADMIN), non_root_object(**SHARD_ADMIN), *SECRETS, *ADMIN_SECRETS
    )
    return kube, Effects()


def warnings(effects: Effects, name: str) -> list[str]:
    return [e.reason for shard, e in effects.events if shard == name and e.type == "Warning"]


def later(ctx: Any, effects: Effects, *names: str) -> None:
    """The next resync: the probe interval passed."""
    effects.now += PROBE_INTERVAL_SECONDS
    run(ctx, *names)


def test_a_verified_shard_is_ready_and_its_data_uid_recorded() -> None:
    kube, effects = sharded()
    ctx = context(kube, effects)
    settle(ctx, kube, "root", "shard-1")
    assert condition(kube, "root", "DataVerified") == ("True", "Verified")
    assert condition(kube, "shard-1", "DataVerified") == ("True", "Verified")
    assert condition(kube, "shard-1", "Ready") == ("True", "RolledOut")
    assert "not verified" not in conditions(kube, "shard-1")["Ready"]["message"]
    assert (status(kube, "root")["dataUID"], status(kube, "shard-1")["dataUID"]) == (
        "data-root",
        "data-shard-1",
    )
    assert effects.probed == [
        ProbeTarget(b"root", "root"),
        ProbeTarget(b"shard", "shard-1", b"root"),
    ]
    calls = len(kube.calls)
    run(ctx, "root", "shard-1")
    assert len(effects.probed) == 2, "asked again before the interval"
    assert kube.calls[calls:] == []
    later(ctx, effects, "root", "shard-1")
    assert len(effects.probed) == 4
    assert [op for op, _, _ in kube.writes].count("status") == 4, "same answers, no write"


def test_without_an_admin_kubeconfig_ready_says_it_is_not_verified() -> None:
    kube = FakeKube(shard_object(**NO_PKI), non_root_object(**NO_PKI), *SECRETS)
    effects = Effects()
    ctx = context(kube, effects)
    settle(ctx, kube, "root", "shard-1")
    for name in ("root", "shard-1"):
        assert condition(kube, name, "Ready") == ("True", "RolledOut")
        assert condition(kube, name, "DataVerified") == ("Unknown", "NoAdminKubeconfig")
        assert condition(kube, name, "Degraded") == ("False", "AsExpected")
        assert "not verified by the operator" in conditions(kube, name)["Ready"]["message"]
        assert status(kube, name)["phase"] == "Ready"
    assert effects.probed == []


def test_kcp_is_not_asked_while_the_shard_rolls_out() -> None:
    kube, effects = sharded()
    ctx = context(kube, effects)
    run(ctx, "root")
    assert effects.probed == []
    assert "DataVerified" not in conditions(kube, "root")


def test_a_shard_the_root_no_longer_lists_is_degraded_until_registered_again() -> None:
    kube, effects = sharded()
    ctx = context(kube, effects)
    settle(ctx, kube, "root", "shard-1")
    effects.answers = lambda target: Probe(data_uid="data-shard-1", registration=NotRegistered())
    later(ctx, effects, "shard-1")
    assert condition(kube, "shard-1", "Ready") == ("False", "ShardNotRegistered")
    assert condition(kube, "shard-1", "Degraded") == ("True", "ShardNotRegistered")
    assert condition(kube, "shard-1", "DataVerified") == ("False", "ShardNotRegistered")
    assert status(kube, "shard-1")["phase"] == "Degraded"
    assert warnings(effects, "shard-1")[-1] == "ShardNotRegistered"
    assert (
        "kubectl rollout restart deployment/shard-1-kcp -n ns"
        in (conditions(kube, "shard-1")["Degraded"]["message"])
    )
    effects.answers = lambda target: Probe(data_uid="data-shard-1", registration=Registered("r2"))
    later(ctx, effects, "shard-1")
    assert condition(kube, "shard-1", "Ready") == ("True", "RolledOut")
    assert condition(kube, "shard-1", "Degraded") == ("False", "AsExpected")
    assert status(kube, "shard-1")["phase"] == "Ready"


def annotate(ctx: Any, kube: FakeKube, name: str, **annotations: str) -> None:
    obj: JSON = copy.deepcopy(kube.objects[("Shard", "ns", name)])
    obj["metadata"].setdefault("annotations", {}).update(annotations)
    watched(ctx, kube.put(obj))


def test_a_root_back_on_an_empty_etcd_is_data_lost_until_accepted() -> None:
    kube, effects = sharded()
    ctx = context(kube, effects)
    settle(ctx, kube, "root", "shard-1")
    effects.answers = lambda target: Probe(
        data_uid="data-root-2" if target.root is None else "data-shard-1",
        registration=None if target.root is None else NotRegistered(),
    )
    later(ctx, effects, "root", "shard-1")
    assert condition(kube, "root", "Ready") == ("False", "DataLost")
    assert condition(kube, "root", "Degraded") == ("True", "DataLost")
    assert status(kube, "root")["dataUID"] == "data-root", "the recorded UID is kept"
    assert warnings(effects, "root") == ["DataLost"]
    message = conditions(kube, "root")["Degraded"]["message"]
    assert f"kubectl annotate shard root -n ns {ACCEPT_DATA_UID_ANNOTATION}=data-root-2" in message
    assert condition(kube, "shard-1", "Degraded") == ("True", "RootDataLost")
    assert "does not list shard-1" in conditions(kube, "shard-1")["Degraded"]["message"]
    assert warnings(effects, "shard-1")[-1] == "RootDataLost"

    annotate(ctx, kube, "root", **{ACCEPT_DATA_UID_ANNOTATION: "data-root-2"})
    run(ctx, "root", "shard-1")
    assert condition(kube, "root", "Ready") == ("True", "RolledOut")
    assert status(kube, "root")["dataUID"] == "data-root-2"
    assert condition(kube, "shard-1", "Degraded") == ("True", "ShardNotRegistered")

    effects.answers = lambda target: Probe(
        data_uid="data-root-2" if target.root is None else "data-shard-1",
        registration=None if target.root is None else Registered("r2"),
    )
    later(ctx, effects, "root", "shard-1")
    assert condition(kube, "shard-1", "Ready") == ("True", "RolledOut")
    assert condition(kube, "shard-1", "DataVerified") == ("True", "Verified")


def test_data_lost_clears_when_the_etcd_is_restored() -> None:
    kube, effects = sharded()
    ctx = context(kube, effects)
    settle(ctx, kube, "root")
    effects.answers = lambda target: Probe(data_uid="data-root-2")
    later(ctx, effects, "root")
    assert condition(kube, "root", "DataVerified") == ("False", "DataLost")
    effects.answers = lambda target: Probe(data_uid="data-root")
    later(ctx, effects, "root")
    assert condition(kube, "root", "DataVerified") == ("True", "Verified")
    assert condition(kube, "root", "Ready") == ("True", "RolledOut")


def test_an_unreachable_shard_is_not_ready_and_asked_less_often() -> None:
    kube, effects = sharded()
    effects.answers = lambda target: Probe(failure=Failure("ShardUnreachable", "timed out"))
    ctx = context(kube, effects)
    settle(ctx, kube, "root")
    effects.now += SETTLE_SECONDS
    run(ctx, "root")
    assert condition(kube, "root", "Ready") == ("False", "ShardUnreachable")
    assert condition(kube, "root", "DataVerified") == ("Unknown", "ShardUnreachable")
    asked = len(effects.probed)
    for failures in (1, 2, 3, 4):
        effects.now += probe_delay(failures) - 1
        run(ctx, "root")
        assert len(effects.probed) == asked + failures - 1
        effects.now += 1
        run(ctx, "root")
        assert len(effects.probed) == asked + failures
    assert probe_delay(10) == 120.0


def test_right_after_a_rollout_an_unreachable_shard_is_asked_again_soon_not_reported() -> None:
    """The Service routes to the new pods a moment after the Deployment says they are ready:
    "Connection refused" then is no news to report, nor a reason to wait 25 s."""
    kube, effects = sharded()
    answers = [Probe(failure=Failure("ShardUnreachable", "Connection refused"))] * 3
    effects.answers = lambda target: answers.pop(0) if answers else healthy(target)
    ctx = context(kube, effects)
    settle(ctx, kube, "root")
    for _ in range(3):
        assert condition(kube, "root", "Ready") == ("False", "Verifying")
        assert status(kube, "root")["phase"] == "Verifying"
        assert condition(kube, "root", "Degraded") == ("False", "AsExpected")
        effects.now += SETTLE_RETRY_SECONDS
        effects.run_delayed(SETTLE_RETRY_SECONDS)
    assert len(effects.probed) == 4
    assert condition(kube, "root", "DataVerified") == ("True", "Verified")
    assert condition(kube, "root", "Ready") == ("True", "RolledOut")
    assert warnings(effects, "root") == []


def test_one_miss_of_a_shard_that_answered_is_asked_again_not_reported() -> None:
    """A shard that answered and then misses one probe (a connection dropped on a loaded
    node) is asked again 3 s later; only a second miss in a row is an outage to report."""
    kube, effects = sharded()
    ctx = context(kube, effects)
    settle(ctx, kube, "root")
    miss = Probe(failure=Failure("ShardUnreachable", "RemoteDisconnected"))
    answers = [miss]
    effects.answers = lambda target: answers.pop(0) if answers else healthy(target)
    later(ctx, effects, "root")
    assert condition(kube, "root", "Ready") == ("True", "RolledOut")
    assert condition(kube, "root", "Degraded") == ("False", "AsExpected")
    effects.now += SETTLE_RETRY_SECONDS
    effects.run_delayed(SETTLE_RETRY_SECONDS)
    assert condition(kube, "root", "DataVerified") == ("True", "Verified")
    assert warnings(effects, "root") == []

    answers.extend([miss, miss])
    later(ctx, effects, "root")
    assert condition(kube, "root", "Degraded") == ("False", "AsExpected")
    effects.now += SETTLE_RETRY_SECONDS
    effects.run_delayed(SETTLE_RETRY_SECONDS)
    assert condition(kube, "root", "Ready") == ("False", "ShardUnreachable")
    assert warnings(effects, "root") == ["ShardUnreachable"]
    assert effects.delayed == [], "an outage reported is asked on the backoff, not again soon"


def test_a_rollout_waits_for_kcps_answer_about_the_new_pods_before_ready() -> None:
    """What kcp said about the pods a rollout replaced says nothing of the new ones."""
    kube, effects = sharded()
    ctx = context(kube, effects)
    settle(ctx, kube, "root")
    assert condition(kube, "root", "Ready") == ("True", "RolledOut")
    respec(ctx, kube, "root", extraArgs=["--v=3"])
    run(ctx, "root")
    assert condition(kube, "root", "Ready")[0] == "False"
    effects.answers = lambda target: Probe(failure=Failure("ShardUnreachable", "refused"))
    watched(ctx, kube.roll_out("ns", "root-kcp"))
    run(ctx, "root")
    assert condition(kube, "root", "Ready") == ("False", "Verifying")
    assert "waiting for kcp's first answer" in conditions(kube, "root")["Ready"]["message"]
    effects.answers = healthy
    effects.now += SETTLE_RETRY_SECONDS
    run(ctx, "root")
    assert condition(kube, "root", "Ready") == ("True", "RolledOut")
    assert warnings(effects, "root") == []


def test_after_an_operator_restart_the_last_ready_stands_until_kcp_is_asked_again() -> None:
    kube, effects = sharded()
    settle(context(kube, effects), kube, "root")
    effects.answers = lambda target: Probe(failure=Failure("ShardUnreachable", "refused"))
    restarted = context(kube, effects)
    run(restarted, "root")
    assert condition(kube, "root", "Ready") == ("True", "RolledOut")


def test_a_missing_admin_secret_is_degraded_but_ready_stays_to_the_pods() -> None:
    kube = FakeKube(shard_object(adminKubeconfigSecretRef={"name": "nope"}))
    effects = Effects()
    ctx = context(kube, effects)
    settle(ctx, kube, "root")
    assert condition(kube, "root", "DataVerified") == ("Unknown", "SecretNotFound")
    assert condition(kube, "root", "Degraded") == ("True", "SecretNotFound")
    assert condition(kube, "root", "Ready") == ("True", "RolledOut")
    assert status(kube, "root")["phase"] == "Degraded"
    assert effects.probed == []


def test_the_registration_is_unknown_when_the_root_has_no_admin_kubeconfig() -> None:
    kube = FakeKube(
        shard_object(**NO_PKI), non_root_object(**SHARD_ADMIN), *SECRETS, *ADMIN_SECRETS
    )
    effects = Effects()
    ctx = context(kube, effects)
    settle(ctx, kube, "root", "shard-1")
    target = effects.probed[-1]
    assert isinstance(target.root, Failure)
    assert condition(kube, "shard-1", "DataVerified") == ("Unknown", "RootNoAdminKubeconfig")
    assert condition(kube, "shard-1", "Ready") == ("True", "RolledOut")


def test_a_failing_probe_never_stops_the_status_write() -> None:
    kube, effects = sharded()

    def broken(target: ProbeTarget) -> Probe:
        raise RuntimeError("MARKER-secret in the text")

    effects.answers = broken
    ctx = context(kube, effects)
    settle(ctx, kube, "root")
    assert condition(kube, "root", "DataVerified") == ("Unknown", "ProbeFailed")
    assert "MARKER" not in str(status(kube, "root"))


def test_without_kcp_checks_kcp_is_never_asked_and_ready_says_so() -> None:
    kube, effects = sharded()
    ctx = context(kube, effects)
    ctx.settings.kcp_checks = False
    settle(ctx, kube, "root", "shard-1")
    assert effects.probed == []
    assert effects.cleaned == []
    for name in ("root", "shard-1"):
        assert condition(kube, name, "Ready") == ("True", "RolledOut")
        assert condition(kube, name, "DataVerified") == ("Unknown", "NoAdminKubeconfig")
        assert "--no-kcp-checks" in conditions(kube, name)["DataVerified"]["message"]
