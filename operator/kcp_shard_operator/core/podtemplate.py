"""What every pod the operator renders shares (pure): probes on kcp's health endpoints, the
restricted security contexts and the scheduling fields copied from a spec."""

from __future__ import annotations

from typing import Protocol

from kcp_shard_operator.core.model import JSON

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
