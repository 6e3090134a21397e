"""The identity-cache cleanup of one Shard, backing off after failed attempts.

An attempt (the read of the admin kubeconfig and up to three requests to kcp) runs on the
context's background runner, outside the Shard's pass: the pass that decides it starts it,
and the pass it then calls for records its outcome.
"""

from __future__ import annotations

from collections.abc import Callable

from kcp_shard_operator.controller.context import Context, Logger
from kcp_shard_operator.core.shard.spec import Shard
from kcp_shard_operator.core.status.conditions import IDENTITY_CACHE_CLEANED, Condition
from kcp_shard_operator.identitycache import policy as identitycache
from kcp_shard_operator.kube.client import APIError, error_message


def clean_identity_cache(
    ctx: Context, shard: Shard, logger: Logger, again: Callable[[], None]
) -> Condition | None:
    """Start the deletion of the stale ConfigMap when the decision says so; the condition to
    record (None: leave it as it is). ``again`` requests a pass over the Shard (an attempt
    ended)."""
    settings = ctx.settings
    decision = identitycache.decide(
        shard,
        settings.deprecating_release,
        enabled=settings.identity_cache_cleanup and settings.kcp_checks,
    )
    if decision.action is not identitycache.Action.CLEAN:
        ctx.cleaned.pop(shard.key, None)
        return decision.condition
    ended = ctx.cleaned.pop(shard.key, None)
    if ended is not None:
        return ended
    _, not_before = ctx.cleanup_failures.get(shard.key, (0, 0.0))
    if ctx.clock() < not_before:
        return None
    ctx.background.request(
        ("cleanup", shard.key), lambda: _attempt(ctx, shard, logger, again), again=False
    )
    return ctx.cleaned.pop(shard.key, None)


def _attempt(ctx: Context, shard: Shard, logger: Logger, again: Callable[[], None]) -> None:
    """One attempt: its condition is kept for the pass ``again`` requests; a failed one
    (and one that could not read the kubeconfig) is tried again after a growing delay."""
    ref = shard.spec.admin_kubeconfig_secret_ref
    assert ref is not None
    failures, _ = ctx.cleanup_failures.get(shard.key, (0, 0.0))
    retry = True
    try:
        kubeconfig = ctx.kube.secret_value(shard.namespace, ref.name, ref.key)
    except APIError as err:
        ctx.metrics.cleanups.labels("APIError").inc()
        cleaned = Condition(
            IDENTITY_CACHE_CLEANED,
            False,
            "APIError",
            f"reading Secret {ref.name!r} (spec.adminKubeconfigSecretRef): {error_message(err)}",
        )
    else:
        if kubeconfig is None:
            ctx.metrics.cleanups.labels("SecretNotFound").inc()
            cleaned = Condition(
                IDENTITY_CACHE_CLEANED,
                False,
                "SecretNotFound",
                f"key {ref.key!r} of Secret {ref.name!r} (spec.adminKubeconfigSecretRef) not found",
            )
        else:
            outcome = _clean(ctx, kubeconfig)
            retry = outcome.retry
            ctx.metrics.cleanups.labels(outcome.result.value).inc()
            cleaned = identitycache.cleaned_condition(
                outcome, f"kubeconfig in key {ref.key!r} of Secret {ref.name!r}"
            )
    if retry:
        delay = identitycache.retry_delay(failures + 1)
        ctx.cleanup_failures[shard.key] = (failures + 1, ctx.clock() + delay)
    else:
        ctx.cleanup_failures.pop(shard.key, None)
    # Info, not warning: kopf would post every attempt's line as an Event too; the condition's
    # change posts one already.
    logger.info("identity-cache cleanup of %s: %s: %s", shard.key, cleaned.reason, cleaned.message)
    ctx.cleaned[shard.key] = cleaned
    again()


def _clean(ctx: Context, kubeconfig: bytes) -> identitycache.Outcome:
    try:
        return ctx.clean(kubeconfig)
    except Exception as err:
        # A bug in the cleanup must not cost the pass its status write. Only the exception's
        # type is shown: its text might quote what the kubeconfig holds.
        return identitycache.Outcome(
            identitycache.Result.FAILED, f"the cleanup failed: {type(err).__name__}"
        )
