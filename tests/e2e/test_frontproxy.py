"""FrontProxy against a real API server: the CRD refuses what the offline rules refuse, the
operator starts it once its root is Ready, writes its children and the shards' trust in it,
rolls it only after every shard of its installation has rolled, and deleting it leaves
nothing it owned behind (the shards go back to running without it)."""

from __future__ import annotations

import json
import time
from typing import Any

import pytest
import yaml

from testkit.kube import KubectlError
from testkit.wait import wait_for

from .shards import (
    Kubectl,
    apply,
    front_proxy,
    get,
    kcp_container,
    patch_spec,
    shard,
    wait_ready,
)

pytestmark = pytest.mark.e2e
OLD, NEW = "0.27.1", "0.28.0"
PROXY_LABEL = "app.kubernetes.io/name=kcp-front-proxy"


def proxy_status(kubectl: Kubectl, namespace: str) -> dict[str, Any]:
    return dict(get(kubectl, namespace, "frontproxy", "kcp").get("status") or {})


def condition(status: dict[str, Any], type_: str) -> dict[str, Any]:
    return next((c for c in status.get("conditions") or [] if c["type"] == type_), {})


def template_version(kubectl: Kubectl, namespace: str, deployment: str) -> str:
    found = get(kubectl, namespace, "deployment", deployment)
    return str(found["spec"]["template"]["metadata"]["annotations"]["kcpshard.dev/kcp-version"])


def patch_proxy(kubectl: Kubectl, namespace: str, spec: dict[str, Any]) -> None:
    body = json.dumps({"spec": spec})
    kubectl("patch", "-n", namespace, "frontproxy", "kcp", "--type=merge", "-p", body)


@pytest.mark.parametrize(
    ("obj", "words"),
    [
        (
            front_proxy("kcp", OLD, pki={"issue": False}),
            "spec.pki.issue false needs spec.kubeconfigSecretRef",
        ),
        (front_proxy("x" * 52, OLD), "metadata.name must be a DNS-1035 label of at most 51"),
        (front_proxy("kcp", OLD, externalURL="kcp.example.com"), "spec.externalURL must be"),
        (front_proxy("kcp", OLD, replicas=0), "spec.replicas"),
    ],
)
def test_the_api_server_refuses_what_the_offline_rules_refuse(
    crds: list[str], kubectl: Kubectl, namespace: str, obj: dict[str, Any], words: str
) -> None:
    assert "frontproxies.kcpshard.dev" in crds
    with pytest.raises(KubectlError) as err:
        apply(kubectl, namespace, obj)
    assert words in str(err.value)


def test_the_root_of_a_front_proxy_cannot_be_changed(
    crds: list[str], kubectl: Kubectl, namespace: str
) -> None:
    apply(kubectl, namespace, front_proxy("kcp", OLD))
    with pytest.raises(KubectlError) as err:
        patch_proxy(kubectl, namespace, {"rootShardRef": {"name": "other"}})
    assert "spec.rootShardRef cannot be changed after creation" in str(err.value)


def test_the_front_proxy_starts_after_its_root_and_rolls_after_every_shard(
    operator_process: Any, kubectl: Kubectl, namespace: str
) -> None:
    apply(kubectl, namespace, front_proxy("kcp", OLD))
    wait_for(
        lambda: (
            condition(proxy_status(kubectl, namespace), "Degraded").get("reason")
            == "RootShardNotFound"
        ),
        60,
        "the FrontProxy reports its missing root Shard",
    )
    apply(
        kubectl,
        namespace,
        shard("root", OLD),
        shard("shard-1", OLD, rootShardRef={"name": "root"}),
    )
    for name in ("root", "shard-1"):
        wait_ready(kubectl, namespace, name, OLD)
    wait_for(
        lambda: proxy_status(kubectl, namespace).get("phase") == "Ready",
        90,
        "the FrontProxy Ready",
    )
    status = proxy_status(kubectl, namespace)
    url = f"https://kcp-front-proxy.{namespace}.svc:6443"
    assert (status["version"], status["url"], status["readyReplicas"]) == (OLD, url, 2)
    assert condition(status, "Routing")["reason"] == "NotVerified", "kwok runs no kcp"
    deployment = get(kubectl, namespace, "deployment", "kcp-front-proxy")
    assert deployment["spec"]["replicas"] == 2
    assert deployment["metadata"]["ownerReferences"][0]["kind"] == "FrontProxy"
    assert get(kubectl, namespace, "pdb", "kcp-front-proxy")["spec"]["maxUnavailable"] == 1
    mapping = get(kubectl, namespace, "configmap", "kcp-front-proxy-mapping")
    backends = {m["backend"] for m in yaml.safe_load(mapping["data"]["mapping.yaml"])}
    assert backends == {f"https://root-kcp.{namespace}.svc:6443"}
    for name in ("root", "shard-1"):
        args = kcp_container(kubectl, namespace, name)["args"]
        assert f"--shard-external-url={url}" in args, name
        assert any(a.startswith("--requestheader-client-ca-file=") for a in args), name
    header = kubectl("get", "shards,cacheservers,frontproxies", "-n", namespace).splitlines()
    proxy_row = next(line for line in header if line.startswith("frontproxy.kcpshard.dev/kcp"))
    assert proxy_row.split()[1:6] == ["root", OLD, OLD, "True", "Unknown"]

    # shard-1's new pods cannot be scheduled: the front-proxy must stay at the old kcp.
    patch_spec(kubectl, namespace, "root", {"version": NEW})
    patch_spec(
        kubectl, namespace, "shard-1", {"version": NEW, "nodeSelector": {"kcpshard.dev/e2e": "no"}}
    )
    patch_proxy(kubectl, namespace, {"version": NEW})
    wait_for(
        lambda: proxy_status(kubectl, namespace).get("phase") == "WaitingForShards",
        90,
        "the FrontProxy waits for its shards",
    )
    held = []
    for _ in range(5):
        time.sleep(1)
        held.append(template_version(kubectl, namespace, "kcp-front-proxy"))
    assert held == [OLD] * 5, "the front-proxy does not roll before every shard has"
    assert (
        "shard-1 runs kcp 0.27.1"
        in condition(proxy_status(kubectl, namespace), "Progressing")["message"]
    )

    patch_spec(kubectl, namespace, "shard-1", {"nodeSelector": None})

    def rolled_after_shard_1() -> bool:
        if template_version(kubectl, namespace, "kcp-front-proxy") != NEW:
            return False
        shard_1 = get(kubectl, namespace, "shard", "shard-1")["status"]
        assert shard_1.get("version") == NEW, "the front-proxy rolled before shard-1 had"
        return True

    wait_for(rolled_after_shard_1, 180, "the front-proxy rolled after shard-1")
    wait_for(
        lambda: proxy_status(kubectl, namespace).get("version") == NEW,
        90,
        "the FrontProxy rolled out at the new kcp",
    )

    kubectl("delete", "-n", namespace, "frontproxy", "kcp", "--wait=true")
    wait_for(
        lambda: not kubectl(
            "get", "deployment,service,configmap,pdb,secret", "-n", namespace,
            "-l", PROXY_LABEL, "-o", "name",
        ).strip(),
        90,
        "the FrontProxy's children and Secrets garbage-collected",
    )  # fmt: skip

    def back_without_it() -> bool:
        args = kcp_container(kubectl, namespace, "root")["args"]
        return not any(a.startswith("--requestheader-client-ca-file=") for a in args)

    wait_for(back_without_it, 60, "the root shard rendered without the front-proxy")
