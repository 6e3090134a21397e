"""A replicated installation on real pods: one replica of each shard runs kcp's controllers, and
only the installation's shards reach its cache server.

One installation on the operator's own PKI (:func:`kind.installation_on_etcd_pod`): a
CacheServer, a root and shard-1 with two kcp replicas each on an etcd pod, and a FrontProxy.

- **Leader election.** Each shard's lease ``kube-system/kcp-controllers`` lives in the shard's
  own ``system:admin`` logical cluster, read through the shard's admin kubeconfig: it names one
  of the shard's two pods, and only that pod's log says it started leading. The root's holder
  pod is deleted: the lease moves to another replica (the remaining one or the pod that
  replaced the holder, whichever tries first) once it expires, within its duration plus two
  of kcp's retry periods (kcp does not release it on shutdown), and a workspace created right
  after on each shard is scheduled, its LogicalCluster Ready and the Workspace Ready.
- **The cache server's NetworkPolicy.** The node's bridge CNI enforces no NetworkPolicy:
  kube-router's firewall runs beside it from before the installation is applied
  (:mod:`networkpolicies`), and a canary pod behind a deny-all policy shows that it enforces
  them. The policy exists, owned by the CacheServer, selecting the cache server's pod and
  admitting the shards' label; a pod outside the installation (another namespace) and an
  unlabelled pod in its namespace cannot open the cache server's port, a pod with the shards'
  label can (a new pod is admitted once kube-router has synced its address: each probe keeps
  trying for 45 s). The shards, which started behind the policy, stay Ready, the root's APIExports
  are in the cache server, and the workspaces made before survive.

The workspaces and objects of :mod:`testkit.kcpdata` are read again after each step.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from functools import partial
from pathlib import Path
from typing import Any

import pytest
import yaml

from testkit.kcpapi import ShardAPI, UnreachableError
from testkit.kcpdata import KcpData
from testkit.kube import Cluster, create_namespace, delete_namespace
from testkit.tools import log
from testkit.wait import wait_for

from .durability import admin_kubeconfig, pod_names, shard_apis
from .kind import (
    CACHE,
    OLD,
    describe_failure,
    image_names,
    installation_on_etcd_pod,
    installation_ready,
    kcp_namespace,
    pod_ready,
    pods,
)
from .networkpolicies import enforce_network_policies
from .test_cacheserver import cached_exports

pytestmark = [pytest.mark.e2e, pytest.mark.kind]

SHARDS = ("root", "shard-1")
REPLICAS = 2
START_TIMEOUT = 900
LEASE_PATH = (
    "/clusters/system:admin/apis/coordination.k8s.io/v1/namespaces/kube-system/leases/"
    "kcp-controllers"
)
TAKE_OVER_SLACK = 2 * 2 * (1 + 1.2)
"""Seconds past the lease's expiry a waiting replica may take to take it: kcp's replicas try
every 2 s (its RetryPeriod) plus a jitter of up to 1.2 times that; a replica counts the lease
from when it saw the holder's last renewal (up to one try late) and takes it at its first try
after the expiry (up to one try late again)."""
CACHE_PORT = 6443
CANARY_PORT = 8080
PROBE = """
import socket, sys, time
deadline, tries = time.monotonic() + float(sys.argv[3]), 0
while True:
    tries += 1
    try:
        socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=3).close()
        print(f"open (try {tries})")
        break
    except OSError as err:
        if time.monotonic() >= deadline:
            print(f"closed: {err} ({tries} tries)")
            break
        time.sleep(1)
"""
"""Open a TCP connection to host argv[1], port argv[2], trying again for argv[3] seconds;
print ``open`` or why not."""
PROBE_WINDOW = 45
"""Seconds a probe of the cache server keeps trying: kube-router admits a new pod's address
only once it has synced it (the canary took 8 s), so the admitted probe gets that long to open
the port, and the refused ones as long to fail to."""


@pytest.fixture(scope="module")
def installation(
    kind_cluster: Cluster, operator_release: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[str, dict[str, ShardAPI]]]:
    """The installation Ready at kcp OLD, and a :class:`ShardAPI` per shard (root's admin)."""
    enforce_network_policies(kind_cluster)
    with kcp_namespace(kind_cluster, "kcp-replicated") as ns:
        objects = installation_on_etcd_pod(kind_cluster, ns, OLD, REPLICAS)
        started = time.monotonic()
        kind_cluster.kubectl("apply", "-n", ns, "-f", "-", stdin=yaml.safe_dump_all(objects))
        try:
            wait_for(
                lambda: installation_ready(kind_cluster, ns, OLD),
                START_TIMEOUT,
                "the installation Ready",
                interval=3,
            )
        except BaseException:
            print(describe_failure(kind_cluster, ns))
            raise
        log(f"installation Ready {time.monotonic() - started:.0f}s after apply")
        kubeconfig = admin_kubeconfig(kind_cluster, ns, "root", tmp_path_factory.mktemp("kcp"))
        with shard_apis(kind_cluster, ns, kubeconfig, SHARDS) as apis:
            yield ns, apis


def lease(api: ShardAPI) -> dict[str, Any] | None:
    """The shard's lease of kcp's controllers, once someone holds it; None while the shard
    (the pod its port-forward reached) does not answer."""
    try:
        found = api.get(LEASE_PATH)
    except UnreachableError:
        return None
    return found if found and (found.get("spec") or {}).get("holderIdentity") else None


def holder_pod(found: dict[str, Any]) -> str:
    """The pod holding ``found``: kcp's identity is ``<hostname>_<uuid>``."""
    return str(found["spec"]["holderIdentity"]).rsplit("_", 1)[0]


def timestamp(text: str) -> datetime:
    """A Lease's MicroTime (``2026-12-07T06:07:07.320790Z``)."""
    return datetime.fromisoformat(text)


def leading(cluster: Cluster, namespace: str, pod: str) -> bool:
    """Whether ``pod``'s kcp logged that it started leading."""
    return "started leading" in cluster.kubectl("logs", "-n", namespace, pod, timeout=60)


def workspace_ready(api: ShardAPI, name: str) -> bool:
    found = api.get(f"/clusters/root/apis/tenancy.kcp.io/v1alpha1/workspaces/{name}")
    return bool(found) and (found or {}).get("status", {}).get("phase") == "Ready"


def test_one_replica_runs_kcps_controllers_and_the_other_takes_over(
    kind_cluster: Cluster, installation: tuple[str, dict[str, ShardAPI]], tmp_path: Path
) -> None:
    ns, apis = installation
    try:
        for shard in SHARDS:
            names = pod_names(kind_cluster, ns, shard)
            assert len(names) == REPLICAS, names
            for pod in pods(kind_cluster, ns, shard):
                assert "--enable-leader-election=true" in pod["spec"]["containers"][0]["args"]
            found = wait_for(partial(lease, apis[shard]), 120, f"{shard}'s lease held")
            holder = holder_pod(found)
            assert holder in names, f"{shard}: lease held by {holder}, pods {sorted(names)}"
            leaders = {pod for pod in names if leading(kind_cluster, ns, pod)}
            assert leaders == {holder}, f"{shard}: {sorted(leaders)} started leading"
            log(f"{shard}: lease held by {holder} of {sorted(names)}; {found['spec']}")
        data = KcpData.create(apis, tmp_path / "data-checks.txt", prefix="leader")

        before = wait_for(lambda: lease(apis["root"]), 60, "the root's lease held")
        duration = int(before["spec"]["leaseDurationSeconds"])
        old = holder_pod(before)
        deleted = datetime.now(UTC)
        kind_cluster.kubectl("delete", "pod", "-n", ns, old, "--wait=false")
        renewed = [before["spec"]["renewTime"]]

        def taken() -> dict[str, Any] | None:
            found = lease(apis["root"])
            if found and holder_pod(found) == old:
                renewed.append(found["spec"]["renewTime"])
            return found if found and holder_pod(found) != old else None

        after = wait_for(taken, 3 * duration, "the root's lease taken over", interval=1)
        last_renewal = timestamp(max(renewed))
        acquired = timestamp(after["spec"]["acquireTime"])
        expired_after = (acquired - last_renewal).total_seconds()
        log(
            f"root's lease moved from {old} to {holder_pod(after)} "
            f"{(acquired - deleted).total_seconds():.1f}s after the pod's deletion: the old holder "
            f"renewed it {(last_renewal - deleted).total_seconds():.1f}s after the deletion, "
            f"the other took it {expired_after:.1f}s after that last renewal (lease {duration}s)"
        )
        new_holder = holder_pod(after)
        assert new_holder in pod_names(kind_cluster, ns, "root"), after["spec"]
        assert duration <= expired_after <= duration + TAKE_OVER_SLACK, after["spec"]
        assert leading(kind_cluster, ns, new_holder)
        started = time.monotonic()

        fresh = KcpData.create(apis, tmp_path / "data-after.txt", prefix="takeover")
        created = [r.name for r in fresh.records if r.kind == "Workspace"]
        for name in created:
            wait_for(partial(workspace_ready, apis["root"], name), 120, f"{name} Ready")
        log(f"workspaces {created} scheduled and Ready {time.monotonic() - started:.0f}s later")
        data.assert_intact(apis, "after the root's leader pod was deleted")
    except BaseException:
        print(describe_failure(kind_cluster, ns))
        raise


def probe_pod(
    name: str, target: str, port: int, window: float, labels: dict[str, str]
) -> dict[str, Any]:
    """A pod that tries to open ``target:port`` for ``window`` seconds and prints the result."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "labels": labels},
        "spec": {
            "restartPolicy": "Never",
            "securityContext": {"runAsNonRoot": True, "runAsUser": 65532},
            "containers": [
                {
                    "name": "probe",
                    "image": image_names()[0],
                    "imagePullPolicy": "Never",
                    "command": ["python3", "-c", PROBE, target, str(port), str(window)],
                }
            ],
        },
    }


@dataclass(frozen=True)
class Probe:
    """A probe pod ``name`` in ``namespace`` with ``labels``, opening ``target:port``."""

    namespace: str
    name: str
    target: str
    port: int
    window: float = 0
    labels: dict[str, str] = field(default_factory=dict)

    def start(self, cluster: Cluster) -> Probe:
        pod = probe_pod(self.name, self.target, self.port, self.window, self.labels)
        cluster.kubectl("apply", "-n", self.namespace, "-f", "-", stdin=json.dumps(pod))
        return self

    def result(self, cluster: Cluster) -> str:
        """What the pod got (``open (try n)`` or ``closed: ...``), once it is done."""

        def done() -> str | None:
            phase = cluster.kubectl(
                "get", "pod", self.name, "-n", self.namespace, "-o", "jsonpath={.status.phase}"
            )
            return phase if phase in ("Succeeded", "Failed") else None

        wait_for(done, self.window + 120, f"probe {self.name} done", interval=1)
        out = cluster.kubectl("logs", "-n", self.namespace, self.name).strip()
        cluster.kubectl("delete", "pod", self.name, "-n", self.namespace, "--wait=false")
        log(f"{self.namespace}/{self.name} {self.labels or ''} -> {self.target}:{self.port}: {out}")
        return out


CANARY = """
apiVersion: v1
kind: Pod
metadata: {name: canary, labels: {app: canary}}
spec:
  securityContext: {runAsNonRoot: true, runAsUser: 65532}
  containers:
    - name: canary
      image: @IMAGE@
      imagePullPolicy: Never
      command: [python3, -m, http.server, "8080", --directory, /tmp]
      readinessProbe: {tcpSocket: {port: 8080}, periodSeconds: 1}
---
apiVersion: networking.k8s.io/v1
kind: NetworkPolicy
metadata: {name: canary-deny-all}
spec:
  podSelector: {matchLabels: {app: canary}}
  policyTypes: [Ingress]
"""


def wait_enforced(cluster: Cluster, namespace: str) -> float:
    """Wait until a canary pod behind a deny-all policy cannot be reached from another pod of
    its namespace (kube-router writes a new pod's rules within seconds, not at once); the
    seconds it took."""
    started = time.monotonic()
    cluster.kubectl(
        "apply", "-n", namespace, "-f", "-", stdin=CANARY.replace("@IMAGE@", image_names()[0])
    )

    def canary_ready() -> bool:
        found = cluster.kubectl("get", "pod", "canary", "-n", namespace, "-o", "json")
        return pod_ready(json.loads(found))

    wait_for(canary_ready, 120, "the canary Ready")
    ip = cluster.kubectl("get", "pod", "canary", "-n", namespace, "-o", "jsonpath={.status.podIP}")
    attempts = iter(range(1000))

    def refused() -> bool:
        probe = Probe(namespace, f"canary-probe-{next(attempts)}", ip, CANARY_PORT)
        return probe.start(cluster).result(cluster).startswith("closed")

    wait_for(refused, 120, "the canary behind its deny-all policy unreachable", interval=1)
    return time.monotonic() - started


def test_only_the_installations_shards_reach_the_cache_server(
    kind_cluster: Cluster, installation: tuple[str, dict[str, ShardAPI]], tmp_path: Path
) -> None:
    ns, apis = installation
    kubectl = kind_cluster.kubectl
    outside = create_namespace(kind_cluster, "kcp-outsider")
    try:
        policy = json.loads(
            kubectl("get", "networkpolicy", f"{CACHE}-cache", "-n", ns, "-o", "json")
        )
        owners = [(o["kind"], o["name"]) for o in policy["metadata"]["ownerReferences"]]
        assert owners == [("CacheServer", CACHE)]
        assert policy["spec"]["podSelector"]["matchLabels"]["app.kubernetes.io/instance"] == CACHE
        admitted = {"kcpshard.dev/cache-server": CACHE}
        assert policy["spec"]["ingress"][0]["from"] == [{"podSelector": {"matchLabels": admitted}}]
        for shard in SHARDS:
            for pod in pods(kind_cluster, ns, shard):
                assert pod["metadata"]["labels"].get("kcpshard.dev/cache-server") == CACHE
        data = KcpData.create(apis, tmp_path / "data-checks.txt", prefix="policy")

        took = wait_enforced(kind_cluster, outside)
        log(f"NetworkPolicies enforced: a new canary unreachable {took:.0f}s after its apply")
        cache = f"{CACHE}-cache.{ns}.svc"
        probes = [
            Probe(outside, "outsider", cache, CACHE_PORT, PROBE_WINDOW),
            Probe(ns, "unlabelled", cache, CACHE_PORT, PROBE_WINDOW),
            Probe(ns, "labelled", cache, CACHE_PORT, PROBE_WINDOW, admitted),
        ]
        outsider, unlabelled, labelled = [
            p.result(kind_cluster) for p in [p.start(kind_cluster) for p in probes]
        ]
        assert outsider.startswith("closed"), "a pod of another namespace opened the cache server"
        assert unlabelled.startswith("closed"), "an unlabelled pod opened the cache server"
        assert labelled.startswith("open"), "a pod with the shards' label could not open it"

        assert {"tenancy.kcp.io", "shards.core.kcp.io"} <= set(cached_exports(kind_cluster, ns))
        wait_for(lambda: installation_ready(kind_cluster, ns, OLD), START_TIMEOUT, "all Ready", 3)
        data.assert_intact(apis, "with the cache server behind its NetworkPolicy")
    except BaseException:
        print(describe_failure(kind_cluster, ns))
        raise
    finally:
        delete_namespace(kind_cluster, outside)
