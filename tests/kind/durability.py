"""The data checks of the kind tests: each shard reached through a :class:`kind.Forward` to its
Service (started again when the forwarded pod is gone), the steps that replace pods (a
Secret rotation, ``kubectl rollout restart``, the operator pod killed), and the figures of
each check, written to ``bench/results/<name>.json``."""

from __future__ import annotations

import base64
import json
import subprocess
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from testkit.kcpapi import ShardAPI
from testkit.kcpdata import FRONT_PROXY, KcpData
from testkit.kube import Cluster
from testkit.tools import REPO, log
from testkit.wait import wait_for
from tests.e2e.pki import Pki, serving_secret

from .kind import OPERATOR_NAMESPACE, Forward, pod_ready, pods, shard_object

RESULTS = REPO / "bench" / "results"
OPERATOR_SELECTOR = "app.kubernetes.io/name=kcp-shard-operator"


def pki_kubeconfig(pki: Pki, folder: Path) -> Path:
    """A kubeconfig file of ``pki``'s admin (its server is replaced by each forward)."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "admin.kubeconfig"
    path.write_text(yaml.safe_dump(pki.kubeconfig("https://127.0.0.1", "admin")))
    return path


def secret_kubeconfig(cluster: Cluster, namespace: str, secret: str, folder: Path) -> Path:
    """The ``kubeconfig`` key of the Secret ``secret``, written to a file in ``folder``."""
    folder.mkdir(parents=True, exist_ok=True)
    encoded = cluster.kubectl(
        "get", "secret", secret, "-n", namespace, "-o", "jsonpath={.data.kubeconfig}"
    )
    path = folder / f"{secret}.kubeconfig"
    path.write_bytes(base64.b64decode(encoded))
    path.chmod(0o600)
    return path


@contextmanager
def shard_apis(
    cluster: Cluster,
    namespace: str,
    kubeconfig: Path,
    names: tuple[str, ...],
    front_proxy: tuple[str, Path] | None = None,
) -> Iterator[dict[str, ShardAPI]]:
    """A :class:`ShardAPI` per Shard of ``names`` (the kcp shard names are the Shard names),
    with the credentials of ``kubeconfig``, each through its own :class:`Forward`; with
    ``front_proxy`` (its Service and the users' admin kubeconfig), one through it too, under
    :data:`FRONT_PROXY`."""
    forwards = {name: Forward(cluster, namespace, f"{name}-kcp") for name in names}
    credentials = dict.fromkeys(names, kubeconfig)
    if front_proxy is not None:
        forwards[FRONT_PROXY] = Forward(cluster, namespace, front_proxy[0])
        credentials[FRONT_PROXY] = front_proxy[1]
    try:
        yield {
            name: ShardAPI(name, credentials[name], server=fwd.url, reconnect=fwd.restart)
            for name, fwd in forwards.items()
        }
    finally:
        for fwd in forwards.values():
            fwd.close()


CLI = str(REPO / ".venv" / "bin" / "kcp-shard-operator")


def admin_kubeconfig(
    cluster: Cluster, namespace: str, shard: str, folder: Path, *server: str
) -> Path:
    """The admin kubeconfig of ``shard`` as the README gets it."""
    path = folder / f"{shard}.kubeconfig"
    subprocess.run(
        [CLI, "kubeconfig", shard, "-n", namespace, "-o", str(path), *server],
        env=dict(cluster.env), check=True, timeout=60,
    )  # fmt: skip
    return path


def front_proxy_kubeconfig(cluster: Cluster, namespace: str, folder: Path) -> Path:
    """The users' admin kubeconfig of the sample FrontProxy as the README gets it."""
    path = folder / "kcp.kubeconfig"
    subprocess.run(
        [CLI, "kubeconfig", "kcp", "--front-proxy", "-n", namespace, "-o", str(path)],
        env=dict(cluster.env), check=True, timeout=60,
    )  # fmt: skip
    return path


SHARD_APP = "kcp"
"""``app.kubernetes.io/name`` of a shard's pods (a VirtualWorkspaceServer named as its shard
has the same instance label)."""


def pod_names(cluster: Cluster, namespace: str, shard: str) -> set[str]:
    return {p["metadata"]["name"] for p in pods(cluster, namespace, shard, SHARD_APP)}


def wait_replaced(
    cluster: Cluster, namespace: str, shard: str, old: set[str], replicas: int, timeout: float
) -> None:
    """Every pod of ``old`` gone, ``replicas`` new pods Ready, the Shard Ready again."""

    def done() -> bool:
        current = pods(cluster, namespace, shard, SHARD_APP)
        names = {p["metadata"]["name"] for p in current}
        obj = shard_object(cluster, namespace, shard)
        status = obj.get("status") or {}
        return (
            not names & old
            and len(current) == replicas
            and all(pod_ready(p) for p in current)
            and status.get("phase") == "Ready"
            and status.get("observedGeneration") == obj["metadata"]["generation"]
        )

    wait_for(done, timeout, f"the pods of Shard {shard} replaced and Ready", interval=2)


def replace_all_pods(
    cluster: Cluster,
    namespace: str,
    shards: tuple[str, ...],
    replicas: int,
    timeout: float,
    act: Callable[[], object],
) -> float:
    """Run ``act``, then wait for every pod of ``shards`` to be replaced (:func:`wait_replaced`);
    the seconds from ``act`` to the last shard Ready again."""
    started = time.monotonic()
    old = {shard: pod_names(cluster, namespace, shard) for shard in shards}
    act()
    for shard in shards:
        wait_replaced(cluster, namespace, shard, old[shard], replicas, timeout)
    return time.monotonic() - started


def rollout_restart(cluster: Cluster, namespace: str, shards: tuple[str, ...]) -> None:
    """``kubectl rollout restart`` of each shard's Deployment."""
    for shard in shards:
        cluster.kubectl("rollout", "restart", "-n", namespace, f"deployment/{shard}-kcp")


def rotate_serving_certs(
    cluster: Cluster, namespace: str, pki: Pki, shards: tuple[str, ...]
) -> None:
    """A new serving key and certificate (same CA) in each shard's ``<name>-serving-cert``."""
    objs = [serving_secret(pki, name, namespace) for name in shards]
    cluster.kubectl("apply", "-n", namespace, "-f", "-", stdin=yaml.safe_dump_all(objs))


def restart_operator(cluster: Cluster) -> None:
    """Delete the operator pod and wait for its replacement to be Ready."""
    old = cluster.kubectl(
        "get", "pods", "-n", OPERATOR_NAMESPACE, "-l", OPERATOR_SELECTOR, "-o", "name"
    ).split()
    cluster.kubectl("delete", "pod", "-n", OPERATOR_NAMESPACE, "-l", OPERATOR_SELECTOR)

    def replaced() -> bool:
        found = json.loads(
            cluster.kubectl(
                "get", "pods", "-n", OPERATOR_NAMESPACE, "-l", OPERATOR_SELECTOR, "-o", "json"
            )
        )["items"]
        return bool(found) and all(
            f"pod/{p['metadata']['name']}" not in old and pod_ready(p) for p in found
        )

    wait_for(replaced, 180, "a new operator pod Ready", interval=2)


@dataclass
class DataSteps:
    """The data of a kind test checked after each step; the figures of every check."""

    data: KcpData
    shards: Mapping[str, ShardAPI]
    name: str
    storage: str
    figures: list[dict[str, Any]] = field(default_factory=list)
    started: float = field(default_factory=time.monotonic)

    def check(self, step: str, took: float) -> None:
        """Every object intact after ``step`` (which took ``took`` seconds); one figure."""
        checked = time.monotonic()
        problems = self.data.verify(self.shards, f"after {step}")
        figure = {
            "step": step,
            "step_seconds": round(took, 1),
            "objects": len(self.data.records),
            "intact": len(self.data.records) - len(problems),
            "check_seconds": round(time.monotonic() - checked, 1),
        }
        self.figures.append(figure)
        log(f"data check after {step}: {figure}")
        self.write()
        assert not problems, f"data lost after {step}: {[str(p) for p in problems]}"

    def write(self) -> None:
        RESULTS.mkdir(parents=True, exist_ok=True)
        path = RESULTS / f"{self.name}.json"
        body = json.loads(path.read_text()) if path.exists() else {}
        body[self.storage] = self.figures
        path.write_text(json.dumps(body, indent=2) + "\n")
