"""A watch gap: what was deleted while the operator could not watch is dropped from the store
when the watches list again, and its owners' passes make it again; meanwhile no status says
Ready over it. A delete-then-recreate leaves the store with the new object."""

from __future__ import annotations

import copy
from types import SimpleNamespace

import kopf

from kcp_shard_operator.controller.context import Context
from kcp_shard_operator.controller.handlers import (
    OBJECT_WORKER_IDLE_SECONDS,
    WATCH_INACTIVITY_SECONDS,
    configure,
    stop,
)
from kcp_shard_operator.controller.watched import RELIST_GAP_SECONDS, Relists
from kcp_shard_operator.core.api.model import JSON
from testkit.wait import wait_for
from tests.conftest import NO_PKI, shard_object
from tests.fake_kube import Effects, FakeKube, context
from tests.unit.controller.test_pass import condition, status
from tests.watch import Watches

DEPLOYMENT = ("Deployment", "ns", "root-kcp")
SERVICE = ("Service", "ns", "root-kcp")


def ready_root() -> tuple[FakeKube, Effects, Watches]:
    """A root Shard the operator made Ready, every change delivered by its watches."""
    kube = FakeKube(shard_object(**NO_PKI))
    effects = Effects()
    watches = Watches(context(kube, effects), kube)
    watches.listing()
    watches.catch_up()
    kube.roll_out("ns", "root-kcp")
    watches.catch_up()
    assert condition(kube, "root", "Ready") == ("True", "RolledOut")
    return kube, effects, watches


def relists(watches: Watches) -> float:
    found = watches.ctx.metrics.registry.get_sample_value(
        "kcp_shard_operator_watch_relists_total", {"kind": "Shard"}
    )
    return found or 0.0


def test_children_deleted_during_a_watch_gap_are_made_again_when_the_watches_list_again() -> None:
    kube, effects, watches = ready_root()
    old = {key: kube.objects[key]["metadata"]["uid"] for key in (DEPLOYMENT, SERVICE)}
    # The gap: the watches deliver nothing while both are deleted (straight from etcd), and no
    # Deployment or Service is left for their watches' listings to send.
    for key in (DEPLOYMENT, SERVICE):
        del kube.objects[key]
    effects.now += RELIST_GAP_SECONDS + 60
    watches.listing()
    assert relists(watches) == 1
    for key in (DEPLOYMENT, SERVICE):
        assert key in kube.objects, f"{key} not made again"
        assert kube.objects[key]["metadata"]["uid"] != old[key]
    assert condition(kube, "root", "Ready") == ("False", "RollingOut")
    assert status(kube, "root")["phase"] != "Ready"
    watches.catch_up()
    kube.roll_out("ns", "root-kcp")
    watches.catch_up()
    assert condition(kube, "root", "Ready") == ("True", "RolledOut")


def test_a_resync_pass_after_the_gap_reads_what_the_store_doubts() -> None:
    """The periodic pass may come between the first listing event and the last: it reads the
    API server instead of the store, and says RollingOut, not Ready."""
    kube, effects, watches = ready_root()
    del kube.objects[DEPLOYMENT]
    effects.now += RELIST_GAP_SECONDS + 60
    ctx = watches.ctx
    ctx.store.doubt(["ns"])
    calls = len(kube.calls)
    watches.deliver("MODIFIED", kube.objects[("Shard", "ns", "root")])
    assert ("list", "Deployment", "") in kube.calls[calls:]
    assert DEPLOYMENT in kube.objects
    assert condition(kube, "root", "Ready") == ("False", "RollingOut")


def test_a_deployment_deleted_and_made_again_by_hand_is_the_one_the_operator_manages() -> None:
    """kopf orders the events of one object, not of two: the new Deployment's ADDED may come
    before the old one's DELETED. The store keeps the new one, and the pass writes nothing
    over an object that is as it should be."""
    kube, _, watches = ready_root()
    old = kube.objects.pop(DEPLOYMENT)
    again: JSON = copy.deepcopy(old)
    again["metadata"] = {
        key: value for key, value in old["metadata"].items() if key != "resourceVersion"
    }
    again["metadata"]["uid"] = "made-by-hand"
    made = kube.put(again)
    writes = len(kube.writes)
    watches.deliver("ADDED", made)
    watches.deliver("DELETED", old)
    watches.seen = copy.deepcopy(kube.objects)
    assert kube.writes[writes:] == [], "nothing to write: the new Deployment is as rendered"
    known, body = watches.ctx.store.lookup(*DEPLOYMENT)
    assert known
    assert body is not None
    assert body["metadata"]["uid"] == "made-by-hand"
    shard = copy.deepcopy(kube.objects[("Shard", "ns", "root")])
    shard["spec"]["extraArgs"] = ["--v=3"]
    kube.put(shard)
    watches.catch_up()
    deployment = kube.objects[DEPLOYMENT]
    assert deployment["metadata"]["uid"] == "made-by-hand"
    assert "--v=3" in deployment["spec"]["template"]["spec"]["containers"][0]["args"]


def test_a_listing_after_a_quiet_gap_or_after_changes_is_a_listing_again() -> None:
    relisted = Relists()
    assert [relisted.listed("Secret", at) for at in (0.0, 0.1, 0.2)] == [False] * 3
    later = 0.2 + RELIST_GAP_SECONDS + 1
    assert [relisted.listed("Secret", at) for at in (later, later + 0.1)] == [True, False]
    # A watch whose first listing was empty: changes came, and then a listing.
    relisted.changed("Deployment")
    assert relisted.listed("Deployment", later)
    assert not relisted.listed("Deployment", later + 0.1)
    assert not relisted.listed("Pod", later)


def test_the_operator_starts_with_pools_a_watch_inactivity_timeout_and_the_gap_reaction() -> None:
    ctx = context(FakeKube())
    settings = kopf.OperatorSettings()
    configure(settings=settings, memo=SimpleNamespace(context=ctx))
    try:
        assert settings.watching.inactivity_timeout == WATCH_INACTIVITY_SECONDS
        assert settings.queueing.idle_timeout == OBJECT_WORKER_IDLE_SECONDS < 5
        assert ctx.passes is not ctx.background
        assert ctx.vanished is not Context.vanished
        runs: list[str] = []
        ctx.passes.request("k", lambda: runs.append("ran"))
        wait_for(lambda: runs, 10, "a pass on the pool", interval=0.01)
    finally:
        stop(memo=SimpleNamespace(context=ctx))
