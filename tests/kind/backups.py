"""What the kind tests of backups and restores share: a namespace on a cluster holding the
backup image, the root Shard with ``spec.backup`` they start from, and the CLI's restore run
with each line it prints marked on a timeline."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, Protocol

from kcp_shard_operator.core.backup.spec import DEFAULT_BACKUP_IMAGE
from testkit.kube import Cluster
from testkit.tools import HACK, run_visible

from .durability import CLI
from .kind import OLD, kcp_image, kcp_namespace


@contextmanager
def namespace_with_backup_image(cluster: Cluster, prefix: str) -> Iterator[str]:
    """A fresh namespace (:func:`kcp_namespace`) on ``cluster``, into whose node the backup
    image (``hack/image.sh backup``) is loaded first."""
    run_visible([str(HACK / "image.sh"), "backup"])
    name = cluster.kubectl("config", "view", "-o", "jsonpath={.contexts[0].context.cluster}")
    run_visible([str(HACK / "kind.sh"), "load", name.removeprefix("kind-"), DEFAULT_BACKUP_IMAGE])
    with kcp_namespace(cluster, prefix) as namespace:
        yield namespace


def kcp_spec(version: str = OLD) -> dict[str, Any]:
    """The spec every kcp object of these tests starts from: kcp ``version`` from the image
    loaded into the node."""
    repository, _ = kcp_image()
    return {
        "version": version,
        "image": {"repository": repository, "tag": f"v{version}", "pullPolicy": "Never"},
    }


def backed_up_root(
    claim: str, backup: dict[str, Any] | None = None, annotations: dict[str, str] | None = None
) -> dict[str, Any]:
    """The root Shard at kcp ``OLD`` on the operator's PKI with ``spec.backup`` onto the
    claim ``claim`` (and the fields of ``backup``), with ``annotations``."""
    metadata: dict[str, Any] = {"name": "root"}
    if annotations:
        metadata["annotations"] = annotations
    return {
        "apiVersion": "kcpshard.dev/v1alpha1",
        "kind": "Shard",
        "metadata": metadata,
        "spec": {**kcp_spec(), "backup": {"claimRef": {"name": claim}, **(backup or {})}},
    }


class Marks(Protocol):
    """A timeline of either kind: something that marks what happened when."""

    def mark(self, what: str) -> object: ...


def restore_printed(
    cluster: Cluster, args: list[str], timeline: Marks, timeout: float
) -> list[str]:
    """``kcp-shard-operator restore ARGS``, each line it prints marked on ``timeline`` as it
    comes (its phases, with no sampling of the status beside it); the lines."""
    lines = []
    with subprocess.Popen(
        [CLI, "restore", *args], env=dict(cluster.env), stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT, text=True,
    ) as process:  # fmt: skip
        assert process.stdout is not None
        for line in process.stdout:
            lines.append(line.rstrip())
            timeline.mark(f"restore: {line.rstrip()}")
        code = process.wait(timeout=timeout)
    assert code == 0, "\n".join(lines)
    return lines
