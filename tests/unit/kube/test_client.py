"""The client against local servers on 127.0.0.1: a real TLS handshake (tls-server-name, a
client certificate), the headers the server saw (Authorization, impersonation, User-Agent), a
proxy that sees the CONNECT, retries after 429 and 5xx with Retry-After, pages of a list, and
an exec plugin run again after a 401.

The server's certificate names only ``api.internal``: reaching it by IP verifies only when the
kubeconfig's ``tls-server-name`` says which name to check.
"""

from __future__ import annotations

import base64
import http.server
import json
import select
import socket
import socketserver
import ssl
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml

from kcp_shard_operator.kube import credentials
from kcp_shard_operator.kube.client import (
    Kube,
    RefusedError,
    UnreachableError,
    error_message,
    user_agent,
)

SERVER_NAME = "api.internal"
TOKEN = "t0k-marker"


def _openssl(*args: str, cwd: Path) -> None:
    subprocess.run(["openssl", *args], check=True, capture_output=True, cwd=cwd)


def _issue(folder: Path, name: str, subject: str, extension: str) -> None:
    _openssl(
        "req", "-newkey", "rsa:2048", "-nodes", "-subj", subject,
        "-keyout", f"{name}.key", "-out", f"{name}.csr", cwd=folder,
    )  # fmt: skip
    (folder / f"{name}.ext").write_text(extension)
    _openssl(
        "x509", "-req", "-in", f"{name}.csr", "-CA", "ca.crt", "-CAkey", "ca.key",
        "-CAcreateserial", "-days", "1", "-extfile", f"{name}.ext", "-out", f"{name}.crt",
        cwd=folder,
    )  # fmt: skip


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("pki")
    _openssl(
        "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj", "/CN=test-ca",
        "-keyout", "ca.key", "-out", "ca.crt", cwd=folder,
    )  # fmt: skip
    _issue(folder, "server", f"/CN={SERVER_NAME}", f"subjectAltName=DNS:{SERVER_NAME}\n")
    _issue(folder, "client", "/CN=admin/O=system:masters", "extendedKeyUsage=clientAuth\n")
    return folder


@dataclass
class Seen:
    """One request as the server saw it."""

    method: str
    path: str
    headers: Any
    at: float
    client: str | None


Reply = tuple[int, dict[str, str], Any]


@dataclass
class Server:
    """A local server answering with ``answer(seen)``, recording every request."""

    url: str
    requests: list[Seen] = field(default_factory=list)


@pytest.fixture
def serve(pki: Path) -> Iterator[Callable[..., Server]]:
    started: list[http.server.ThreadingHTTPServer] = []

    def start(
        answer: Callable[[Seen], Reply], *, tls: bool = True, client_ca: bool = False
    ) -> Server:
        server = Server("")

        class Handler(http.server.BaseHTTPRequestHandler):
            def _reply(self) -> None:
                peer = self.connection.getpeercert() if tls else None
                seen = Seen(
                    self.command,
                    self.path,
                    self.headers,
                    time.monotonic(),
                    str(dict(item[0] for item in peer["subject"])["commonName"]) if peer else None,
                )
                length = int(self.headers.get("Content-Length") or 0)
                self.rfile.read(length)
                server.requests.append(seen)
                status, headers, body = answer(seen)
                data = json.dumps(body).encode()
                self.send_response(status)
                for key, value in {**headers, "Content-Length": str(len(data))}.items():
                    self.send_header(key, value)
                self.end_headers()
                self.wfile.write(data)

            def do_GET(self) -> None:
                self._reply()

            def do_PATCH(self) -> None:
                self._reply()

            def do_DELETE(self) -> None:
                self._reply()

            def log_message(self, *args: Any) -> None:
                pass

        httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        if tls:
            context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
            context.load_cert_chain(pki / "server.crt", pki / "server.key")
            if client_ca:
                context.verify_mode = ssl.CERT_REQUIRED
                context.load_verify_locations(pki / "ca.crt")
            httpd.socket = context.wrap_socket(httpd.socket, server_side=True)
        threading.Thread(target=httpd.serve_forever, daemon=True).start()
        started.append(httpd)
        scheme = "https" if tls else "http"
        server.url = f"{scheme}://127.0.0.1:{httpd.server_address[1]}"
        return server

    yield start
    for httpd in started:
        httpd.shutdown()
        httpd.server_close()


def ok(body: Any = None) -> Callable[[Seen], Reply]:
    return lambda _: (200, {"Content-Type": "application/json"}, body or {"kind": "Service"})


def b64(path: Path) -> str:
    return base64.b64encode(path.read_bytes()).decode()


def kube_for(
    tmp_path: Path,
    server: str,
    user: dict[str, Any],
    cluster: dict[str, Any] | None = None,
) -> Kube:
    config = {
        "current-context": "ctx",
        "contexts": [{"name": "ctx", "context": {"cluster": "c", "user": "u"}}],
        "clusters": [{"name": "c", "cluster": {"server": server, **(cluster or {})}}],
        "users": [{"name": "u", "user": user}],
    }
    (tmp_path / "kc").write_text(yaml.safe_dump(config))
    return Kube(credentials.load(str(tmp_path / "kc")))


def test_tls_server_name_and_the_headers_the_server_sees(
    pki: Path, serve: Callable[..., Server], tmp_path: Path
) -> None:
    server = serve(ok({"kind": "Service", "metadata": {"name": "root-kcp"}}))
    user = {"token": TOKEN, "as": "alice", "as-groups": ["ops", "audit"]}
    cluster = {"certificate-authority-data": b64(pki / "ca.crt"), "tls-server-name": SERVER_NAME}
    found = kube_for(tmp_path, server.url, user, cluster).get("v1", "Service", "ns", "root-kcp")
    assert found == {"kind": "Service", "metadata": {"name": "root-kcp"}}
    [seen] = server.requests
    assert seen.headers["Authorization"] == f"Bearer {TOKEN}"
    assert seen.headers["Impersonate-User"] == "alice"
    assert seen.headers.get_all("Impersonate-Group") == ["ops", "audit"]
    assert seen.headers["User-Agent"] == user_agent()
    assert user_agent().startswith("kcp-shard-operator/")


def test_without_tls_server_name_the_ip_does_not_match_the_certificate(
    pki: Path, serve: Callable[..., Server], tmp_path: Path
) -> None:
    server = serve(ok())
    cluster = {"certificate-authority-data": b64(pki / "ca.crt")}
    kube = kube_for(tmp_path, server.url, {"token": TOKEN}, cluster)
    with pytest.raises(UnreachableError) as unreachable:
        kube.get("v1", "Service", "ns", "root-kcp")
    message = error_message(unreachable.value)
    assert message.startswith(f"cannot reach {server.url.removeprefix('https://')}: ")
    assert "IP address mismatch" in message or "doesn't match" in message
    assert "\n" not in message
    assert server.requests == []


@pytest.mark.parametrize("inline", [True, False])
def test_a_client_certificate_inline_or_as_files(
    pki: Path, serve: Callable[..., Server], tmp_path: Path, inline: bool
) -> None:
    server = serve(ok(), client_ca=True)
    user = (
        {
            "client-certificate-data": b64(pki / "client.crt"),
            "client-key-data": b64(pki / "client.key"),
        }
        if inline
        else {"client-certificate": str(pki / "client.crt"), "client-key": str(pki / "client.key")}
    )
    cluster = {"certificate-authority": str(pki / "ca.crt"), "tls-server-name": SERVER_NAME}
    assert kube_for(tmp_path, server.url, user, cluster).get("v1", "Service", "ns", "x")
    assert [seen.client for seen in server.requests] == ["admin"]
    assert "Authorization" not in server.requests[0].headers


class Proxy(socketserver.ThreadingTCPServer):
    """An HTTP proxy on 127.0.0.1 that tunnels CONNECT requests, recording their lines."""

    daemon_threads = True
    allow_reuse_address = True

    def __init__(self) -> None:
        self.connects: list[str] = []
        proxy = self

        class Tunnel(socketserver.StreamRequestHandler):
            def handle(self) -> None:
                line = self.rfile.readline().decode().strip()
                while self.rfile.readline() not in (b"\r\n", b"\n", b""):
                    continue
                proxy.connects.append(line)
                host, _, port = line.split()[1].rpartition(":")
                upstream = socket.create_connection((host, int(port)), timeout=5)
                self.wfile.write(b"HTTP/1.1 200 Connection established\r\n\r\n")
                self.wfile.flush()
                ends = [self.connection, upstream]
                while True:
                    ready, _, _ = select.select(ends, [], [], 5)
                    if not ready:
                        break
                    for end in ready:
                        data = end.recv(65536)
                        if not data:
                            upstream.close()
                            return
                        (upstream if end is self.connection else self.connection).sendall(data)

        super().__init__(("127.0.0.1", 0), Tunnel)


@pytest.fixture
def proxy() -> Iterator[Proxy]:
    server = Proxy()
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield server
    server.shutdown()
    server.server_close()


def test_proxy_url_tunnels_through_the_proxy(
    pki: Path, serve: Callable[..., Server], tmp_path: Path, proxy: Proxy
) -> None:
    server = serve(ok())
    cluster = {
        "certificate-authority-data": b64(pki / "ca.crt"),
        "tls-server-name": SERVER_NAME,
        "proxy-url": f"http://127.0.0.1:{proxy.server_address[1]}",
    }
    assert kube_for(tmp_path, server.url, {"token": TOKEN}, cluster).get("v1", "Service", "n", "x")
    target = server.url.removeprefix("https://")
    assert [line.rpartition(" ")[0] for line in proxy.connects] == [f"CONNECT {target}"]
    assert [seen.headers["Authorization"] for seen in server.requests] == [f"Bearer {TOKEN}"]


def test_429_with_retry_after_is_tried_again_after_it(
    serve: Callable[..., Server], tmp_path: Path
) -> None:
    answers: list[Reply] = [
        (429, {"Retry-After": "1"}, {"kind": "Status", "reason": "TooManyRequests"}),
        (200, {}, {"kind": "Service"}),
    ]
    server = serve(lambda _: answers.pop(0), tls=False)
    assert kube_for(tmp_path, server.url, {"token": TOKEN}, {}).get("v1", "Service", "n", "x")
    first, second = server.requests
    assert second.at - first.at >= 0.9


def test_a_write_answered_503_is_applied_again(
    serve: Callable[..., Server], tmp_path: Path
) -> None:
    answers: list[Reply] = [(503, {}, {"kind": "Status"}), (200, {}, {"kind": "Service"})]
    server = serve(lambda _: answers.pop(0), tls=False)
    obj = {"apiVersion": "v1", "kind": "Service", "metadata": {"namespace": "n", "name": "x"}}
    assert kube_for(tmp_path, server.url, {"token": TOKEN}).apply(obj) == {"kind": "Service"}
    assert [seen.method for seen in server.requests] == ["PATCH", "PATCH"]


def test_a_refusal_is_not_tried_again(serve: Callable[..., Server], tmp_path: Path) -> None:
    denied = {"kind": "Status", "message": "services is forbidden"}
    server = serve(lambda _: (403, {}, denied), tls=False)
    with pytest.raises(Exception, match="403 Forbidden") as refused:
        kube_for(tmp_path, server.url, {"token": TOKEN}).get("v1", "Service", "n", "x")
    assert error_message(refused.value) == "403 Forbidden: services is forbidden"
    assert len(server.requests) == 1


def test_a_list_is_read_page_by_page(serve: Callable[..., Server], tmp_path: Path) -> None:
    def pages(seen: Seen) -> Reply:
        if "continue=" not in seen.path:
            return 200, {}, {"items": [{"metadata": {"name": "a"}}], "metadata": {"continue": "p2"}}
        return 200, {}, {"items": [{"metadata": {"name": "b"}}], "metadata": {}}

    server = serve(pages, tls=False)
    found = kube_for(tmp_path, server.url, {"token": TOKEN}).list("apps/v1", "Deployment", "ns")
    assert [(o["kind"], o["metadata"]["name"]) for o in found] == [
        ("Deployment", "a"),
        ("Deployment", "b"),
    ]
    assert [seen.path for seen in server.requests] == [
        "/apis/apps/v1/namespaces/ns/deployments?limit=500",
        "/apis/apps/v1/namespaces/ns/deployments?limit=500&continue=p2",
    ]


def test_a_pods_log_is_read_as_text_bounded(serve: Callable[..., Server], tmp_path: Path) -> None:
    def log(seen: Seen) -> Reply:
        if "/pods/gone/" in seen.path:
            return 404, {}, {"kind": "Status", "message": 'pods "gone" not found'}
        return 200, {"Content-Type": "text/plain"}, {"printed": "as it is"}

    server = serve(log, tls=False)
    kube = kube_for(tmp_path, server.url, {"token": TOKEN})
    assert kube.pod_log("ns", "lister", "list", max_bytes=1024) == '{"printed": "as it is"}'
    assert kube.pod_log("ns", "gone", "list") is None
    assert server.requests[0].path == (
        "/api/v1/namespaces/ns/pods/lister/log?container=list&limitBytes=1024"
    )


def exec_plugin(tmp_path: Path, then: str) -> dict[str, Any]:
    """A user whose exec plugin counts its runs in ``runs``: it gives ``tok-1`` first, then
    does ``then`` (Python lines, with ``count`` set)."""
    script = tmp_path / "plugin.py"
    script.write_text(
        "import json, pathlib, sys\n"
        f"runs = pathlib.Path({str(tmp_path / 'runs')!r})\n"
        "count = int(runs.read_text()) + 1 if runs.exists() else 1\n"
        "runs.write_text(str(count))\n"
        "if count > 1:\n"
        + "".join(f"    {line}\n" for line in then.splitlines())
        + "print(json.dumps({'apiVersion': 'client.authentication.k8s.io/v1',\n"
        "    'kind': 'ExecCredential', 'status': {'token': f'tok-{count}'}}))\n"
    )
    return {
        "exec": {
            "apiVersion": "client.authentication.k8s.io/v1",
            "command": sys.executable,
            "args": [str(script)],
        }
    }


def test_after_a_401_the_exec_plugin_runs_again(
    serve: Callable[..., Server], tmp_path: Path
) -> None:
    def second_token_only(seen: Seen) -> Reply:
        if seen.headers["Authorization"] == "Bearer tok-2":
            return 200, {}, {"kind": "Service"}
        return 401, {}, {"kind": "Status", "reason": "Unauthorized"}

    server = serve(second_token_only, tls=False)
    user = exec_plugin(tmp_path, "pass")
    assert kube_for(tmp_path, server.url, user).get("v1", "Service", "n", "x")
    assert [seen.headers["Authorization"] for seen in server.requests] == [
        "Bearer tok-1",
        "Bearer tok-2",
    ]
    assert (tmp_path / "runs").read_text() == "2"


def test_a_plugin_that_fails_after_a_401_is_one_line(
    serve: Callable[..., Server], tmp_path: Path
) -> None:
    server = serve(lambda _: (401, {}, {"kind": "Status", "reason": "Unauthorized"}), tls=False)
    user = exec_plugin(tmp_path, "print('session expired', file=sys.stderr)\nsys.exit(1)")
    with pytest.raises(RefusedError) as refused:
        kube_for(tmp_path, server.url, user).get("v1", "Service", "n", "x")
    assert error_message(refused.value) == (
        "401 Unauthorized: renewing the credentials: exec: process returned 1. session expired"
    )
    assert len(server.requests) == 1


@pytest.mark.parametrize(
    ("server", "message"),
    [
        ("https://127.0.0.1:1", "cannot reach 127.0.0.1:1: [Errno 111] Connection refused"),
        ("https://no-such-host.invalid:6443", "cannot reach no-such-host.invalid:6443: [Errno -"),
    ],
)
def test_an_unreachable_server_is_one_line_naming_its_host(
    tmp_path: Path, server: str, message: str
) -> None:
    kube = kube_for(tmp_path, server, {"token": TOKEN})
    with pytest.raises(UnreachableError) as unreachable:
        kube.list("v1", "Secret", None)
    assert error_message(unreachable.value).startswith(message)
    assert "\n" not in error_message(unreachable.value)
