"""``Kube.run_in_container`` against a local server speaking the API server's ``pods/exec``
websocket protocol (``v4.channel.k8s.io``): the request it makes (path, container, every word
of the command, the token) and what it reads back (stdout, stderr, the exit code)."""

from __future__ import annotations

import base64
import hashlib
import json
import socket
import struct
import subprocess
import sys
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import parse_qsl, urlsplit

import pytest

from kcp_shard_operator.kube.client import RefusedError, error_message
from tests.unit.kube.test_client import kube_for

TOKEN = "t0k-exec"
WEBSOCKET_GUID = "258EAFA5-E914-47DA-95CA-C5AB0DC85B11"
STDOUT, STDERR, ERROR = 1, 2, 3


def frame(payload: bytes, opcode: int = 0x2) -> bytes:
    """One unmasked, final websocket frame (what a server sends)."""
    size = len(payload)
    if size < 126:
        return struct.pack("!BB", 0x80 | opcode, size) + payload
    return struct.pack("!BBH", 0x80 | opcode, 126, size) + payload


@dataclass
class ExecServer:
    """Answers one exec request per connection with ``out``, ``err`` and ``code``."""

    out: bytes
    err: bytes
    code: int
    status: int = 101
    requests: list[tuple[str, dict[str, str]]] = field(default_factory=list)
    url: str = ""

    def answer(self, connection: socket.socket) -> None:
        with connection:
            request = b""
            while b"\r\n\r\n" not in request:
                request += connection.recv(4096)
            line, *header_lines = request.split(b"\r\n\r\n")[0].decode().split("\r\n")
            headers = {
                name.strip().lower(): value.strip()
                for name, value in (h.split(":", 1) for h in header_lines)
            }
            self.requests.append((line.split()[1], headers))
            if self.status != 101:
                connection.sendall(f"HTTP/1.1 {self.status} Forbidden\r\n\r\n".encode())
                return
            accept = base64.b64encode(
                hashlib.sha1((headers["sec-websocket-key"] + WEBSOCKET_GUID).encode()).digest()
            ).decode()
            connection.sendall(
                "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\n"
                f"Connection: Upgrade\r\nSec-WebSocket-Accept: {accept}\r\n"
                "Sec-WebSocket-Protocol: v4.channel.k8s.io\r\n\r\n".encode()
            )
            status: dict[str, object] = {"status": "Success"}
            if self.code:
                status = {
                    "status": "Failure",
                    "reason": "NonZeroExitCode",
                    "details": {"causes": [{"reason": "ExitCode", "message": str(self.code)}]},
                }
            for channel, data in (
                (STDOUT, self.out),
                (STDERR, self.err),
                (ERROR, json.dumps(status).encode()),
            ):
                connection.sendall(frame(bytes([channel]) + data))
            connection.sendall(frame(struct.pack("!H", 1000), opcode=0x8))


@pytest.fixture
def exec_server() -> Iterator[ExecServer]:
    server = ExecServer(b"snapshot saved\n", b"a warning\n", 0)
    listener = socket.create_server(("127.0.0.1", 0))
    server.url = f"http://127.0.0.1:{listener.getsockname()[1]}"

    def serve() -> None:
        while True:
            try:
                connection, _ = listener.accept()
            except OSError:
                return
            server.answer(connection)

    threading.Thread(target=serve, daemon=True).start()
    yield server
    listener.close()


def test_a_command_runs_in_the_named_container_with_the_token(
    exec_server: ExecServer, tmp_path: Path
) -> None:
    command = ["etcdctl", "snapshot", "save", "/backup/a b.db"]
    ran = kube_for(tmp_path, exec_server.url, {"token": TOKEN}).run_in_container(
        "ns", "root-0", "backup", command
    )
    assert (ran.code, ran.stdout, ran.stderr) == (0, "snapshot saved\n", "a warning\n")
    [(target, headers)] = exec_server.requests
    url = urlsplit(target)
    assert url.path == "/api/v1/namespaces/ns/pods/root-0/exec"
    query = parse_qsl(url.query)
    assert [value for key, value in query if key == "command"] == command
    assert dict(query) | {"command": ""} == {
        "container": "backup",
        "command": "",
        "stdin": "false",
        "stdout": "true",
        "stderr": "true",
        "tty": "false",
    }
    assert headers["authorization"] == f"Bearer {TOKEN}"
    assert "v4.channel.k8s.io" in headers["sec-websocket-protocol"]


def test_the_exit_code_of_a_failed_command_is_read(exec_server: ExecServer, tmp_path: Path) -> None:
    exec_server.code, exec_server.out = 3, b""
    ran = kube_for(tmp_path, exec_server.url, {"token": TOKEN}).run_in_container(
        "ns", "p", "c", ["false"]
    )
    assert (ran.code, ran.stdout, ran.stderr) == (3, "", "a warning\n")


def test_a_refused_exec_is_a_refusal(exec_server: ExecServer, tmp_path: Path) -> None:
    exec_server.status = 403
    with pytest.raises(RefusedError, match="403"):
        kube_for(tmp_path, exec_server.url, {"token": TOKEN}).run_in_container(
            "ns", "p", "c", ["true"]
        )


def test_an_impersonating_user_is_refused_without_a_request(
    exec_server: ExecServer, tmp_path: Path
) -> None:
    """The library's websocket client would drop the Impersonate-* headers and run the command
    as the user itself."""
    kube = kube_for(tmp_path, exec_server.url, {"token": TOKEN, "as": "alice"})
    with pytest.raises(RefusedError) as refused:
        kube.run_in_container("ns", "p", "c", ["true"])
    assert error_message(refused.value).startswith("pods/exec cannot impersonate: ")
    assert "\n" not in error_message(refused.value)
    assert exec_server.requests == []


def test_the_client_does_not_load_the_librarys_generated_core_api() -> None:
    """Its ``CoreV1Api`` module costs the operator 21 MiB of memory for the one exec path."""
    loaded = subprocess.run(
        [
            sys.executable,
            "-c",
            "import sys, kcp_shard_operator.cli.main, kcp_shard_operator.controller.handlers;"
            "print(sorted(m for m in sys.modules if m.startswith('kubernetes.client.api.')))",
        ],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert "core_v1_api" not in loaded
