"""Certificates and kubeconfigs for kcp shards running as pods, as Kubernetes Secrets.

One throw-away CA signs every serving certificate (valid for the shard's Service names) and
the client certificate of ``kcp-e2e-admin`` in group ``system:masters``; each shard trusts
client certificates of that CA (``--client-ca-file``). The kubeconfigs reach a shard through
its Service with that client certificate; the root shard's has the context ``shard-base``
that kcp's ``--root-shard-kubeconfig-file`` reads.
"""

from __future__ import annotations

import base64
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

ADMIN_USER = "kcp-e2e-admin"
ADMIN_GROUP = "system:masters"
CLIENT_CA_SECRET = "kcp-client-ca"
CACHE_KUBECONFIG_SECRET = "kcp-cache-kubeconfig"


def _openssl(*args: str) -> None:
    subprocess.run(["openssl", *args], check=True, capture_output=True)


def _b64(path: Path) -> str:
    return base64.b64encode(path.read_bytes()).decode()


@dataclass(frozen=True)
class Pki:
    """A CA in ``folder`` (``ca.crt``, ``ca.key``) and what it signs."""

    folder: Path

    @classmethod
    def create(cls, folder: Path) -> Pki:
        folder.mkdir(parents=True, exist_ok=True)
        _openssl(
            "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
            "-keyout", str(folder / "ca.key"), "-out", str(folder / "ca.crt"), "-days", "2",
            "-subj", "/CN=kcp-shard-operator-e2e-ca",
        )  # fmt: skip
        return cls(folder)

    @property
    def ca(self) -> Path:
        return self.folder / "ca.crt"

    def _sign(self, name: str, subject: str, extensions: str) -> tuple[Path, Path]:
        key, csr, crt = (self.folder / f"{name}.{ext}" for ext in ("key", "csr", "crt"))
        ext = self.folder / f"{name}.ext"
        ext.write_text(extensions)
        _openssl(
            "req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
            "-keyout", str(key), "-out", str(csr), "-subj", subject,
        )  # fmt: skip
        _openssl(
            "x509", "-req", "-in", str(csr), "-CA", str(self.ca),
            "-CAkey", str(self.folder / "ca.key"), "-CAcreateserial", "-out", str(crt),
            "-days", "2", "-extfile", str(ext),
        )  # fmt: skip
        return crt, key

    def serving(self, service: str, namespace: str) -> tuple[Path, Path]:
        """A serving certificate for the Service ``service`` in ``namespace``."""
        names = [service, f"{service}.{namespace}", f"{service}.{namespace}.svc", "localhost"]
        sans = ",".join([f"DNS:{n}" for n in names] + ["IP:127.0.0.1"])
        return self._sign(
            service,
            f"/CN={service}",
            f"subjectAltName={sans}\nextendedKeyUsage=serverAuth\n",
        )

    def admin(self) -> tuple[Path, Path]:
        """The client certificate of ``kcp-e2e-admin`` in ``system:masters``."""
        return self._sign(
            ADMIN_USER, f"/O={ADMIN_GROUP}/CN={ADMIN_USER}", "extendedKeyUsage=clientAuth\n"
        )

    def kubeconfig(self, server: str, context: str) -> dict[str, Any]:
        """A kubeconfig for ``server`` as the admin, with one context named ``context``."""
        crt, key = self.admin()
        return {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [
                {
                    "name": context,
                    "cluster": {"server": server, "certificate-authority-data": _b64(self.ca)},
                }
            ],
            "users": [
                {
                    "name": ADMIN_USER,
                    "user": {
                        "client-certificate-data": _b64(crt),
                        "client-key-data": _b64(key),
                    },
                }
            ],
            "contexts": [{"name": context, "context": {"cluster": context, "user": ADMIN_USER}}],
            "current-context": context,
        }


def secret(name: str, data: dict[str, str], type_: str = "Opaque") -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": name},
        "type": type_,
        "stringData": data,
    }


def serving_secret(pki: Pki, shard: str, namespace: str) -> dict[str, Any]:
    """``<shard>-serving-cert``: a new serving key and certificate for the shard's Service."""
    crt, key = pki.serving(f"{shard}-kcp", namespace)
    return secret(
        f"{shard}-serving-cert",
        {"tls.crt": crt.read_text(), "tls.key": key.read_text()},
        "kubernetes.io/tls",
    )


def shard_secrets(pki: Pki, namespace: str, root: str, shards: list[str]) -> list[dict[str, Any]]:
    """Every Secret a root shard ``root`` and non-root ``shards`` (Shard names) mount.

    ``<name>-serving-cert`` and ``<name>-admin-kubeconfig`` (context ``shard-base``, through
    the shard's Service) per shard, ``kcp-client-ca``, and the kubeconfig of the root shard's
    embedded cache server (``kcp-cache-kubeconfig``). The root shard's admin kubeconfig is
    what non-root shards on kcp before the deprecating release mount for
    ``--root-shard-kubeconfig-file``.
    """
    objs = [secret(CLIENT_CA_SECRET, {"ca.crt": pki.ca.read_text()})]
    root_url = f"https://{root}-kcp.{namespace}.svc:6443"
    for name in [root, *shards]:
        objs.append(serving_secret(pki, name, namespace))
        url = f"https://{name}-kcp.{namespace}.svc:6443"
        objs.append(
            secret(
                f"{name}-admin-kubeconfig",
                {"kubeconfig": yaml.safe_dump(pki.kubeconfig(url, "shard-base"))},
            )
        )
    objs.append(
        secret(
            CACHE_KUBECONFIG_SECRET,
            {"kubeconfig": yaml.safe_dump(pki.kubeconfig(root_url, "cache"))},
        )
    )
    return objs
