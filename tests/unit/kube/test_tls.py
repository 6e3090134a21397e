"""The one TLS context both clients use, against a real HTTPS server on 127.0.0.1.

The server's certificate names only ``shard-1.internal``: reaching it by IP verifies only when
the kubeconfig's ``tls-server-name`` says which name to check.
"""

from __future__ import annotations

import http.server
import json
import ssl
import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import urllib3

from kcp_shard_operator.kube.client import Kube
from kcp_shard_operator.kube.kubeconfig import Endpoint

SERVER_NAME = "shard-1.internal"
TOKEN = "t0k-marker"


def _openssl(*args: str, cwd: Path) -> None:
    subprocess.run(["openssl", *args], check=True, capture_output=True, cwd=cwd)


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("pki")
    _openssl(
        "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj", "/CN=test-ca",
        "-keyout", "ca.key", "-out", "ca.crt", cwd=folder,
    )  # fmt: skip
    _openssl(
        "req", "-newkey", "rsa:2048", "-nodes", "-subj", f"/CN={SERVER_NAME}",
        "-keyout", "server.key", "-out", "server.csr", cwd=folder,
    )  # fmt: skip
    (folder / "san.ext").write_text(f"subjectAltName=DNS:{SERVER_NAME}\n")
    _openssl(
        "x509", "-req", "-in", "server.csr", "-CA", "ca.crt", "-CAkey", "ca.key",
        "-CAcreateserial", "-days", "1", "-extfile", "san.ext", "-out", "server.crt", cwd=folder,
    )  # fmt: skip
    return folder


@pytest.fixture
def server(pki: Path) -> Iterator[tuple[str, list[str | None]]]:
    seen: list[str | None] = []

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            seen.append(self.headers.get("Authorization"))
            body = json.dumps({"kind": "Service", "metadata": {"name": "root-kcp"}}).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: Any) -> None:
            pass

    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(pki / "server.crt", pki / "server.key")
    httpd.socket = context.wrap_socket(httpd.socket, server_side=True)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    yield f"https://127.0.0.1:{httpd.server_address[1]}", seen
    httpd.shutdown()
    httpd.server_close()


def test_the_operator_client_verifies_against_tls_server_name(
    pki: Path, server: tuple[str, list[str | None]]
) -> None:
    url, seen = server
    endpoint = Endpoint(
        server=url,
        ca_pem=(pki / "ca.crt").read_bytes(),
        tls_server_name=SERVER_NAME,
        token=TOKEN,
    )
    found = Kube(endpoint).get("v1", "Service", "ns", "root-kcp")
    assert found is not None
    assert found["metadata"]["name"] == "root-kcp"
    assert seen == [f"Bearer {TOKEN}"]


def test_without_tls_server_name_the_ip_does_not_match_the_certificate(
    pki: Path, server: tuple[str, list[str | None]]
) -> None:
    url, seen = server
    endpoint = Endpoint(server=url, ca_pem=(pki / "ca.crt").read_bytes(), token=TOKEN)
    with pytest.raises(urllib3.exceptions.SSLError, match=r"IP address mismatch|doesn't match"):
        Kube(endpoint).get("v1", "Service", "ns", "root-kcp")
    assert seen == []
