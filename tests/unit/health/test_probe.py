"""The health probe against local HTTP servers standing in for a shard and its root."""

from __future__ import annotations

import json
import socket
import threading
from collections.abc import Iterator

import pytest

from kcp_shard_operator.core.shard.health import (
    Failure,
    NotRegistered,
    Probe,
    ProbeTarget,
    Registered,
)
from kcp_shard_operator.health.probe import data_uid_url, probe_shard, registration_url
from tests.unit.identitycache.test_shardclient import TOKEN, Server, kubeconfig

Answer = tuple[int, dict[str, str], bytes]
JSON_TYPE = {"Content-Type": "application/json"}


def kcp(ready: bool = True, uid: str = "uid-lc", listed: tuple[str, ...] = ()) -> Server:
    """A shard answering /readyz, its system:shard LogicalCluster and shards it lists."""

    def answer(path: str) -> Answer:
        if path == "/readyz":
            return (200, {}, b"ok") if ready else (500, {}, b"[-]etcd failed: reason withheld")
        if path == data_uid_url(""):
            body = {"kind": "LogicalCluster", "metadata": {"name": "cluster", "uid": uid}}
            return 200, JSON_TYPE, json.dumps(body).encode()
        name = path.rsplit("/", 1)[-1]
        if path == registration_url("", name) and name in listed:
            body = {"kind": "Shard", "metadata": {"name": name, "uid": f"reg-{name}"}}
            return 200, JSON_TYPE, json.dumps(body).encode()
        missing = {"kind": "Status", "reason": "NotFound", "details": {"name": name}}
        return 404, JSON_TYPE, json.dumps(missing).encode()

    return Server(answer)


@pytest.fixture
def started() -> Iterator[list[Server]]:
    servers: list[Server] = []
    yield servers
    for server in servers:
        server.close()


def up(started: list[Server], server: Server) -> Server:
    started.append(server)
    return server


def closed_port() -> str:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return f"http://127.0.0.1:{sock.getsockname()[1]}"


def test_a_listed_shard(started: list[Server]) -> None:
    shard = up(started, kcp())
    root = up(started, kcp(listed=("shard-1",)))
    target = ProbeTarget(kubeconfig(shard.url), "shard-1", kubeconfig(root.url))
    assert probe_shard(target) == Probe(data_uid="uid-lc", registration=Registered("reg-shard-1"))
    assert [path for _, path, _ in shard.requests] == ["/readyz", data_uid_url("")]
    assert root.requests == [("GET", registration_url("", "shard-1"), f"Bearer {TOKEN}")]


def test_a_root_shard_is_not_asked_about_a_registration(started: list[Server]) -> None:
    root = up(started, kcp(uid="uid-root"))
    assert probe_shard(ProbeTarget(kubeconfig(root.url))) == Probe(data_uid="uid-root")


def test_a_shard_the_root_does_not_list(started: list[Server]) -> None:
    shard, root = up(started, kcp()), up(started, kcp())
    found = probe_shard(ProbeTarget(kubeconfig(shard.url), "shard-1", kubeconfig(root.url)))
    assert found.registration == NotRegistered()


def test_kcp_not_ready_is_not_asked_further(started: list[Server]) -> None:
    shard = up(started, kcp(ready=False))
    found = probe_shard(ProbeTarget(kubeconfig(shard.url), "shard-1", kubeconfig(shard.url)))
    assert found == Probe(not_ready="etcd failed: reason withheld")
    assert len(shard.requests) == 1


def test_an_unreachable_shard_or_root_never_shows_the_token(started: list[Server]) -> None:
    gone = closed_port()
    found = probe_shard(ProbeTarget(kubeconfig(gone)), timeout=2)
    assert isinstance(found.failure, Failure)
    assert found.failure.reason == "ShardUnreachable"
    assert gone in found.failure.message
    assert TOKEN not in found.failure.message
    shard = up(started, kcp())
    found = probe_shard(ProbeTarget(kubeconfig(shard.url), "shard-1", kubeconfig(gone)), timeout=2)
    assert isinstance(found.registration, Failure)
    assert found.registration.reason == "ShardUnreachable"
    assert found.data_uid == "uid-lc"


def test_an_unusable_kubeconfig_is_one_line_without_its_content() -> None:
    found = probe_shard(ProbeTarget(b"users: [token: " + TOKEN.encode()))
    assert isinstance(found.failure, Failure)
    assert found.failure.reason == "InvalidKubeconfig"
    assert TOKEN not in found.failure.message


def test_a_peer_that_does_not_speak_http_is_unreachable() -> None:
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        url = f"http://127.0.0.1:{listener.getsockname()[1]}"

        def garbage() -> None:
            conn, _ = listener.accept()
            with conn:
                conn.recv(4096)
                conn.sendall(b"SSH-2.0-not-http\r\n\r\n")

        threading.Thread(target=garbage, daemon=True).start()
        found = probe_shard(ProbeTarget(kubeconfig(url)), timeout=5)
    assert found.failure == Failure("ShardUnreachable", f"cannot reach {url}: BadStatusLine")
