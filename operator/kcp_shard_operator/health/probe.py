"""Ask kcp about one shard: ``/readyz`` and its data identity on the shard, its registration on
the root shard (the thin shell of :mod:`kcp_shard_operator.core.shard.health`).

Requests go through :class:`~kcp_shard_operator.identitycache.client.ShardClient` (the admin
kubeconfig's credentials, no redirects followed) with a short timeout; the client of a
kubeconfig is kept while it is used (:data:`~kcp_shard_operator.identitycache.client.CLIENTS`),
not built again for every probe. What comes back is a
:class:`~kcp_shard_operator.core.shard.health.Probe`, never an exception; its messages carry URLs,
status codes and socket or TLS errors only, never a credential.
"""

from __future__ import annotations

from kcp_shard_operator.core.frontproxy.status import ROUTE_PATH, Route, interpret_route
from kcp_shard_operator.core.shard.health import (
    SHARD_UNREACHABLE,
    Failure,
    Probe,
    ProbeTarget,
    Registration,
    interpret_data_uid,
    interpret_readyz,
    interpret_registration,
)
from kcp_shard_operator.identitycache.client import CLIENTS, ShardClient
from kcp_shard_operator.identitycache.policy import (
    ROOT_CLUSTER,
    SYSTEM_SHARD_CLUSTER,
    Response,
    cluster_path,
)
from kcp_shard_operator.kube.client import UnreachableError
from kcp_shard_operator.kube.kubeconfig import CredentialsError

PROBE_TIMEOUT = 5.0
"""Seconds per request: a pass asks at most three questions while it holds the Shard's lock."""
INVALID_KUBECONFIG = "InvalidKubeconfig"


class _NoAnswerError(Exception):
    """A question that got no usable answer: the probe reports ``failure``."""

    def __init__(self, failure: Failure) -> None:
        super().__init__(failure.reason)
        self.failure = failure


def data_uid_url(base: str) -> str:
    """The LogicalCluster of the shard's own ``system:shard`` logical cluster."""
    return cluster_path(
        base, SYSTEM_SHARD_CLUSTER, "/apis/core.kcp.io/v1alpha1/logicalclusters/cluster"
    )


def registration_url(base: str, kcp_name: str) -> str:
    """The shard's ``shards.core.kcp.io`` object in the root workspace (on the root shard)."""
    return cluster_path(base, ROOT_CLUSTER, f"/apis/core.kcp.io/v1alpha1/shards/{kcp_name}")


def _client(
    kubeconfig: bytes, timeout: float, whose: str, server: str | None = None
) -> ShardClient:
    """A client with the kubeconfig's credentials, for its server or ``server``."""
    try:
        return CLIENTS.get(kubeconfig, timeout, server)
    except CredentialsError as err:
        failure = Failure(INVALID_KUBECONFIG, f"{whose} admin kubeconfig: {err}")
    raise _NoAnswerError(failure)


def _unreachable(client: ShardClient, err: UnreachableError) -> _NoAnswerError:
    return _NoAnswerError(Failure(SHARD_UNREACHABLE, f"cannot reach {client.server}: {err.reason}"))


def _text(client: ShardClient, url: str) -> tuple[int, str]:
    try:
        status, raw = client.send("GET", url)
    except UnreachableError as err:
        raise _unreachable(client, err) from None
    return status, raw.decode(errors="replace")


def _get(client: ShardClient, url: str) -> Response:
    try:
        return client.request("GET", url)
    except UnreachableError as err:
        raise _unreachable(client, err) from None


def _registration(target: ProbeTarget, timeout: float) -> Registration | None:
    if target.root is None or isinstance(target.root, Failure):
        return target.root
    try:
        root = _client(target.root, timeout, "the root Shard's")
        answer = _get(root, registration_url(root.server, target.kcp_name))
    except _NoAnswerError as stop:
        return stop.failure
    return interpret_registration(target.kcp_name, answer.status, answer.body)


def probe_shard(target: ProbeTarget, timeout: float = PROBE_TIMEOUT) -> Probe:
    """``/readyz`` and the data identity of the shard, then its registration on the root."""
    try:
        client = _client(target.kubeconfig, timeout, "the Shard's")
        base = client.server
        ready = interpret_readyz(*_text(client, f"{base}/readyz"))
        if isinstance(ready, Failure):
            return Probe(failure=ready)
        if ready is not None:
            return Probe(not_ready=ready)
        answer = _get(client, data_uid_url(base))
    except _NoAnswerError as stop:
        return Probe(failure=stop.failure)
    uid = interpret_data_uid(answer.status, answer.body)
    if isinstance(uid, Failure):
        return Probe(failure=uid)
    return Probe(data_uid=uid, registration=_registration(target, timeout))


def probe_front_proxy(kubeconfig: bytes, url: str, timeout: float = PROBE_TIMEOUT) -> Route:
    """Read the root workspace's Shards through the front-proxy at ``url`` with the
    kubeconfig's credentials (its server is replaced: the operator reaches the Service)."""
    try:
        client = _client(kubeconfig, timeout, "the FrontProxy's", url)
        answer = _get(client, f"{url}{ROUTE_PATH}")
    except _NoAnswerError as stop:
        failure = stop.failure
        reason = "Unreachable" if failure.reason == SHARD_UNREACHABLE else failure.reason
        return Route(False, reason, failure.message)
    return interpret_route(url, answer.status, answer.body)
