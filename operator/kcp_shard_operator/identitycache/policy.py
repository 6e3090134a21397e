"""The stale ``apiexport-identity-cache`` ConfigMap: when to delete it, and where it is (pure).

Nothing here does I/O. :mod:`kcp_shard_operator.identitycache.client` performs the HTTP calls and
hands each response to the ``interpret_*`` functions below, which decide what it means.

Before the deprecating release, non-root kcp shards ran the ``identitycache`` controller,
which kept the ConfigMap ``default/apiexport-identity-cache`` in their ``system:shard``
logical cluster. From that release on nothing reads or deletes it. It may only be deleted
once the shard's rollout to such a version is complete: an old pod still reads it, and a
rollback to an old version recreates it (so a rollback resets the condition).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from enum import Enum
from urllib.parse import quote

from kcp_shard_operator.core.api.model import JSON
from kcp_shard_operator.core.kcp.versions import Version, parse_or_none
from kcp_shard_operator.core.pki.issuance import ADMIN_GROUP, SHARD_BASE_CONTEXT
from kcp_shard_operator.core.shard.spec import Shard
from kcp_shard_operator.core.status.conditions import IDENTITY_CACHE_CLEANED, Condition, condition

CONFIGMAP_NAME = "apiexport-identity-cache"
CONFIGMAP_NAMESPACE = "default"
SYSTEM_SHARD_CLUSTER = "system:shard"
ROOT_CLUSTER = "root"
ROOT_TYPE_ANNOTATION = "internal.tenancy.kcp.io/type"


# ---------------------------------------------------------------------------
# Which shards, when


class Action(Enum):
    CLEAN = "Clean"
    SKIP = "Skip"


@dataclass(frozen=True)
class Decision:
    """What to do with one Shard; ``condition`` None means: leave the condition as it is."""

    action: Action
    reason: str
    message: str
    condition: Condition | None = None


def decide(shard: Shard, deprecating_release: Version, *, enabled: bool = True) -> Decision:
    """Whether the operator should clean ``shard`` now, and the condition to record otherwise.

    Cleans only a non-root shard whose completed rollout (``status.version`` equal to
    ``spec.version``) runs the deprecating release or later, has admin credentials, and is
    not already recorded as cleaned. A shard that is or will be on an older version gets an
    existing condition reset (a rollback: the old controller writes the ConfigMap again).
    """
    if not enabled:
        return Decision(Action.SKIP, "Disabled", "identity-cache cleanup is switched off")
    if shard.spec.is_root:
        return Decision(Action.SKIP, "RootShard", "a root shard never has the ConfigMap")
    status: JSON = shard.status or {}
    running = shard.status_version
    target = parse_or_none(shard.spec.version)
    previous = condition(status, IDENTITY_CACHE_CLEANED)
    cleaned = previous is not None and previous.get("status") == "True"
    old = [v for v in (running, target) if v is not None and v < deprecating_release]
    if old:
        message = (
            f"kcp {min(old)} runs the identitycache controller, which keeps the ConfigMap; "
            f"it is deleted after the rollout to kcp >= {deprecating_release} completes"
        )
        reset = Condition(IDENTITY_CACHE_CLEANED, False, "OlderVersion", message)
        return Decision(Action.SKIP, "OlderVersion", message, reset if previous else None)
    if running is None or running != target:
        return Decision(
            Action.SKIP,
            "RolloutInProgress",
            f"waiting for the rollout to kcp {shard.spec.version} to complete",
        )
    if cleaned and previous is not None:
        return Decision(Action.SKIP, "AlreadyCleaned", str(previous.get("message", "")))
    if shard.spec.admin_kubeconfig_secret_ref is None:
        message = (
            "set spec.adminKubeconfigSecretRef to a kubeconfig of group "
            f"{ADMIN_GROUP} on this shard to delete the stale ConfigMap {CONFIGMAP_NAME}"
        )
        return Decision(
            Action.SKIP,
            "NoAdminKubeconfig",
            message,
            Condition(IDENTITY_CACHE_CLEANED, False, "NoAdminKubeconfig", message),
        )
    return Decision(Action.CLEAN, "Upgraded", f"kcp {running} no longer uses the ConfigMap")


# ---------------------------------------------------------------------------
# Kubeconfig and URLs


def cluster_path(base: str, cluster: str, api_path: str) -> str:
    return f"{base}/clusters/{quote(cluster, safe=':')}{api_path}"


def configmap_url(base: str) -> str:
    """URL of the ConfigMap in the shard's own ``system:shard`` logical cluster."""
    return cluster_path(
        base,
        SYSTEM_SHARD_CLUSTER,
        f"/api/v1/namespaces/{CONFIGMAP_NAMESPACE}/configmaps/{CONFIGMAP_NAME}",
    )


def root_logicalcluster_url(base: str) -> str:
    """URL of the ``root`` logical cluster's LogicalCluster object (served by the root shard)."""
    return cluster_path(base, ROOT_CLUSTER, "/apis/core.kcp.io/v1alpha1/logicalclusters/cluster")


# ---------------------------------------------------------------------------
# Outcomes and what each HTTP response means


class Result(Enum):
    DELETED = "Deleted"
    NOT_PRESENT = "NotPresent"
    WOULD_DELETE = "WouldDelete"
    SHARD_UNREACHABLE = "ShardUnreachable"
    FORBIDDEN = "Forbidden"
    UNAUTHORIZED = "Unauthorized"
    ROOT_SHARD = "RootShard"
    CONFLICT = "Conflict"
    FAILED = "Failed"


SUCCESS = frozenset({Result.DELETED, Result.NOT_PRESENT, Result.WOULD_DELETE})
RETRYABLE = frozenset({Result.SHARD_UNREACHABLE, Result.CONFLICT, Result.FAILED})


@dataclass(frozen=True)
class Found:
    """The ConfigMap as read before deleting it."""

    uid: str
    resource_version: str
    keys: tuple[str, ...]

    def describe(self) -> str:
        keys = ", ".join(self.keys) or "no keys"
        return (
            f"ConfigMap {CONFIGMAP_NAMESPACE}/{CONFIGMAP_NAME} in {SYSTEM_SHARD_CLUSTER} "
            f"(uid {self.uid}, resourceVersion {self.resource_version}; {keys})"
        )


@dataclass(frozen=True)
class Outcome:
    result: Result
    message: str
    found: Found | None = None

    @property
    def ok(self) -> bool:
        return self.result in SUCCESS

    @property
    def retry(self) -> bool:
        return self.result in RETRYABLE


@dataclass(frozen=True)
class Response:
    """An HTTP answer as the shell saw it: status code and parsed JSON body (or None)."""

    status: int
    body: JSON | None = None


def _server_message(response: Response) -> str:
    body = response.body or {}
    return str(body.get("message") or body.get("reason") or f"HTTP {response.status}")


def forbidden(base: str, response: Response) -> Outcome:
    return Outcome(
        Result.FORBIDDEN,
        f"{base} refused the credentials ({response.status}: {_server_message(response)}); "
        f"deleting {CONFIGMAP_NAME} in {SYSTEM_SHARD_CLUSTER} needs an identity in group "
        f"{ADMIN_GROUP} on that shard (the shard-admin user of its admin.kubeconfig, "
        f"context {SHARD_BASE_CONTEXT}, or a client certificate with O={ADMIN_GROUP} "
        "signed by its --client-ca-file)",
    )


def _not_found(response: Response, name: str) -> bool:
    """A 404 that is the API server's own answer about ``name``, not any server's 404."""
    body = response.body or {}
    details = body.get("details") or {}
    return (
        response.status == 404
        and body.get("kind") == "Status"
        and body.get("reason") == "NotFound"
        and details.get("name") == name
    )


def _no_evidence(base: str, what: str, response: Response) -> Outcome:
    return Outcome(
        Result.FAILED,
        f"{what} on {base}: HTTP {response.status} without the Kubernetes Status a kcp shard "
        "answers with; is this the shard's own URL?",
    )


def unauthorized(base: str, response: Response) -> Outcome:
    return Outcome(
        Result.UNAUTHORIZED,
        f"{base} does not accept the kubeconfig's credentials ({response.status}: "
        f"{_server_message(response)}); check its token or client certificate (expired, "
        "revoked, or for another shard)",
    )


def _unexpected(base: str, what: str, response: Response) -> Outcome:
    if response.status == 401:
        return unauthorized(base, response)
    if response.status == 403:
        return forbidden(base, response)
    return Outcome(
        Result.FAILED, f"{what} on {base}: HTTP {response.status}: {_server_message(response)}"
    )


def interpret_root_probe(base: str, response: Response) -> Outcome | None:
    """None if the shard at ``base`` is not a root shard, else the outcome to stop with.

    Only the root shard stores the ``root`` logical cluster: kcp bootstraps its LogicalCluster
    ``cluster`` (type ``root:root``) on the shard named ``root`` alone. On any other shard
    the object is not found, which only a Kubernetes NotFound Status about it proves.
    """
    if _not_found(response, "cluster"):
        return None
    if response.status == 404:
        return _no_evidence(base, "checking for a root shard", response)
    if response.status == 200:
        kind = ((response.body or {}).get("metadata", {}).get("annotations") or {}).get(
            ROOT_TYPE_ANNOTATION, "unknown"
        )
        return Outcome(
            Result.ROOT_SHARD,
            f"{base} is a root shard (it serves logical cluster {ROOT_CLUSTER}, type {kind}; "
            "a front-proxy forwarding there looks the same): refusing to touch it. "
            f"{CONFIGMAP_NAME} exists on non-root shards only; use the shard's own URL",
        )
    return _unexpected(base, "checking for a root shard", response)


def interpret_get(base: str, response: Response) -> Found | Outcome:
    """The ConfigMap found by a GET, or the final outcome when there is nothing to delete."""
    if _not_found(response, CONFIGMAP_NAME):
        return Outcome(
            Result.NOT_PRESENT, f"no {CONFIGMAP_NAME} in {SYSTEM_SHARD_CLUSTER} on {base}"
        )
    if response.status == 404:
        return _no_evidence(base, f"reading {CONFIGMAP_NAME}", response)
    if response.status != 200 or not response.body:
        return _unexpected(base, f"reading {CONFIGMAP_NAME}", response)
    meta = response.body.get("metadata") or {}
    if response.body.get("kind") != "ConfigMap" or meta.get("name") != CONFIGMAP_NAME:
        return _no_evidence(base, f"reading {CONFIGMAP_NAME}", response)
    data = response.body.get("data") or {}
    return Found(
        uid=str(meta.get("uid", "")),
        resource_version=str(meta.get("resourceVersion", "")),
        keys=tuple(sorted(str(k) for k in data)),
    )


def delete_options(found: Found) -> JSON:
    """DeleteOptions that only delete the exact object that was read."""
    return {
        "kind": "DeleteOptions",
        "apiVersion": "v1",
        "preconditions": {"uid": found.uid, "resourceVersion": found.resource_version},
    }


def interpret_delete(base: str, found: Found, response: Response) -> Outcome:
    if response.status in (200, 202):
        return Outcome(Result.DELETED, f"deleted {found.describe()} on {base}", found)
    if _not_found(response, CONFIGMAP_NAME):
        return Outcome(
            Result.NOT_PRESENT, f"{CONFIGMAP_NAME} was deleted by someone else on {base}", found
        )
    if response.status == 409:
        return Outcome(
            Result.CONFLICT,
            f"{CONFIGMAP_NAME} changed after it was read on {base} "
            f"({_server_message(response)}); will read it again",
            found,
        )
    return replace(_unexpected(base, f"deleting {CONFIGMAP_NAME}", response), found=found)


def would_delete(base: str, found: Found) -> Outcome:
    return Outcome(
        Result.WOULD_DELETE, f"dry run: would delete {found.describe()} on {base}", found
    )


def unreachable(base: str, reason: str) -> Outcome:
    return Outcome(Result.SHARD_UNREACHABLE, f"cannot reach {base}: {reason}")


def cleaned_condition(outcome: Outcome, source: str) -> Condition:
    """``IdentityCacheCleaned`` for an operator pass that ended with ``outcome``.

    ``source`` names where the kubeconfig came from (Secret and key, never its content).
    """
    message = outcome.message if outcome.ok else f"{source}: {outcome.message}"
    return Condition(IDENTITY_CACHE_CLEANED, outcome.ok, outcome.result.value, message)


RETRY_BASE_SECONDS = 30.0
RETRY_CAP_SECONDS = 600.0


def retry_delay(failures: int) -> float:
    """Seconds to wait before the next attempt after ``failures`` failed ones in a row."""
    if failures <= 0:
        return 0.0
    return min(RETRY_BASE_SECONDS * float(2 ** (failures - 1)), RETRY_CAP_SECONDS)
