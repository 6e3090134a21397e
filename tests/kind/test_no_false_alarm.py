"""No false alarm on real pods: the samples coming up, and ``kubectl rollout restart`` of every
Deployment, post no Warning Event and change ``Degraded`` on no object (issue 33's acceptance
check on kind). It shares the demo's cluster (the session's ``demo`` fixture) and runs before
the demo's own tests, which then run on the restarted installation.

Before the front-proxy's routing probe had a settling window after a rollout it failed
intermittently with ``FrontProxy/kcp Unreachable: ... Connection refused``; before the store
and status work, every time with ``FrontProxy/kcp SecretNotFound``.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from testkit.kcpdata import KcpData
from testkit.kube import Cluster
from testkit.tools import log
from testkit.wait import wait_for

from .durability import (
    admin_kubeconfig,
    front_proxy_kubeconfig,
    pod_names,
    shard_apis,
    wait_replaced,
)
from .test_demo import DEMO_NAMESPACE, condition, status_of

pytestmark = [pytest.mark.e2e, pytest.mark.kind]

OPERATED_KINDS = ("Shard", "CacheServer", "FrontProxy")
SAMPLES = {"shard": ("root", "shard-1"), "cacheserver": ("cache",), "frontproxy": ("kcp",)}
QUIET_TIMEOUT = 420


def operator_warnings(cluster: Cluster, namespace: str) -> list[str]:
    """The Warning Events the operator posted on its objects in ``namespace``."""
    events = json.loads(
        cluster.kubectl(
            "get", "events", "-n", namespace, "--field-selector", "type=Warning", "-o", "json"
        )
    )["items"]
    return sorted(
        f"{e['involvedObject']['kind']}/{e['involvedObject']['name']} {e['reason']}: "
        f"{e.get('message', '')} (x{e.get('count', 1)})"
        for e in events
        if e["involvedObject"]["kind"] in OPERATED_KINDS
    )


def degraded_history(cluster: Cluster, namespace: str) -> dict[str, tuple[str, str]]:
    """Each sample object's ``Degraded`` status and its last transition: a flip to True and
    back between two reads shows as a later transition time."""
    history = {}
    for kind, names in SAMPLES.items():
        for name in names:
            degraded = condition(status_of(cluster, namespace, kind, name), "Degraded")
            history[f"{kind}/{name}"] = (degraded["status"], degraded["lastTransitionTime"])
    return history


def all_ready(cluster: Cluster, namespace: str) -> bool:
    return all(
        status_of(cluster, namespace, kind, name).get("phase") == "Ready"
        for kind, names in SAMPLES.items()
        for name in names
    )


def test_samples_and_a_restart_of_every_pod_raise_no_false_alarm(
    demo: Cluster, tmp_path: Path
) -> None:
    """Applying the samples, and then ``kubectl rollout restart`` of every Deployment, posts
    no Warning Event and sets ``Degraded`` on no object: a healthy start or restart pages
    nobody. The workspaces made before the restart are there after it."""
    ns = DEMO_NAMESPACE
    assert operator_warnings(demo, ns) == [], "Warnings while the samples came up"
    before = degraded_history(demo, ns)
    assert {status for status, _ in before.values()} == {"False"}, before
    kubeconfig = admin_kubeconfig(demo, ns, "root", tmp_path)
    shards = ("root", "shard-1")
    front = ("kcp-front-proxy", front_proxy_kubeconfig(demo, ns, tmp_path))
    with shard_apis(demo, ns, kubeconfig, shards, front) as apis:
        data = KcpData.create(apis, tmp_path / "data-checks.txt", prefix="restart")
        old_pods = {name: pod_names(demo, ns, name) for name in shards}
        started = time.monotonic()
        demo.kubectl("rollout", "restart", "deployment", "-n", ns)
        for name in shards:
            wait_replaced(demo, ns, name, old_pods[name], 1, QUIET_TIMEOUT)
        for deployment in ("cache-cache", "kcp-front-proxy"):
            demo.kubectl(
                "rollout", "status", "-n", ns, f"deployment/{deployment}",
                f"--timeout={QUIET_TIMEOUT}s", timeout=QUIET_TIMEOUT + 30,
            )  # fmt: skip
        wait_for(lambda: all_ready(demo, ns), QUIET_TIMEOUT, "every sample object Ready", 2)
        took = time.monotonic() - started
        log(f"every Deployment restarted and every object Ready in {took:.0f}s")
        data.assert_intact(apis, "after every pod was restarted")
    assert operator_warnings(demo, ns) == [], "Warnings after kubectl rollout restart"
    assert degraded_history(demo, ns) == before, "Degraded changed during the restart"
