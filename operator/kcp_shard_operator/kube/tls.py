"""A TLS context for an :class:`~kcp_shard_operator.kube.kubeconfig.Endpoint`.

Python's ``ssl`` loads client certificates from files only: inline PEM is written to a private
folder (0700, files 0600) that lives for the duration of :func:`ssl_context`, so a key touches the
disk only there.
"""

from __future__ import annotations

import os
import socket
import ssl
import tempfile

from kcp_shard_operator.kube.kubeconfig import Endpoint


def _write_private(directory: str, name: str, content: bytes) -> str:
    path = os.path.join(directory, name)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "wb") as handle:
        handle.write(content)
    return path


class _NamedContext(ssl.SSLContext):
    """Verifies the server certificate against ``server_name`` instead of the URL's host."""

    server_name = ""

    def wrap_socket(
        self,
        sock: socket.socket,
        server_side: bool = False,
        do_handshake_on_connect: bool = True,
        suppress_ragged_eofs: bool = True,
        server_hostname: str | bytes | None = None,
        session: ssl.SSLSession | None = None,
    ) -> ssl.SSLSocket:
        return super().wrap_socket(
            sock,
            server_side,
            do_handshake_on_connect,
            suppress_ragged_eofs,
            self.server_name or server_hostname,
            session,
        )


def ssl_context(endpoint: Endpoint) -> ssl.SSLContext:
    """The endpoint's CA (or the system's), its client certificate, and its tls-server-name."""
    context = _NamedContext(ssl.PROTOCOL_TLS_CLIENT)
    context.server_name = endpoint.tls_server_name or ""
    if endpoint.insecure:
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
    elif endpoint.ca_pem:
        context.load_verify_locations(cadata=endpoint.ca_pem.decode("ascii", errors="replace"))
    elif endpoint.ca_file:
        context.load_verify_locations(cafile=endpoint.ca_file)
    else:
        context.load_default_certs()
    if endpoint.client_cert_pem or endpoint.client_key_pem:
        with tempfile.TemporaryDirectory(prefix="kcp-shard-cert-") as folder:
            os.chmod(folder, 0o700)
            cert = (
                _write_private(folder, "client.crt", endpoint.client_cert_pem)
                if endpoint.client_cert_pem
                else endpoint.client_cert_file
            )
            key = (
                _write_private(folder, "client.key", endpoint.client_key_pem)
                if endpoint.client_key_pem
                else endpoint.client_key_file
            )
            context.load_cert_chain(str(cert), str(key))
    elif endpoint.client_cert_file and endpoint.client_key_file:
        context.load_cert_chain(endpoint.client_cert_file, endpoint.client_key_file)
    return context
