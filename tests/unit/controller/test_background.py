"""The kcp probes and the identity-cache cleanup run outside the passes, on their own schedule,
and a pass uses their last answer; a root's dependents get passes of their own; what the
context keeps per object is freed."""

from __future__ import annotations

import threading
from collections.abc import Callable
from concurrent.futures import Executor, Future
from contextvars import ContextVar
from typing import Any

from kcp_shard_operator.controller.context import Context, call_later
from kcp_shard_operator.controller.fanout import reconcile_with_dependents
from kcp_shard_operator.controller.schedule import Runner
from kcp_shard_operator.core.shard.health import SHARD_UNREACHABLE, Failure, Probe
from tests.conftest import non_root_object, shard_object
from tests.fake_kube import LOGGER, SECRETS, Effects, FakeKube, context, rolled_out, secret, settle
from tests.unit.controller.test_pass import condition, conditions
from tests.watch import Watches

ADMIN: dict[str, Any] = {"adminKubeconfigSecretRef": {"name": "admin"}}
ADMIN_SECRET = secret("admin", kubeconfig="a3ViZWNvbmZpZw==")


class Deferred(Executor):
    """An executor that runs what it is given only when told to."""

    def __init__(self) -> None:
        self.waiting: list[Callable[[], object]] = []

    def submit(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Future[Any]:
        self.waiting.append(lambda: fn(*args, **kwargs))
        return Future()

    def run(self) -> int:
        """Run what waits (and what that submits); how many ran."""
        ran = 0
        while self.waiting:
            self.waiting.pop(0)()
            ran += 1
        return ran


def deferred_background(ctx: Context) -> Deferred:
    executor = Deferred()
    ctx.background = Runner("background", executor)
    return executor


def test_the_probe_runs_outside_the_pass_which_uses_the_last_answer() -> None:
    kube = FakeKube(shard_object(**ADMIN), ADMIN_SECRET)
    effects = Effects()
    ctx = context(kube, effects)
    background = deferred_background(ctx)
    settle(ctx, kube, "root")
    assert effects.probed == [], "the pass did not wait for kcp"
    assert condition(kube, "root", "Ready") == ("False", "Verifying"), "not Ready unasked"
    assert "DataVerified" not in conditions(kube, "root")
    settle(ctx, kube, "root")
    assert len(background.waiting) == 1, "one probe at a time"
    assert background.run() == 1
    assert len(effects.probed) == 1
    assert condition(kube, "root", "DataVerified") == ("True", "Verified"), "its answer's pass"
    assert condition(kube, "root", "Ready") == ("True", "RolledOut")
    writes = len(kube.writes)
    settle(ctx, kube, "root")
    assert background.waiting == [], "not due: the last answer serves"
    assert kube.writes[writes:] == []


def test_the_identity_cache_cleanup_runs_outside_the_pass() -> None:
    kube = FakeKube(rolled_out(shard_object()), non_root_object(**ADMIN), *SECRETS, ADMIN_SECRET)
    effects = Effects()
    ctx = context(kube, effects)
    background = deferred_background(ctx)
    settle(ctx, kube, "shard-1")
    assert effects.cleaned == []
    assert "IdentityCacheCleaned" not in conditions(kube, "shard-1")
    background.run()
    assert effects.cleaned == [b"kubeconfig"]
    assert condition(kube, "shard-1", "IdentityCacheCleaned") == ("True", "Deleted")


def test_the_dependents_of_a_root_get_passes_of_their_own() -> None:
    kube = FakeKube(
        rolled_out(shard_object()),
        non_root_object("shard-1"),
        non_root_object("shard-2"),
        *SECRETS,
    )
    ctx = context(kube)
    passes = Deferred()
    ctx.passes = Runner("pass", passes)
    spec = kube.objects[("Shard", "ns", "root")]["spec"]
    reconcile_with_dependents(ctx, "ns", "root", spec, LOGGER)
    assert kube.writes == [], "no pass ran in the handler's thread"
    assert len(passes.waiting) == 3, "the root and each dependent, to run side by side"
    passes.run()
    applied = {name.split("-kcp")[0] for op, _, name in kube.writes if op == "apply"}
    assert applied == {"root", "shard-1", "shard-2"}


def test_what_the_context_keeps_about_a_deleted_shard_is_freed() -> None:
    kube = FakeKube(shard_object(**ADMIN), ADMIN_SECRET)
    effects = Effects(answers=lambda target: Probe(failure=Failure(SHARD_UNREACHABLE, "refused")))
    watches = Watches(context(kube, effects), kube)
    watches.listing()
    watches.catch_up()
    kube.roll_out("ns", "root-kcp")
    watches.catch_up()
    ctx = watches.ctx
    assert ctx.probes
    del kube.objects[("Shard", "ns", "root")]
    watches.catch_up()
    assert ctx.probes == {}
    assert ctx.rolled_out == {}
    assert ctx._locks == {}
    assert ctx.passes.idle()
    assert ctx.background.idle()


def test_a_burst_of_events_for_one_shard_runs_one_pass() -> None:
    kube = FakeKube(shard_object(**ADMIN), ADMIN_SECRET)
    ctx = context(kube)
    passes = Deferred()
    ctx.passes = Runner("pass", passes)
    watches = Watches(ctx, kube)
    shard = kube.objects[("Shard", "ns", "root")]
    for _ in range(10):
        watches.deliver("MODIFIED", shard)
    assert len(passes.waiting) == 1
    passes.run()
    ran = ctx.metrics.registry.get_sample_value(
        "kcp_shard_operator_reconcile_passes_total", {"kind": "Shard"}
    )
    assert ran == 1


def test_work_asked_for_later_runs_in_the_askers_context() -> None:
    """The pass a doubted probe asks for runs with kopf's Event poster, as the asker's did."""
    poster: ContextVar[str] = ContextVar("poster")
    poster.set("kopf's")
    seen: list[str] = []
    done = threading.Event()

    def work() -> None:
        seen.append(poster.get())
        done.set()

    call_later(0.01, work)
    assert done.wait(10)
    assert seen == ["kopf's"]
