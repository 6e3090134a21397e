"""The cleanup's HTTP client against local HTTP servers: no redirects, positive evidence."""

from __future__ import annotations

import base64
import json
import tempfile
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from kcp_shard_operator.identitycache.client import ShardClients, clean_shard
from kcp_shard_operator.identitycache.policy import Result

TOKEN = "MARKER-token-9c1e"


class Server:
    """A local HTTP server answering every request with ``answer(path)``; records requests."""

    def __init__(self, answer: Any) -> None:
        self.requests: list[tuple[str, str, str | None]] = []
        owner = self

        class Handler(BaseHTTPRequestHandler):
            def _reply(self) -> None:
                owner.requests.append((self.command, self.path, self.headers.get("Authorization")))
                status, headers, body = answer(self.path)
                self.send_response(status)
                for key, value in headers.items():
                    self.send_header(key, value)
                self.end_headers()
                self.wfile.write(body)

            def do_GET(self) -> None:
                self._reply()

            def do_DELETE(self) -> None:
                self._reply()

            def log_message(self, *args: Any) -> None:
                return

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture
def servers() -> Iterator[list[Server]]:
    started: list[Server] = []
    yield started
    for server in started:
        server.close()


def kubeconfig(server: str) -> bytes:
    config = {
        "clusters": [{"name": "c", "cluster": {"server": server}}],
        "users": [{"name": "u", "user": {"token": TOKEN}}],
        "contexts": [{"name": "x", "context": {"cluster": "c", "user": "u"}}],
        "current-context": "x",
    }
    return json.dumps(config).encode()


def test_redirects_are_not_followed_and_carry_no_credentials(servers: list[Server]) -> None:
    other = Server(lambda path: (200, {}, b"{}"))
    servers.append(other)
    redirecting = Server(lambda path: (302, {"Location": other.url + path}, b""))
    servers.append(redirecting)
    outcome = clean_shard(kubeconfig(redirecting.url), timeout=5)
    assert outcome.result is Result.FAILED
    assert "302" in outcome.message
    assert other.requests == []
    assert TOKEN not in outcome.message


def test_a_server_answering_404_to_everything_proves_nothing(servers: list[Server]) -> None:
    anything = Server(lambda path: (404, {"Content-Type": "text/html"}, b"<h1>Not Found</h1>"))
    servers.append(anything)
    outcome = clean_shard(kubeconfig(anything.url), timeout=5)
    assert outcome.result is Result.FAILED
    assert not outcome.ok
    assert "without the Kubernetes Status" in outcome.message


def test_kubernetes_not_found_answers_mean_nothing_to_clean(servers: list[Server]) -> None:
    def answer(path: str) -> tuple[int, dict[str, str], bytes]:
        name = path.rsplit("/", 1)[-1]
        body = {"kind": "Status", "reason": "NotFound", "details": {"name": name}}
        return 404, {"Content-Type": "application/json"}, json.dumps(body).encode()

    shard = Server(answer)
    servers.append(shard)
    outcome = clean_shard(kubeconfig(shard.url), timeout=5)
    assert outcome.result is Result.NOT_PRESENT
    assert [auth for _, _, auth in shard.requests] == [f"Bearer {TOKEN}"] * 2


def test_a_client_is_kept_per_kubeconfig_and_closed_once_unused() -> None:
    now = [0.0]
    clients = ShardClients(idle=600.0, clock=lambda: now[0])
    first = clients.get(kubeconfig("https://127.0.0.1:1"))
    assert clients.get(kubeconfig("https://127.0.0.1:1")) is first
    rotated = clients.get(kubeconfig("https://127.0.0.1:2"))
    assert rotated is not first
    assert len(clients) == 2
    now[0] = 500.0
    clients.get(kubeconfig("https://127.0.0.1:2"))
    now[0] = 700.0
    clients.get(kubeconfig("https://127.0.0.1:2"))
    # The first kubeconfig (the Secret's previous revision) was not used for 700 s.
    assert len(clients) == 1
    assert clients.get(kubeconfig("https://127.0.0.1:2")) is rotated


def test_a_closed_client_s_key_is_gone() -> None:
    data = base64.b64encode(b"MARKER-KEY").decode()
    config = json.loads(kubeconfig("https://127.0.0.1:1"))
    config["users"][0]["user"] = {"client-certificate-data": data, "client-key-data": data}
    now = [0.0]
    clients = ShardClients(idle=10.0, clock=lambda: now[0])
    client = clients.get(json.dumps(config).encode())
    key = Path(str(client.credentials.configuration.key_file))
    assert key.read_bytes() == b"MARKER-KEY"
    assert key.is_relative_to(tempfile.gettempdir())
    assert client.server == "https://127.0.0.1:1"
    now[0] = 20.0
    clients.get(kubeconfig("https://127.0.0.1:2"))
    assert not key.parent.exists()
