"""Whether kcp serves a shard and still holds its data, from what the operator asked kcp (pure).

The shell (:mod:`kcp_shard_operator.health`) asks each shard, with its admin kubeconfig, for
``/readyz`` and for the LogicalCluster ``cluster`` of its ``system:shard`` logical cluster, and
asks the root shard whether it lists a non-root shard among its ``shards.core.kcp.io``. The
``interpret_*`` functions read those answers; :func:`assess` turns them into ``DataVerified``,
the problems for ``Degraded`` and the reason ``Ready`` is False.

The data identity: kcp creates ``system:shard``'s LogicalCluster when it bootstraps a shard on
an empty etcd and only updates it on later starts (kcp ``config/shard``), so its UID stays the
same across restarts on the same etcd and changes when the etcd is new. The first UID the
operator sees is recorded in ``status.dataUID``; a different one later means the data is gone.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from kcp_shard_operator.constants import API_GROUP
from kcp_shard_operator.core.api.model import JSON
from kcp_shard_operator.core.status.conditions import Failure as Failure
from kcp_shard_operator.core.status.deployments import SETTLE_SECONDS

DATA_VERIFIED = "DataVerified"
ACCEPT_DATA_UID_ANNOTATION = f"{API_GROUP}/accept-data-uid"
"""Set to the new UID a DataLost message names to accept an empty shard as its new data."""
ROOT_SHARD_NAME = "root"
"""The name kcp gives the root shard (``--shard-name`` default), whatever its Shard is called."""

# Reasons a check could not be made; only ShardUnreachable also makes Ready False.
NO_ADMIN_KUBECONFIG = "NoAdminKubeconfig"
SHARD_UNREACHABLE = "ShardUnreachable"
FORBIDDEN = "Forbidden"
UNAUTHORIZED = "Unauthorized"
UNEXPECTED_ANSWER = "UnexpectedAnswer"
# What a check found.
KCP_NOT_READY = "KcpNotReady"
DATA_LOST = "DataLost"
ROOT_DATA_LOST = "RootDataLost"
SHARD_NOT_REGISTERED = "ShardNotRegistered"
VERIFIED = "Verified"

MAX_FAILED_CHECKS = 3


@dataclass(frozen=True)
class ProbeTarget:
    """Whom to ask: the shard's admin kubeconfig and, for a non-root shard, the root's.

    ``root`` is None for a root shard, a :class:`Failure` when the root cannot be asked.
    """

    kubeconfig: bytes
    kcp_name: str = "root"
    root: bytes | Failure | None = None


@dataclass(frozen=True)
class Registered:
    uid: str


@dataclass(frozen=True)
class NotRegistered:
    pass


Registration = Registered | NotRegistered | Failure


@dataclass(frozen=True)
class Probe:
    """What kcp answered about one shard.

    ``failure`` is set when the shard could not be asked at all (no or unusable credentials,
    unreachable, refused); ``not_ready`` holds kcp's failed ``/readyz`` checks; ``registration``
    is None for a root shard.
    """

    failure: Failure | None = None
    not_ready: str | None = None
    data_uid: str | None = None
    registration: Registration | None = None


@dataclass(frozen=True)
class Subject:
    """The Shard being assessed, as far as the assessment needs it."""

    name: str
    namespace: str
    deployment: str
    root: str | None = None
    """The root Shard's name; None for a root shard."""
    recorded_uid: str | None = None
    accepted_uid: str | None = None
    root_data_lost: bool = False
    """The root Shard reports DataLost."""


@dataclass(frozen=True)
class Health:
    """``DataVerified`` (status None = Unknown), problems for ``Degraded`` and why not Ready."""

    verified: bool | None
    reason: str
    message: str
    problems: list[tuple[str, str]] = field(default_factory=list)
    not_ready: tuple[str, str] | None = None
    data_uid: str | None = None


# ---------------------------------------------------------------------------
# What each answer means


def _refused(status: int, what: str) -> Failure | None:
    if status == 401:
        return Failure(
            UNAUTHORIZED,
            f"{what}: HTTP 401: the shard does not accept the admin kubeconfig's credentials; "
            "check its token or client certificate (expired, revoked, or for another shard)",
        )
    if status == 403:
        return Failure(
            FORBIDDEN,
            f"{what}: HTTP 403: the admin kubeconfig's identity may not read it; it needs "
            "group system:masters on that shard (context shard-base of its admin.kubeconfig)",
        )
    return None


def interpret_readyz(status: int, text: str) -> str | Failure | None:
    """None when kcp is ready, else its failed checks, or why the answer says nothing."""
    if status == 200:
        return None
    refused = _refused(status, "GET /readyz")
    if refused is not None:
        return refused
    failed = [line[3:].strip() for line in text.splitlines() if line.startswith("[-]")]
    if failed:
        shown = ", ".join(failed[:MAX_FAILED_CHECKS])
        more = len(failed) - MAX_FAILED_CHECKS
        return f"{shown}" + (f" and {more} more" if more > 0 else "")
    return f"HTTP {status}"


def interpret_data_uid(status: int, body: JSON | None) -> str | Failure:
    """The UID of ``system:shard``'s LogicalCluster, or why it was not read."""
    what = "GET LogicalCluster cluster in system:shard"
    refused = _refused(status, what)
    if refused is not None:
        return refused
    meta = (body or {}).get("metadata") or {}
    if status == 200 and (body or {}).get("kind") == "LogicalCluster" and meta.get("uid"):
        return str(meta["uid"])
    return Failure(UNEXPECTED_ANSWER, f"{what}: HTTP {status} without a LogicalCluster")


def interpret_registration(name: str, status: int, body: JSON | None) -> Registration:
    """Whether the root's answer about ``shards.core.kcp.io/<name>`` shows it listed."""
    what = f"GET shards.core.kcp.io/{name} on the root shard"
    refused = _refused(status, what)
    if refused is not None:
        return refused
    found = body or {}
    meta = found.get("metadata") or {}
    if status == 200 and found.get("kind") == "Shard" and meta.get("name") == name:
        return Registered(str(meta.get("uid", "")))
    details = found.get("details") or {}
    if (
        status == 404
        and found.get("kind") == "Status"
        and found.get("reason") == "NotFound"
        and details.get("name") == name
    ):
        return NotRegistered()
    return Failure(UNEXPECTED_ANSWER, f"{what}: HTTP {status} without a Shard or its NotFound")


# ---------------------------------------------------------------------------
# The assessment


def kcp_shard_name(name: str, is_root: bool) -> str:
    """The name kcp knows a shard by: ``--shard-name``, which the operator renders as the
    Shard's name on non-root shards only."""
    return ROOT_SHARD_NAME if is_root else name


def _data_lost(subject: Subject, uid: str) -> str:
    return (
        f"kcp serves LogicalCluster cluster of system:shard with UID {uid}, the operator "
        f"recorded {subject.recorded_uid}: kcp started on an empty etcd and this shard's "
        "workspaces and objects are gone. Restore the shard's etcd from a backup taken before "
        "(the recorded UID comes back and this clears), or accept the empty shard: kubectl "
        f"annotate shard {subject.name} -n {subject.namespace} "
        f"{ACCEPT_DATA_UID_ANNOTATION}={uid} --overwrite"
    )


def _not_registered(subject: Subject) -> str:
    return (
        f"the root shard ({subject.root}) does not list {subject.name} among its "
        "shards.core.kcp.io: it schedules no workspace here and the front-proxy cannot route "
        f"to it. kcp registers a shard when it starts: kubectl rollout restart deployment/"
        f"{subject.deployment} -n {subject.namespace}"
    )


def _root_data_lost(subject: Subject) -> str:
    return (
        f"the root shard ({subject.root}) came back without its data (see Shard {subject.root}, "
        f"DataLost): the workspaces it had scheduled to {subject.name} are no longer listed "
        "there. Restore the root's etcd, or accept its loss on the root Shard"
    )


def _found(subject: Subject, probe: Probe) -> tuple[list[tuple[str, str]], str | None]:
    """Problems an answered probe shows, and the UID to record."""
    found: list[tuple[str, str]] = []
    uid = probe.data_uid
    keep = uid
    if uid and subject.recorded_uid and uid not in (subject.recorded_uid, subject.accepted_uid):
        found.append((DATA_LOST, _data_lost(subject, uid)))
        keep = subject.recorded_uid
    if isinstance(probe.registration, NotRegistered):
        found.append((SHARD_NOT_REGISTERED, _not_registered(subject)))
    return found, keep


def assess(subject: Subject, probe: Probe) -> Health:
    """``DataVerified``, the problems and the Ready verdict of a shard whose rollout is complete.

    Found problems (DataLost, RootDataLost, ShardNotRegistered, KcpNotReady) and an unreachable
    shard make Ready False; a check that cannot be made for want of usable credentials leaves
    Ready to the pods' probes and says so in ``DataVerified=Unknown`` (and in Degraded unless
    no admin kubeconfig is set at all). The root being unreachable or not checkable leaves
    the registration Unknown: the root Shard reports its own trouble.
    """
    problems: list[tuple[str, str]] = []
    unknown: Failure | None = probe.failure
    uid = subject.recorded_uid
    if probe.failure is not None:
        if probe.failure.reason != NO_ADMIN_KUBECONFIG:
            problems.append((probe.failure.reason, probe.failure.message))
    elif probe.not_ready is not None:
        message = f"kcp answers /readyz with failed checks: {probe.not_ready}"
        problems.append((KCP_NOT_READY, message))
        unknown = Failure(KCP_NOT_READY, message)
    else:
        problems, uid = _found(subject, probe)
        if isinstance(probe.registration, Failure):
            unknown = Failure(
                f"Root{probe.registration.reason}",
                f"the registration on the root shard was not checked: {probe.registration.message}",
            )
    if subject.root_data_lost:
        problems.append((ROOT_DATA_LOST, _root_data_lost(subject)))
    problems.sort(key=lambda found: _ORDER.get(found[0], len(_ORDER)))
    blocking = [p for p in problems if p[0] in NOT_READY_REASONS]
    not_ready = blocking[0] if blocking else None
    if problems and problems[0][0] in DATA_REASONS:
        verified: bool | None = False
        reason, message = problems[0]
    elif unknown is not None:
        verified, reason, message = None, unknown.reason, unknown.message
    else:
        verified, reason = True, VERIFIED
        registered = "" if subject.root is None else "; the root shard lists it"
        message = (
            f"kcp answers /readyz; LogicalCluster cluster of system:shard keeps UID {uid}"
            f"{registered}"
        )
    return Health(verified, reason, message, problems, not_ready, uid)


DATA_REASONS = (DATA_LOST, ROOT_DATA_LOST, SHARD_NOT_REGISTERED)
NOT_READY_REASONS = frozenset({*DATA_REASONS, KCP_NOT_READY, SHARD_UNREACHABLE})
_ORDER = {reason: rank for rank, reason in enumerate((*DATA_REASONS, KCP_NOT_READY))}


def settling(probe: Probe, since_rollout: float) -> bool:
    """Whether ``probe`` is not to be reported yet: the shard was unreachable within
    SETTLE_SECONDS of its rollout's end (the Service does not route to the new pods yet; a
    probe then says "Connection refused" or that the name does not resolve). kcp is asked
    again after SETTLE_RETRY_SECONDS; an answer after the window is reported as it is."""
    failure = probe.failure
    return (
        failure is not None
        and failure.reason == SHARD_UNREACHABLE
        and 0 <= since_rollout < SETTLE_SECONDS
    )


def no_admin_kubeconfig() -> Failure:
    return Failure(
        NO_ADMIN_KUBECONFIG,
        "not verified: set spec.adminKubeconfigSecretRef (group system:masters on this shard) "
        "for the operator to check kcp's /readyz, the shard's data and its registration",
    )


def ready_note(health: Health | None) -> str:
    """What the Ready message adds: whether the operator verified it."""
    if health is None or health.verified:
        return ""
    return f" (not verified by the operator: {DATA_VERIFIED} is {health.reason})"
