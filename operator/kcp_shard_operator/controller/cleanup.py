"""The identity-cache cleanup of one Shard in a pass, backing off after failed attempts."""

from __future__ import annotations

from kcp_shard_operator.controller.context import Context, Logger
from kcp_shard_operator.core.shard.spec import Shard
from kcp_shard_operator.core.status.conditions import IDENTITY_CACHE_CLEANED, Condition
from kcp_shard_operator.identitycache import policy as identitycache
from kcp_shard_operator.kube.client import APIError, error_message


def clean_identity_cache(ctx: Context, shard: Shard, logger: Logger) -> Condition | None:
    """Delete the stale ConfigMap when the decision says so; the condition to record."""
    settings = ctx.settings
    decision = identitycache.decide(
        shard,
        settings.deprecating_release,
        enabled=settings.identity_cache_cleanup and settings.kcp_checks,
    )
    if decision.action is not identitycache.Action.CLEAN:
        return decision.condition
    failures, not_before = ctx.cleanup_failures.get(shard.key, (0, 0.0))
    if ctx.clock() < not_before:
        return None
    ref = shard.spec.admin_kubeconfig_secret_ref
    assert ref is not None
    try:
        kubeconfig = ctx.kube.secret_value(shard.namespace, ref.name, ref.key)
    except APIError as err:
        ctx.metrics.cleanups.labels("APIError").inc()
        return Condition(
            IDENTITY_CACHE_CLEANED,
            False,
            "APIError",
            f"reading Secret {ref.name!r} (spec.adminKubeconfigSecretRef): {error_message(err)}",
        )
    if kubeconfig is None:
        ctx.metrics.cleanups.labels("SecretNotFound").inc()
        return Condition(
            IDENTITY_CACHE_CLEANED,
            False,
            "SecretNotFound",
            f"key {ref.key!r} of Secret {ref.name!r} (spec.adminKubeconfigSecretRef) not found",
        )
    try:
        outcome = ctx.clean(kubeconfig)
    except Exception as err:
        # A bug in the cleanup must not cost the pass its status write. Only the exception's
        # type is shown: its text might quote what the kubeconfig holds.
        outcome = identitycache.Outcome(
            identitycache.Result.FAILED, f"the cleanup failed: {type(err).__name__}"
        )
    if outcome.retry:
        delay = identitycache.retry_delay(failures + 1)
        ctx.cleanup_failures[shard.key] = (failures + 1, ctx.clock() + delay)
    else:
        ctx.cleanup_failures.pop(shard.key, None)
    ctx.metrics.cleanups.labels(outcome.result.value).inc()
    cleaned = identitycache.cleaned_condition(
        outcome, f"kubeconfig in key {ref.key!r} of Secret {ref.name!r}"
    )
    # Info, not warning: kopf would post every attempt's line as an Event too; the condition's
    # change posts one already.
    logger.info("identity-cache cleanup of %s: %s: %s", shard.key, cleaned.reason, cleaned.message)
    return cleaned
