"""kopf handlers: read, call the core, write; one child's write falls back step by step."""

from __future__ import annotations

import datetime
import logging
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from typing import Any, cast

import kopf

from kcp_shard_operator.constants import (
    API_GROUP,
    API_VERSION,
    FIELD_MANAGER,
    SHARD_API_VERSION,
    SHARD_KIND,
    SHARD_PLURAL,
)
from kcp_shard_operator.controller.store import Store
from kcp_shard_operator.core.model import JSON, SpecError
from kcp_shard_operator.core.planner import (
    RECREATABLE_KINDS,
    cause_of,
    contains,
    foreign_fields,
    plan,
    replacement,
)
from kcp_shard_operator.core.render import child_name, selector_labels
from kcp_shard_operator.core.spec import Shard, parse_shard
from kcp_shard_operator.core.status import (
    IDENTITY_CACHE_CLEANED,
    Condition,
    Observation,
    change_event,
    events_between,
    invalid_status,
    rollout_complete,
    shard_status,
)
from kcp_shard_operator.core.versions import Version
from kcp_shard_operator.identitycache import policy as identitycache
from kcp_shard_operator.identitycache.client import clean_shard
from kcp_shard_operator.kube import credentials
from kcp_shard_operator.kube.client import (
    APIError,
    Kube,
    RefusedError,
    error_message,
)

CHILD_KINDS = (
    ("v1", "Service", "services"),
    ("apps/v1", "Deployment", "deployments"),
    ("policy/v1", "PodDisruptionBudget", "poddisruptionbudgets"),
)
RESYNC_SECONDS = 30.0
FINALIZER = f"{API_GROUP}/finalizer"
PEERING_LIFETIME_SECONDS = 15
"""Keep-alives go out every lifetime minus 5-10 s, so a crashed replica is replaced within it."""
UNCHANGED = "unchanged"
Logger = logging.Logger | logging.LoggerAdapter[Any]


@dataclass
class Settings:
    """Operator settings, fixed at start-up."""

    deprecating_release: Version
    identity_cache_cleanup: bool = True
    peering_lifetime: int = PEERING_LIFETIME_SECONDS


@dataclass
class Context:
    """What every handler needs: settings, API access, the watch-fed store, per-Shard locks."""

    settings: Settings
    kube: Kube
    store: Store = field(default_factory=Store)
    _locks: dict[str, threading.Lock] = field(default_factory=dict)
    _guard: threading.Lock = field(default_factory=threading.Lock)
    cleanup_failures: dict[str, tuple[int, float]] = field(default_factory=dict)

    @contextmanager
    def lock(self, namespace: str, name: str) -> Iterator[None]:
        """Serialise passes over one Shard coming from different watch streams."""
        with self._guard:
            lock = self._locks.setdefault(f"{namespace}/{name}", threading.Lock())
        with lock:
            yield


def _now() -> str:
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _read(ctx: Context, api_version: str, kind: str, namespace: str, name: str) -> JSON | None:
    """The object from the store; from the API server only when the store does not know it."""
    known, body = ctx.store.lookup(kind, namespace, name)
    if known:
        return body
    found = ctx.kube.get(api_version, kind, namespace, name)
    if found is None:
        ctx.store.not_found(kind, namespace, name)
    else:
        ctx.store.put(kind, found)
    return found


def _get_shard(ctx: Context, namespace: str, name: str) -> JSON | None:
    return _read(ctx, SHARD_API_VERSION, SHARD_KIND, namespace, name)


def _write_status(ctx: Context, obj: JSON, status: JSON) -> None:
    before = obj.get("status")
    if before == status:
        return
    meta = obj["metadata"]
    ctx.store.put(SHARD_KIND, ctx.kube.patch_shard_status(meta["namespace"], meta["name"], status))
    for event in events_between(before, status):
        kopf.event(
            cast(kopf.Body, obj), type=event.type, reason=event.reason, message=event.message
        )


def reconcile(ctx: Context, namespace: str, name: str, logger: Logger) -> None:
    """One level-triggered pass over a Shard: children first, then status.

    A refusal or an unreachable API server ends the pass with one log line (and, when the
    status can still be written, ``Degraded``), never with a traceback retried by kopf.
    """
    with ctx.lock(namespace, name):
        try:
            _reconcile(ctx, namespace, name, logger)
        except APIError as err:
            logger.error("pass over Shard %s/%s stopped: %s", namespace, name, error_message(err))


def _reconcile(ctx: Context, namespace: str, name: str, logger: Logger) -> None:
    obj = _get_shard(ctx, namespace, name)
    if obj is None or obj["metadata"].get("deletionTimestamp"):
        return
    release = ctx.settings.deprecating_release
    generation = int(obj["metadata"].get("generation", 0))
    try:
        shard = parse_shard(obj, release)
    except SpecError as err:
        _write_status(ctx, obj, invalid_status(obj.get("status"), generation, str(err), _now()))
        return
    try:
        root = _root_of(ctx, shard)
        observed = {
            kind: _read(ctx, api, kind, namespace, child_name(shard))
            for api, kind, _ in CHILD_KINDS
        }
        revisions = {
            name: str(
                ((_read(ctx, "v1", "Secret", namespace, name) or {}).get("metadata") or {}).get(
                    "resourceVersion", ""
                )
            )
            for name in shard.spec.secret_names
        }
    except APIError as err:
        seen = Observation(
            deployment=None, error=f"reading: {error_message(err)}", error_reason="APIError"
        )
        _write_status(ctx, obj, shard_status(shard, seen, _now()))
        return
    decision = plan(shard, root, observed, release, revisions)
    failures: list[str] = []
    for child in decision.apply:
        kind, child_ref = child["kind"], f"{child['kind']} {child['metadata']['name']}"
        live = observed.get(kind)
        cause = cause_of(live, child)
        try:
            written, how = _write_child(ctx, child, live)
        except APIError as err:
            failures.append(f"{child_ref}: {error_message(err)}")
            logger.warning("could not write %s: %s", child_ref, error_message(err))
            continue
        observed[kind] = written
        if how == UNCHANGED:
            continue
        ctx.store.put(kind, written)
        logger.info("%s %s (%s)", how, child_ref, cause.value)
        event = change_event(kind, child["metadata"]["name"], cause.value, generation)
        if event is not None:
            kopf.event(
                cast(kopf.Body, obj), type=event.type, reason=event.reason, message=event.message
            )
    if decision.delete_pdb:
        try:
            ctx.kube.delete("policy/v1", "PodDisruptionBudget", namespace, child_name(shard))
            ctx.store.deleted("PodDisruptionBudget", namespace, child_name(shard))
        except APIError as err:
            failures.append(f"PodDisruptionBudget {child_name(shard)}: {error_message(err)}")
    deployment = observed.get("Deployment")
    pods = [] if deployment is None or rollout_complete(deployment) else _pods(ctx, shard)
    seen = Observation(
        deployment=deployment,
        error=decision.error,
        error_reason=decision.error_reason,
        waiting=decision.waiting,
        dropped_args=decision.dropped_args,
        unused_refs=decision.unused_refs,
        apply_errors=failures,
        missing_secrets=decision.missing_secrets,
        pods=pods,
    )
    status = shard_status(shard, seen, _now())
    cleaned = _clean_identity_cache(ctx, replace(shard, status=status), logger)
    if cleaned is not None:
        status = shard_status(shard, replace(seen, extra_conditions=[cleaned]), _now())
    _write_status(ctx, obj, status)


def _pods(ctx: Context, shard: Shard) -> list[JSON]:
    """The shard's pods as the pod watch last delivered them."""
    wanted = selector_labels(shard).items()
    return ctx.store.select(
        "Pod",
        shard.namespace,
        lambda pod: wanted <= ((pod.get("metadata") or {}).get("labels") or {}).items(),
    )


def _write_child(ctx: Context, child: JSON, live: JSON | None) -> tuple[JSON, str]:
    """Bring one child to ``child``: apply, retried once; else replace; else recreate.

    Returns the object as written and how. Spec fields another manager added are put
    back by a replace at once (server-side apply would keep them).
    """
    if live is not None and foreign_fields(live, FIELD_MANAGER):
        body = replacement(child, live)
        if contains(live, child):
            # Fields set to what the server would default them to anyway: nothing to put back.
            preview = ctx.kube.replace(body, dry_run=True)
            if preview.get("spec") == live.get("spec"):
                return live, UNCHANGED
        return ctx.kube.replace(body), "replaced"
    try:
        try:
            applied = ctx.kube.apply(child)
        except RefusedError:
            applied = ctx.kube.apply(child)
    except RefusedError:
        if live is None:
            raise
        return _fall_back(ctx, child, live)
    if not contains(applied, child):
        return ctx.kube.replace(replacement(child, applied)), "replaced"
    return applied, "applied"


def _fall_back(ctx: Context, child: JSON, live: JSON) -> tuple[JSON, str]:
    try:
        return ctx.kube.replace(replacement(child, live)), "replaced"
    except RefusedError:
        if child["kind"] not in RECREATABLE_KINDS:
            raise
    meta = child["metadata"]
    ctx.kube.delete(child["apiVersion"], child["kind"], meta["namespace"], meta["name"])
    return ctx.kube.apply(child), "recreated"


def _clean_identity_cache(ctx: Context, shard: Shard, logger: Logger) -> Condition | None:
    """Delete the stale ConfigMap when the decision says so; the condition to record."""
    decision = identitycache.decide(
        shard, ctx.settings.deprecating_release, enabled=ctx.settings.identity_cache_cleanup
    )
    if decision.action is not identitycache.Action.CLEAN:
        return decision.condition
    failures, not_before = ctx.cleanup_failures.get(shard.key, (0, 0.0))
    if time.monotonic() < not_before:
        return None
    ref = shard.spec.admin_kubeconfig_secret_ref
    assert ref is not None
    try:
        kubeconfig = ctx.kube.secret_value(shard.namespace, ref.name, ref.key)
    except APIError as err:
        return Condition(
            IDENTITY_CACHE_CLEANED,
            False,
            "APIError",
            f"reading Secret {ref.name!r} (spec.adminKubeconfigSecretRef): {error_message(err)}",
        )
    if kubeconfig is None:
        return Condition(
            IDENTITY_CACHE_CLEANED,
            False,
            "SecretNotFound",
            f"key {ref.key!r} of Secret {ref.name!r} (spec.adminKubeconfigSecretRef) not found",
        )
    outcome = clean_shard(kubeconfig)
    logger.info("identity-cache cleanup of %s: %s", shard.key, outcome.result.value)
    if outcome.retry:
        delay = identitycache.retry_delay(failures + 1)
        ctx.cleanup_failures[shard.key] = (failures + 1, time.monotonic() + delay)
    else:
        ctx.cleanup_failures.pop(shard.key, None)
    return identitycache.cleaned_condition(
        outcome, f"kubeconfig in key {ref.key!r} of Secret {ref.name!r}"
    )


def _root_of(ctx: Context, shard: Shard) -> Shard | None:
    ref = shard.spec.root_shard_ref
    if ref is None:
        return None
    obj = _get_shard(ctx, shard.namespace, ref.name)
    if obj is None:
        return None
    try:
        return parse_shard(obj, ctx.settings.deprecating_release)
    except SpecError:
        return None


def _dependents(ctx: Context, namespace: str, root_name: str) -> list[str]:
    return [
        item["metadata"]["name"]
        for item in ctx.store.select(
            SHARD_KIND,
            namespace,
            lambda item: (
                ((item.get("spec") or {}).get("rootShardRef") or {}).get("name") == root_name
            ),
        )
    ]


def _context(memo: Any) -> Context:
    ctx = memo.context
    assert isinstance(ctx, Context)
    return ctx


def _remember(ctx: Context, kind: str, type: str | None, body: kopf.Body) -> None:
    """Keep what a watch delivered; a DELETED event leaves the object known as absent."""
    raw = cast(JSON, dict(body))
    if type == "DELETED":
        meta = raw.get("metadata") or {}
        ctx.store.deleted(kind, str(meta.get("namespace", "")), str(meta.get("name", "")))
    else:
        ctx.store.put(kind, raw)


def on_shard_event(
    *,
    type: str,
    body: kopf.Body,
    spec: kopf.Spec,
    meta: kopf.Meta,
    namespace: str | None,
    name: str,
    memo: Any,
    logger: Logger,
    **_: Any,
) -> None:
    ctx = _context(memo)
    _remember(ctx, SHARD_KIND, type, body)
    if type == "DELETED" or namespace is None:
        return
    if FINALIZER not in (meta.get("finalizers") or []) and not meta.get("deletionTimestamp"):
        # kopf adds its finalizer first; writing status now would race with that patch.
        # The finalizer's own MODIFIED event brings the Shard back here.
        return
    reconcile(ctx, namespace, name, logger)
    if not spec.get("rootShardRef"):
        for dependent in _dependents(ctx, namespace, name):
            reconcile(ctx, namespace, dependent, logger)


def on_shard_timer(
    *, namespace: str | None, name: str, memo: Any, logger: Logger, **_: Any
) -> None:
    if namespace is not None:
        reconcile(_context(memo), namespace, name, logger)


def on_child_event(
    *,
    type: str,
    body: kopf.Body,
    namespace: str | None,
    meta: kopf.Meta,
    memo: Any,
    logger: Logger,
    **_: Any,
) -> None:
    ctx = _context(memo)
    _remember(ctx, str(body.get("kind", "")), type, body)
    if namespace is None:
        return
    for owner in meta.get("ownerReferences") or []:
        if owner.get("kind") == SHARD_KIND and owner.get("apiVersion") == SHARD_API_VERSION:
            reconcile(ctx, namespace, owner["name"], logger)


def on_pod_event(*, type: str | None, body: kopf.Body, memo: Any, **_: Any) -> None:
    """Keep the shard pods' state for the next pass (a Deployment event or the resync)."""
    _remember(_context(memo), "Pod", type, body)


def _referencing(ctx: Context, namespace: str, secret: str) -> list[str]:
    """Shards of ``namespace`` whose pods may mount Secret ``secret``."""
    names = []
    for body in ctx.store.select(SHARD_KIND, namespace, lambda _: True):
        try:
            shard = parse_shard(body, ctx.settings.deprecating_release)
        except SpecError:
            continue
        if secret in shard.spec.secret_names:
            names.append(shard.name)
    return names


def on_secret_event(
    *,
    type: str | None,
    body: kopf.Body,
    namespace: str | None,
    name: str,
    memo: Any,
    logger: Logger,
    **_: Any,
) -> None:
    """Remember the Secret's resourceVersion; a created or rotated one rolls its shards' pods.

    The initial listing (type None) only fills the store.
    """
    ctx = _context(memo)
    _remember(ctx, "Secret", type, body)
    if type not in ("ADDED", "MODIFIED") or namespace is None:
        return
    for shard in _referencing(ctx, namespace, name):
        reconcile(ctx, namespace, shard, logger)


def configure(settings: kopf.OperatorSettings, memo: Any, **_: Any) -> None:
    settings.peering.lifetime = _context(memo).settings.peering_lifetime
    settings.persistence.progress_storage = kopf.AnnotationsProgressStorage(prefix=API_GROUP)
    settings.persistence.diffbase_storage = kopf.AnnotationsDiffBaseStorage(
        prefix=API_GROUP, key="last-handled-configuration"
    )
    settings.persistence.finalizer = FINALIZER
    # Events are posted explicitly for what a human should see; kopf's log lines stay logs.
    settings.posting.level = logging.WARNING
    settings.watching.server_timeout = 300
    settings.networking.error_backoffs = [1, 2, 5, 10, 30]


def login(**_: Any) -> kopf.ConnectionInfo:
    """kopf's watches use the credentials the operator's own calls use (re-read on a 401)."""
    found = credentials.load()
    return kopf.ConnectionInfo(
        server=found.server,
        ca_path=found.ca_file,
        ca_data=found.ca_pem,
        insecure=found.insecure,
        certificate_path=found.client_cert_file,
        certificate_data=found.client_cert_pem,
        private_key_path=found.client_key_file,
        private_key_data=found.client_key_pem,
        token=credentials.TokenSource(found).token(),
    )


def register(registry: kopf.OperatorRegistry) -> None:
    """Attach the handlers to ``registry``."""
    shards = kopf.on.event(API_GROUP, API_VERSION, SHARD_PLURAL, registry=registry)
    shards(on_shard_event)
    timer = kopf.timer(
        API_GROUP,
        API_VERSION,
        SHARD_PLURAL,
        interval=RESYNC_SECONDS,
        initial_delay=RESYNC_SECONDS,
        registry=registry,
    )
    timer(on_shard_timer)
    managed = {"app.kubernetes.io/managed-by": FIELD_MANAGER}
    for api_version, _, plural in CHILD_KINDS:
        watch = kopf.on.event(api_version, plural, labels=managed, registry=registry)
        watch(on_child_event)
    kopf.on.event("v1", "pods", labels=managed, registry=registry)(on_pod_event)
    kopf.on.event("v1", "secrets", registry=registry)(on_secret_event)
    kopf.on.startup(registry=registry)(configure)
    kopf.on.login(registry=registry)(login)
