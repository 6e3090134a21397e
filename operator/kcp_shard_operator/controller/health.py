"""Ask kcp about a rolled-out Shard, at most every ``PROBE_INTERVAL_SECONDS`` and less often while
the questions fail; every pass in between reuses the last answers.

The questions (up to three requests of ``PROBE_TIMEOUT`` each, and the reads of the admin
kubeconfigs) run on the context's background runner, outside the Shard's pass: a pass that
finds them due starts them and goes on with the last answers; a new answer calls for a pass.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from enum import Enum

from kcp_shard_operator.controller.context import Asked, Context, Logger
from kcp_shard_operator.core.api.model import JSON
from kcp_shard_operator.core.shard.health import (
    ACCEPT_DATA_UID_ANNOTATION,
    DATA_LOST,
    DATA_VERIFIED,
    NO_ADMIN_KUBECONFIG,
    SHARD_UNREACHABLE,
    Failure,
    Health,
    Probe,
    ProbeTarget,
    Subject,
    assess,
    kcp_shard_name,
    no_admin_kubeconfig,
    settling,
)
from kcp_shard_operator.core.shard.names import child_name
from kcp_shard_operator.core.shard.spec import Shard
from kcp_shard_operator.core.status.conditions import condition
from kcp_shard_operator.core.status.deployments import SETTLE_RETRY_SECONDS, rollout_complete
from kcp_shard_operator.kube.client import APIError, error_message

PROBE_INTERVAL_SECONDS = 25.0
"""Just under the 30 s resync, so that every resync pass asks again."""
PROBE_BACKOFF_CAP_SECONDS = 120.0


def probe_delay(failures: int) -> float:
    """Seconds until the next probe after ``failures`` failed ones in a row."""
    if failures <= 0:
        return PROBE_INTERVAL_SECONDS
    return min(PROBE_INTERVAL_SECONDS * float(2 ** (failures - 1)), PROBE_BACKOFF_CAP_SECONDS)


def _kubeconfig(ctx: Context, shard: Shard, whose: str) -> bytes | Failure | None:
    """The admin kubeconfig ``shard`` names, None without a reference, or why it is not there."""
    ref = shard.spec.admin_kubeconfig_secret_ref
    if ref is None:
        return None
    where = f"key {ref.key!r} of Secret {ref.name!r} ({whose}spec.adminKubeconfigSecretRef)"
    try:
        found = ctx.kube.secret_value(shard.namespace, ref.name, ref.key)
    except APIError as err:
        return Failure("APIError", f"reading {where}: {error_message(err)}")
    return found if found is not None else Failure("SecretNotFound", f"{where} not found")


def _unasked(ctx: Context, shard: Shard) -> Failure | None:
    """Why kcp is not asked about ``shard`` at all, None when it is."""
    if not ctx.settings.kcp_checks:
        return Failure(NO_ADMIN_KUBECONFIG, "not verified: the operator runs with --no-kcp-checks")
    if shard.spec.admin_kubeconfig_secret_ref is None:
        return no_admin_kubeconfig()
    return None


def _target(ctx: Context, shard: Shard, root: Shard | None) -> ProbeTarget | Failure:
    own = _kubeconfig(ctx, shard, "")
    if own is None:
        return no_admin_kubeconfig()
    if isinstance(own, Failure):
        return own
    name = kcp_shard_name(shard.name, shard.spec.is_root)
    if shard.spec.is_root:
        return ProbeTarget(own, name)
    if root is None:
        return ProbeTarget(own, name, Failure("ShardNotFound", "the root Shard is missing"))
    theirs = _kubeconfig(ctx, root, f"the root Shard {root.name}'s ")
    if theirs is None:
        theirs = Failure(
            NO_ADMIN_KUBECONFIG, f"the root Shard {root.name} has no spec.adminKubeconfigSecretRef"
        )
    return ProbeTarget(own, name, theirs)


def _failed(probe: Probe) -> bool:
    return probe.failure is not None and probe.failure.reason != NO_ADMIN_KUBECONFIG


def _unreachable(probe: Probe | None) -> bool:
    return (
        probe is not None
        and probe.failure is not None
        and probe.failure.reason == SHARD_UNREACHABLE
    )


class Recorded(Enum):
    KEPT = "kept"
    """The answer is the last one again."""
    CHANGED = "changed"
    ASK_AGAIN = "ask again"
    """Not reported yet: kcp is asked again in SETTLE_RETRY_SECONDS."""


def _record(ctx: Context, shard: Shard, probe: Probe, logger: Logger) -> Recorded:
    """Keep ``probe`` as the last answer about ``shard``, unless the shard is still settling
    after its rollout or did not answer for the first time after answering: then it is asked
    again soon, and only an answer after that is reported."""
    now = ctx.clock()
    with ctx.lock(shard.namespace, f"{shard.name}/probe"):
        last = ctx.probes.get(shard.key)
        if last is None:
            return Recorded.KEPT
        rolled_out_at = last.rolled_out_at if last.rolled_out_at is not None else now
        first_miss = _unreachable(probe) and not last.doubted and not _unreachable(last.probe)
        if settling(probe, now - rolled_out_at) or first_miss:
            ctx.probes[shard.key] = replace(last, next_at=now + SETTLE_RETRY_SECONDS, doubted=True)
            return Recorded.ASK_AGAIN
        failures = last.failures + 1 if _failed(probe) else 0
        ctx.probes[shard.key] = replace(
            last,
            probe=probe,
            failures=failures,
            next_at=now + probe_delay(failures),
            doubted=_unreachable(probe),
        )
    if last.probe == probe:
        return Recorded.KEPT
    logger.info("kcp's answers about Shard %s changed: %s", shard.key, _summary(probe))
    return Recorded.CHANGED


def _ask(
    ctx: Context, shard: Shard, root: Shard | None, logger: Logger, again: Callable[[], None]
) -> None:
    """The background work: read the admin kubeconfigs, ask kcp, keep the answer; a changed
    answer calls ``again`` (a pass over the Shard), one to be asked again soon calls it then."""
    target = _target(ctx, shard, root)
    probe = Probe(failure=target) if isinstance(target, Failure) else _probe(ctx, target, logger)
    recorded = _record(ctx, shard, probe, logger)
    if recorded is Recorded.CHANGED:
        again()
    elif recorded is Recorded.ASK_AGAIN:
        ctx.later(SETTLE_RETRY_SECONDS, again)


def _asked(
    ctx: Context, shard: Shard, root: Shard | None, logger: Logger, again: Callable[[], None]
) -> Probe | None:
    """The last answers about the rolled-out ``shard``; asks again in the background when
    they are due."""
    now = ctx.clock()
    with ctx.lock(shard.namespace, f"{shard.name}/probe"):
        last = ctx.probes.get(shard.key) or Asked(None, 0, now, None)
        if last.rolled_out_at is None:
            last = replace(last, next_at=now, rolled_out_at=now)
        ctx.probes[shard.key] = last
    if now >= last.next_at:
        unasked = _unasked(ctx, shard)
        if unasked is not None:
            _record(ctx, shard, Probe(failure=unasked), logger)
        else:
            ctx.background.request(
                ("probe", shard.key),
                lambda: _ask(ctx, shard, root, logger, again),
                again=False,
            )
    found = ctx.probes.get(shard.key)
    return found.probe if found is not None else None


def _probe(ctx: Context, target: ProbeTarget, logger: Logger) -> Probe:
    """``ctx.probe``, whose bug must not cost the pass its status write; only the exception's
    type is shown, its text might quote what the probe held."""
    try:
        return ctx.probe(target)
    except Exception as err:
        logger.error("the health probe failed: %s", type(err).__name__)
        return Probe(failure=Failure("ProbeFailed", f"the probe failed: {type(err).__name__}"))


def _summary(probe: Probe) -> str:
    if probe.failure is not None:
        return probe.failure.reason
    if probe.not_ready is not None:
        return f"not ready ({probe.not_ready})"
    registration = type(probe.registration).__name__ if probe.registration else "root shard"
    return f"data UID {probe.data_uid}, registration {registration}"


def shard_health(
    ctx: Context,
    shard: Shard,
    root: Shard | None,
    obj: JSON,
    deployment: JSON | None,
    logger: Logger,
    again: Callable[[], None],
) -> Health | None:
    """What kcp says about a Shard whose rollout is complete; None while it rolls out, or
    before kcp first answered since (an answer about the pods a rollout replaced is
    forgotten). ``again`` requests a pass over the Shard (a new answer)."""
    if not rollout_complete(deployment):
        with ctx.lock(shard.namespace, f"{shard.name}/probe"):
            last = ctx.probes.get(shard.key)
            if last is not None:
                ctx.probes[shard.key] = replace(last, probe=None, failures=0, rolled_out_at=None)
        return None
    probe = _asked(ctx, shard, root, logger, again)
    if probe is None:
        return None
    root_verified = condition(root.status if root else None, DATA_VERIFIED) or {}
    annotations = obj["metadata"].get("annotations") or {}
    root_ref = shard.spec.root_shard_ref
    subject = Subject(
        name=shard.name,
        namespace=shard.namespace,
        deployment=child_name(shard),
        root=root_ref.name if root_ref else None,
        recorded_uid=(shard.status or {}).get("dataUID"),
        accepted_uid=annotations.get(ACCEPT_DATA_UID_ANNOTATION),
        root_data_lost=root_verified.get("reason") == DATA_LOST,
    )
    return assess(subject, probe)
