"""CacheServer against a real API server: the CRD refuses what the offline rules refuse, the
operator issues and writes it, Shards naming it wait for it, start on its kubeconfig and roll
after it, a shard that reads its identities from it is not restarted while it is down, and
deleting it leaves nothing it owned behind."""

from __future__ import annotations

import base64
import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from testkit.kube import Cluster, KubectlError, delete_shards
from testkit.operator_process import OperatorProcess
from testkit.wait import wait_for

from .shards import (
    Kubectl,
    apply,
    cache_server,
    get,
    kcp_container,
    patch_spec,
    shard,
    wait_ready,
)

pytestmark = pytest.mark.e2e
OLD, NEW = "0.27.1", "0.28.0"


def on_cache(name: str, version: str, **spec: Any) -> dict[str, Any]:
    return shard(name, version, cache={"serverRef": {"name": "cache"}}, **spec)


def cache_ready(kubectl: Kubectl, namespace: str, version: str) -> bool:
    status = get(kubectl, namespace, "cacheserver", "cache").get("status") or {}
    ready = [c for c in status.get("conditions") or [] if c["type"] == "Ready"]
    return status.get("version") == version and bool(ready) and ready[0]["status"] == "True"


def cache_condition(kubectl: Kubectl, namespace: str, type_: str) -> tuple[str, str, str]:
    """(status, reason, message) of the CacheServer's condition ``type_``."""
    status = get(kubectl, namespace, "cacheserver", "cache").get("status") or {}
    for found in status.get("conditions") or []:
        if found["type"] == type_:
            return str(found["status"]), str(found["reason"]), str(found.get("message", ""))
    return "", "", ""


def patch_cache(kubectl: Kubectl, namespace: str, spec: dict[str, Any]) -> None:
    body = json.dumps({"spec": spec})
    kubectl("patch", "-n", namespace, "cacheserver", "cache", "--type=merge", "-p", body)


def template_version(kubectl: Kubectl, namespace: str, name: str) -> str:
    deployment = get(kubectl, namespace, "deployment", name)
    annotations = deployment["spec"]["template"]["metadata"]["annotations"]
    return str(annotations["kcpshard.dev/kcp-version"])


def templates(kubectl: Kubectl, namespace: str) -> dict[str, str]:
    """The kcp version of every Deployment's pod template, from one list."""
    found = json.loads(kubectl("get", "deployments", "-n", namespace, "-o", "json"))
    return {
        item["metadata"]["name"]: str(
            item["spec"]["template"]["metadata"]["annotations"].get("kcpshard.dev/kcp-version")
        )
        for item in found["items"]
    }


def progressing_reason(kubectl: Kubectl, namespace: str, name: str) -> str:
    status = get(kubectl, namespace, "shard", name).get("status") or {}
    found = [c for c in status.get("conditions") or [] if c["type"] == "Progressing"]
    return str(found[0]["reason"]) if found else ""


@pytest.mark.parametrize(
    ("obj", "words"),
    [
        (cache_server("cache", OLD, pki={"issue": False}), "spec.pki.issue false needs"),
        (cache_server("x" * 58, OLD), "metadata.name must be a DNS-1035 label of at most 57"),
        (
            shard(
                "root",
                OLD,
                cache={"serverRef": {"name": "c"}, "kubeconfigSecretRef": {"name": "k"}},
            ),
            "spec.cache.serverRef and spec.cache.kubeconfigSecretRef are both set",
        ),
    ],
)
def test_the_api_server_refuses_what_the_offline_rules_refuse(
    crds: list[str], kubectl: Kubectl, namespace: str, obj: dict[str, Any], words: str
) -> None:
    assert "cacheservers.kcpshard.dev" in crds
    with pytest.raises(KubectlError) as err:
        apply(kubectl, namespace, obj)
    assert words in str(err.value)


def test_shards_start_on_the_cache_server_and_roll_after_it(
    operator_process: Any, kubectl: Kubectl, namespace: str
) -> None:
    apply(kubectl, namespace, on_cache("root", OLD))
    wait_for(
        lambda: progressing_reason(kubectl, namespace, "root") == "CacheServerNotFound",
        60,
        "root shard reports its missing CacheServer",
    )
    apply(kubectl, namespace, cache_server("cache", OLD))
    wait_for(lambda: cache_ready(kubectl, namespace, OLD), 90, "CacheServer Ready")
    apply(kubectl, namespace, on_cache("shard-1", OLD, rootShardRef={"name": "root"}))
    for name in ("root", "shard-1"):
        wait_ready(kubectl, namespace, name, OLD)
    secret = get(kubectl, namespace, "secret", "cache-cache-kubeconfig")
    document = json.loads(base64.b64decode(secret["data"]["kubeconfig"]))
    server = document["clusters"][0]["cluster"]["server"]
    assert server == f"https://cache-cache.{namespace}.svc:6443"
    service = get(kubectl, namespace, "service", "cache-cache")
    assert service["metadata"]["ownerReferences"][0]["kind"] == "CacheServer"
    policy = get(kubectl, namespace, "networkpolicy", "cache-cache")
    assert policy["metadata"]["ownerReferences"][0]["kind"] == "CacheServer"
    admitted = {"kcpshard.dev/cache-server": "cache"}
    assert policy["spec"]["ingress"][0]["from"] == [{"podSelector": {"matchLabels": admitted}}]
    for name in ("root", "shard-1"):
        labels = get(kubectl, namespace, "deployment", f"{name}-kcp")["spec"]["template"]
        assert labels["metadata"]["labels"]["kcpshard.dev/cache-server"] == "cache", name

    def policy_exists() -> bool:
        found = kubectl("get", "networkpolicy", "-n", namespace, "-o", "name").split()
        return "networkpolicy.networking.k8s.io/cache-cache" in found

    patch_cache(kubectl, namespace, {"networkPolicy": {"enabled": False}})
    wait_for(lambda: not policy_exists(), 60, "the NetworkPolicy deleted once turned off")
    patch_cache(kubectl, namespace, {"networkPolicy": None})
    wait_for(policy_exists, 60, "the NetworkPolicy back once turned on")
    for name in ("root", "shard-1"):
        pod = get(kubectl, namespace, "deployment", f"{name}-kcp")["spec"]["template"]["spec"]
        args = pod["containers"][0]["args"]
        assert any(arg.startswith("--cache-kubeconfig=") for arg in args), name
        mounted = {v["secret"]["secretName"] for v in pod["volumes"] if "secret" in v}
        assert "cache-cache-kubeconfig" in mounted, name
    columns = kubectl("get", "cacheservers", "-n", namespace)
    assert columns.split("\n")[0].split()[:4] == ["NAME", "DESIRED", "RUNNING", "READY"]

    # The new cache server cannot be scheduled: the shards must keep running the old kcp.
    patch_cache(kubectl, namespace, {"version": NEW, "nodeSelector": {"kcpshard.dev/e2e": "none"}})
    for name in ("root", "shard-1"):
        patch_spec(kubectl, namespace, name, {"version": NEW})
    wait_for(
        lambda: progressing_reason(kubectl, namespace, "root") == "WaitingForCacheServer",
        60,
        "root waits for the CacheServer",
    )
    held = []
    for _ in range(5):
        time.sleep(1)
        held.append(
            [template_version(kubectl, namespace, f"{name}-kcp") for name in ("root", "shard-1")]
        )
    assert held == [[OLD, OLD]] * 5, "no shard rolls before its CacheServer is Ready"
    assert get(kubectl, namespace, "shard", "root")["status"]["phase"] == "WaitingForCacheServer"

    patch_cache(kubectl, namespace, {"nodeSelector": None})
    order: list[str] = []

    def rolled() -> bool:
        # One list is one consistent read: shard-1 at NEW beside a root still at OLD is the
        # wrong order; two reads in a row could see root's and then shard-1's change.
        versions = templates(kubectl, namespace)
        if "root" not in order and versions["root-kcp"] == NEW:
            assert cache_ready(kubectl, namespace, NEW), "root rolled before the cache server"
            order.append("root")
        if "shard-1" not in order and versions["shard-1-kcp"] == NEW:
            assert "root" in order, "shard-1 rolled before root"
            order.append("shard-1")
        return len(order) == 2

    wait_for(rolled, 180, "root, then shard-1 rolled to the new version")
    for name in ("root", "shard-1"):
        wait_ready(kubectl, namespace, name, NEW)

    # Back to the older minor: refused, the cache server keeps running and serving NEW.
    patch_cache(kubectl, namespace, {"version": OLD})
    wait_for(
        lambda: cache_condition(kubectl, namespace, "Degraded")[:2] == ("True", "DowngradeRefused"),
        60,
        "the CacheServer refuses the downgrade",
    )
    assert template_version(kubectl, namespace, "cache-cache") == NEW
    assert cache_condition(kubectl, namespace, "Ready")[0] == "True"
    message = cache_condition(kubectl, namespace, "Degraded")[2]
    assert f"the cache server stays at kcp {NEW}" in message, message
    patch_cache(kubectl, namespace, {"version": NEW})
    wait_for(
        lambda: cache_condition(kubectl, namespace, "Degraded")[0] == "False",
        60,
        "the CacheServer back at its version, not degraded",
    )

    kubectl("delete", "-n", namespace, "cacheserver", "cache", "--wait=true")
    wait_for(
        lambda: (
            not kubectl(
                "get",
                "deployment,service,secret,networkpolicy",
                "-n",
                namespace,
                "-l",
                "app.kubernetes.io/name=kcp-cache-server",
                "-o",
                "name",
            ).strip()
        ),
        90,
        "the CacheServer's Deployment, Service, NetworkPolicy and Secrets garbage-collected",
    )
    claims = kubectl("get", "pvc", "-n", namespace, "-o", "name")
    assert "cache-cache-data" in claims, "the retained claim of the cache data stays"
    wait_for(
        lambda: progressing_reason(kubectl, namespace, "shard-1") == "CacheServerNotFound",
        60,
        "shard-1 reports its CacheServer gone",
    )
    assert template_version(kubectl, namespace, "shard-1-kcp") == NEW, "nothing was rolled back"


@pytest.fixture
def deprecated_at_old(
    cluster: Cluster, crds: list[str], namespace: str, tmp_path: Path
) -> Iterator[OperatorProcess]:
    """The operator with the deprecating release set to 0.27.0: the kcp the kwok tests run
    reads its APIExport identities from the cache server (as a setting; kwok runs no kcp)."""
    operator = OperatorProcess(
        cluster=cluster,
        args=[
            "--namespace", namespace, "--standalone", "--no-kcp-checks",
            "--root-shard-flag-removed-in", "0.27.0",
        ],
        log_path=tmp_path / "operator.log",
    )  # fmt: skip
    operator.start()
    try:
        yield operator
    finally:
        delete_shards(cluster, namespace, timeout=30)
        operator.stop()


def test_a_shard_reading_identities_from_the_cache_is_not_restarted_while_it_is_down(
    deprecated_at_old: OperatorProcess, kubectl: Kubectl, namespace: str
) -> None:
    apply(kubectl, namespace, cache_server("cache", OLD))
    apply(
        kubectl,
        namespace,
        on_cache("root", OLD),
        on_cache("shard-1", OLD, rootShardRef={"name": "root"}),
    )
    for name in ("root", "shard-1"):
        wait_ready(kubectl, namespace, name, OLD)
    args = kcp_container(kubectl, namespace, "shard-1")["args"]
    assert not any(a.startswith("--root-shard-kubeconfig-file") for a in args)

    # The cache server's new pod cannot be scheduled: it is down.
    patch_cache(kubectl, namespace, {"nodeSelector": {"kcpshard.dev/e2e": "none"}})
    wait_for(lambda: not cache_ready(kubectl, namespace, OLD), 60, "the CacheServer not Ready")
    patch_spec(kubectl, namespace, "shard-1", {"extraArgs": ["--v=4"]})
    wait_for(
        lambda: progressing_reason(kubectl, namespace, "shard-1") == "WaitingForCacheServer",
        60,
        "shard-1 waits for its cache server",
    )
    message = next(
        c["message"]
        for c in get(kubectl, namespace, "shard", "shard-1")["status"]["conditions"]
        if c["type"] == "Progressing"
    )
    assert "reads the APIExport identities from CacheServer cache, which is not" in message
    time.sleep(5)
    assert "--v=4" not in kcp_container(kubectl, namespace, "shard-1")["args"]

    patch_cache(kubectl, namespace, {"nodeSelector": None})
    wait_for(
        lambda: "--v=4" in kcp_container(kubectl, namespace, "shard-1")["args"],
        90,
        "shard-1 rolled once its cache server is Ready again",
    )
    assert cache_ready(kubectl, namespace, OLD), "shard-1 rolled before the cache server was back"
