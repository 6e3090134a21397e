"""The operator's API calls, counted into its metrics by kind and verb."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TypeVar

from kcp_shard_operator.controller.context import KubeAPI
from kcp_shard_operator.controller.metrics import Metrics
from kcp_shard_operator.core.api.model import JSON
from kcp_shard_operator.kube.client import APIError, Ran

T = TypeVar("T")


class MeteredKube:
    """``kube``, with every read and write counted (a write that raised, as failed too).

    A dry-run replace changes nothing and counts as a read.
    """

    def __init__(self, kube: KubeAPI, metrics: Metrics) -> None:
        self._kube = kube
        self._metrics = metrics

    def _write(self, kind: str, verb: str, call: Callable[[], T]) -> T:
        self._metrics.writes.labels(kind, verb).inc()
        try:
            return call()
        except APIError:
            self._metrics.failed_writes.labels(kind, verb).inc()
            raise

    def _read(self, kind: str, call: Callable[[], T]) -> T:
        self._metrics.reads.labels(kind).inc()
        return call()

    def get(self, api_version: str, kind: str, namespace: str, name: str) -> JSON | None:
        return self._read(kind, lambda: self._kube.get(api_version, kind, namespace, name))

    def list(self, api_version: str, kind: str, namespace: str | None) -> list[JSON]:
        return self._read(kind, lambda: self._kube.list(api_version, kind, namespace))

    def apply(self, obj: JSON) -> JSON:
        return self._write(obj["kind"], "apply", lambda: self._kube.apply(obj))

    def create(self, obj: JSON) -> JSON:
        return self._write(obj["kind"], "create", lambda: self._kube.create(obj))

    def replace(self, obj: JSON, dry_run: bool = False) -> JSON:
        if dry_run:
            return self._read(obj["kind"], lambda: self._kube.replace(obj, dry_run=True))
        return self._write(obj["kind"], "replace", lambda: self._kube.replace(obj))

    def delete(self, api_version: str, kind: str, namespace: str, name: str) -> None:
        self._write(kind, "delete", lambda: self._kube.delete(api_version, kind, namespace, name))

    def storage_classes(self) -> dict[str, JSON]:
        return self._read("StorageClass", self._kube.storage_classes)

    def patch_status(
        self, api_version: str, kind: str, namespace: str, name: str, status: JSON
    ) -> JSON:
        return self._write(
            kind,
            "patch-status",
            lambda: self._kube.patch_status(api_version, kind, namespace, name, status),
        )

    def secret_value(self, namespace: str, name: str, key: str) -> bytes | None:
        return self._read("Secret", lambda: self._kube.secret_value(namespace, name, key))

    def secret_data(self, namespace: str, name: str) -> dict[str, bytes] | None:
        return self._read("Secret", lambda: self._kube.secret_data(namespace, name))

    def run_in_container(
        self, namespace: str, pod: str, container: str, command: Sequence[str]
    ) -> Ran:
        return self._write(
            "Pod", "exec", lambda: self._kube.run_in_container(namespace, pod, container, command)
        )
