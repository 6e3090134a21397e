"""Reaching kcp as a user with a bearer token, for the kind tests of ``spec.auth``: kubeconfigs
built with ``kubectl config`` as a user builds them, kubectl runs against kcp, and raw calls
whose HTTP status is the point (401, 403)."""

from __future__ import annotations

import base64
import json
import ssl
import subprocess
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from subprocess import CompletedProcess
from typing import Any

from testkit.kube import Cluster

from .kind import Forward

ATTEMPTS = 3
WHOAMI_BODY = {"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"}


def ca_of(cluster: Cluster, kubeconfig: Path, path: Path) -> Path:
    """The CA of ``kubeconfig``'s cluster, written to ``path`` (as the docs take it)."""
    jsonpath = "jsonpath={.clusters[0].cluster.certificate-authority-data}"
    data = kcp_kubectl(cluster, kubeconfig, "config", "view", "--raw", "-o", jsonpath)
    path.write_bytes(base64.b64decode(data))
    return path


def _kubectl(cluster: Cluster, kubeconfig: Path, args: tuple[str, ...]) -> CompletedProcess[str]:
    return subprocess.run(
        ["kubectl", "--kubeconfig", str(kubeconfig), *args],
        env={**cluster.env, "KUBECONFIG": str(kubeconfig)},
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip


def kcp_kubectl(cluster: Cluster, kubeconfig: Path, *args: str) -> str:
    """kubectl against kcp with ``kubeconfig`` (the kind cluster's tools, not its config)."""
    proc = _kubectl(cluster, kubeconfig, args)
    if proc.returncode != 0:
        raise AssertionError(f"kubectl {' '.join(args)}: {proc.stderr.strip()}")
    return proc.stdout


def kcp_kubectl_refused(cluster: Cluster, kubeconfig: Path, *args: str) -> str:
    """kubectl against kcp that must fail; what it printed on stderr."""
    proc = _kubectl(cluster, kubeconfig, args)
    assert proc.returncode != 0, f"kubectl {' '.join(args)} succeeded: {proc.stdout}"
    return proc.stderr.strip()


@dataclass(frozen=True)
class KcpUser:
    """A user of kcp holding ``token``, reaching kcp through ``forward`` (a port-forward, started
    again when the pod it forwarded to is gone) whose serving certificate ``ca`` verifies."""

    cluster: Cluster
    token: str
    forward: Forward
    ca: Path

    def kubeconfig(self, folder: Path, name: str, workspace: str) -> Path:
        """A kubeconfig for ``workspace``, made with ``kubectl config`` as the docs show."""
        path = folder / f"{name}.kubeconfig"
        steps = (
            ("set-cluster", "kcp", f"--server={self.forward.url()}/clusters/{workspace}",
             f"--certificate-authority={self.ca}", "--embed-certs"),
            ("set-credentials", name, f"--token={self.token}"),
            ("set-context", name, "--cluster=kcp", f"--user={name}"),
            ("use-context", name),
        )  # fmt: skip
        for step in steps:
            self.kubectl(path, "config", *step)
        return path

    def kubectl(self, kubeconfig: Path, *args: str) -> str:
        return kcp_kubectl(self.cluster, kubeconfig, *args)

    def call(
        self, workspace: str, method: str, path: str, body: dict[str, Any] | None = None
    ) -> tuple[int, dict[str, Any]]:
        """``method`` on ``/clusters/<workspace><path>`` with the token; status and answer."""
        context = ssl.create_default_context(cafile=str(self.ca))
        data = json.dumps(body).encode() if body is not None else None
        headers = {"Authorization": f"Bearer {self.token}", "Content-Type": "application/json"}
        for attempt in range(ATTEMPTS):
            url = f"{self.forward.url()}/clusters/{workspace}{path}"
            request = urllib.request.Request(url, data=data, method=method, headers=headers)
            try:
                with urllib.request.urlopen(request, timeout=15, context=context) as answer:
                    return answer.status, json.loads(answer.read())
            except urllib.error.HTTPError as err:
                text = err.read().decode(errors="replace")
                try:
                    return err.code, json.loads(text)
                except ValueError:
                    return err.code, {"text": text}
            except (urllib.error.URLError, ConnectionError) as err:
                # The forwarded pod is gone (a rollout replaced it): forward to another.
                if attempt == ATTEMPTS - 1:
                    raise AssertionError(f"{method} {url}: {err}") from err
                self.forward.restart()
        raise AssertionError("unreachable")

    def whoami(self, workspace: str) -> tuple[int, dict[str, Any]]:
        """The SelfSubjectReview in ``workspace`` (what ``kubectl auth whoami`` asks)."""
        status, answer = self.call(
            workspace, "POST", "/apis/authentication.k8s.io/v1/selfsubjectreviews", WHOAMI_BODY
        )
        if status != 201:
            return status, answer
        return status, answer["status"]["userInfo"]

    def accepted(self, workspace: str) -> dict[str, Any] | None:
        """Who the token is in ``workspace``, once kcp takes it (None before)."""
        status, who = self.whoami(workspace)
        return who if status == 201 else None

    def create_config_map(self, workspace: str, namespace: str, name: str) -> int:
        body = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name},
                "data": {"by": "token"}}  # fmt: skip
        status, _ = self.call(workspace, "POST", f"/api/v1/namespaces/{namespace}/configmaps", body)
        return status
