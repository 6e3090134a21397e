"""What every pod the operator renders shares (pure): the Secret volumes it mounts, probes on
kcp's health endpoints, the restricted security contexts and the scheduling fields copied
from a spec."""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Protocol

from kcp_shard_operator.core.api.model import JSON
from kcp_shard_operator.core.api.refs import CASecretKeyRef, LocalObjectRef, SecretKeyRef

RUN_AS_USER = 65532
PORT = 6443
"""The HTTPS port of every kcp server the operator runs (shard, cache server, front-proxy)."""
PROBE_PERIOD_SECONDS = 2
"""Probes every 2 s: a new pod joins its Service at most 2 s after it is ready."""
STARTUP_SECONDS = 300
"""How long a kcp server may take to become ready before its container is restarted."""
TERMINATION_GRACE_SECONDS = 10
"""kcp v0.27.1 waits out the grace period after SIGTERM (30 s by default) before it exits
(measured in make e2e-upgrade); with Recreate that wait was a third of the outage. A SIGKILL
after 10 s is safe for the data: etcd acknowledges a write only once it is in its
write-ahead log."""


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


class Pulled(Protocol):
    @property
    def pull_policy(self) -> str | None: ...


class Imaged(Placed, Protocol):
    """A spec with an image and the pod's scheduling fields."""

    @property
    def image_ref(self) -> str: ...
    @property
    def image(self) -> Pulled: ...


def kcp_pod_spec(name: str, command: list[str], pod: Pod, spec: Imaged) -> JSON:
    """The pod of a kcp server: one container ``name`` running ``command`` with ``pod``'s
    arguments and volumes, HTTPS on PORT with probes on kcp's health endpoints, non-root on a
    read-only root filesystem, placed as ``spec`` says."""
    container: JSON = {
        "name": name,
        "image": spec.image_ref,
        "command": command,
        "args": pod.args,
        "ports": [{"name": "https", "containerPort": PORT, "protocol": "TCP"}],
        **https_probes(PORT, PROBE_PERIOD_SECONDS, STARTUP_SECONDS),
        "securityContext": container_security_context(),
        "volumeMounts": pod.mounts,
    }
    if spec.image.pull_policy:
        container["imagePullPolicy"] = spec.image.pull_policy
    pod_spec: JSON = {
        "terminationGracePeriodSeconds": TERMINATION_GRACE_SECONDS,
        "securityContext": pod_security_context(),
        "containers": [container],
        "volumes": pod.volumes,
    }
    placed(pod_spec, container, spec)
    return pod_spec


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
    """Names of the Secrets a pod spec needs, sorted: not those of optional volumes (the keys
    of an S3 backup target), which the pod starts without and the operator never reads."""
    return sorted(
        {
            v["secret"]["secretName"]
            for v in pod_spec.get("volumes", [])
            if "secret" in v and not v["secret"].get("optional")
        }
    )


def revisions_digest(pod_spec: JSON, revisions: Mapping[str, str]) -> str:
    """A digest of the revisions of the Secrets ``pod_spec`` mounts: on the pod template, it
    rolls the pods when one of them changes (a certificate is renewed)."""
    text = ";".join(f"{name}={revisions.get(name, '')}" for name in secret_names(pod_spec))
    return hashlib.sha256(text.encode()).hexdigest()[:16]
