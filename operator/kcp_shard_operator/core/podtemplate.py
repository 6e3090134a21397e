"""What every pod the operator renders shares (pure): the Secret volumes it mounts, probes on
kcp's health endpoints, the restricted security contexts and the scheduling fields copied
from a spec."""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Protocol

from kcp_shard_operator.core.model import JSON
from kcp_shard_operator.core.refs import CASecretKeyRef, LocalObjectRef, SecretKeyRef

RUN_AS_USER = 65532


def pod_security_context() -> JSON:
    return {
        "runAsNonRoot": True,
        "runAsUser": RUN_AS_USER,
        "fsGroup": RUN_AS_USER,
        "seccompProfile": {"type": "RuntimeDefault"},
    }


def container_security_context() -> JSON:
    """Non-root, no privilege escalation, no capabilities, a read-only root filesystem."""
    return {
        "allowPrivilegeEscalation": False,
        "readOnlyRootFilesystem": True,
        "runAsNonRoot": True,
        "capabilities": {"drop": ["ALL"]},
    }


class Placed(Protocol):
    """A spec with the pod's scheduling fields and container resources."""

    @property
    def resources(self) -> JSON | None: ...
    @property
    def node_selector(self) -> dict[str, str]: ...
    @property
    def tolerations(self) -> list[JSON]: ...
    @property
    def affinity(self) -> JSON | None: ...


def https_probes(port: int, period_seconds: int, startup_seconds: int) -> JSON:
    """Startup and readiness on ``/readyz``, liveness on ``/livez``, over HTTPS."""
    get = {"port": port, "scheme": "HTTPS"}
    return {
        "startupProbe": {
            "httpGet": {**get, "path": "/readyz"},
            "periodSeconds": period_seconds,
            "timeoutSeconds": period_seconds,
            "failureThreshold": startup_seconds // period_seconds,
        },
        "readinessProbe": {
            "httpGet": {**get, "path": "/readyz"},
            "periodSeconds": period_seconds,
            "timeoutSeconds": period_seconds,
        },
        "livenessProbe": {
            "httpGet": {**get, "path": "/livez"},
            "periodSeconds": 10,
            "failureThreshold": 6,
        },
    }


def placed(pod_spec: JSON, container: JSON, spec: Placed) -> None:
    """Copy the spec's resources into ``container`` and its scheduling into ``pod_spec``."""
    if spec.resources:
        container["resources"] = spec.resources
    if spec.node_selector:
        pod_spec["nodeSelector"] = spec.node_selector
    if spec.tolerations:
        pod_spec["tolerations"] = spec.tolerations
    if spec.affinity:
        pod_spec["affinity"] = spec.affinity


@dataclass
class Pod:
    """Accumulates flags, volumes and mounts while rendering one pod."""

    args: list[str] = field(default_factory=list)
    volumes: list[JSON] = field(default_factory=list)
    mounts: list[JSON] = field(default_factory=list)

    def mount_secret(self, volume: str, secret: str, path: str, items: list[JSON] | None) -> None:
        source: JSON = {"secretName": secret, "defaultMode": 0o440}
        if items:
            source["items"] = items
        self.volumes.append({"name": volume, "secret": source})
        self.mounts.append({"name": volume, "mountPath": path, "readOnly": True})

    def kubeconfig(self, volume: str, ref: SecretKeyRef, directory: str) -> str:
        self.mount_secret(volume, ref.name, directory, [{"key": ref.key, "path": "kubeconfig"}])
        return f"{directory}/kubeconfig"

    def secret_dir(self, volume: str, ref: LocalObjectRef, directory: str) -> str:
        self.mount_secret(volume, ref.name, directory, None)
        return directory

    def ca_file(self, volume: str, ref: CASecretKeyRef, directory: str) -> str:
        self.mount_secret(volume, ref.name, directory, [{"key": ref.key, "path": "ca.crt"}])
        return f"{directory}/ca.crt"


def secret_names(pod_spec: JSON) -> list[str]:
    """Names of the Secrets a pod spec mounts, sorted."""
    return sorted({v["secret"]["secretName"] for v in pod_spec.get("volumes", []) if "secret" in v})


def revisions_digest(pod_spec: JSON, revisions: Mapping[str, str]) -> str:
    """A digest of the revisions of the Secrets ``pod_spec`` mounts: on the pod template, it
    rolls the pods when one of them changes (a certificate is renewed)."""
    text = ";".join(f"{name}={revisions.get(name, '')}" for name in secret_names(pod_spec))
    return hashlib.sha256(text.encode()).hexdigest()[:16]
