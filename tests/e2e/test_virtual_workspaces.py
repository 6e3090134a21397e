"""VirtualWorkspaceServer against a real API server: the CRD refuses what the offline rules
refuse, the operator starts a server once its Shard is Ready, writes its children, switches
the shard's virtual workspaces to it once it is Ready (and the front-proxy's ``/services/``
to the root's), and deleting it puts the shard back to running them in-process."""

from __future__ import annotations

import json
from functools import partial
from typing import Any

import pytest
import yaml

from testkit.kube import KubectlError
from testkit.wait import wait_for

from .shards import Kubectl, apply, front_proxy, get, kcp_container, shard, wait_ready

pytestmark = pytest.mark.e2e
VERSION = "0.27.1"
STANDALONE = "--run-virtual-workspaces=false"
SERVER_LABEL = "app.kubernetes.io/name=kcp-virtual-workspaces"


def server(name: str, version: str, **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "kcpshard.dev/v1alpha1",
        "kind": "VirtualWorkspaceServer",
        "metadata": {"name": name},
        "spec": {"version": version, "shardRef": {"name": name}, **spec},
    }


def status(kubectl: Kubectl, namespace: str, name: str) -> dict[str, Any]:
    return dict(get(kubectl, namespace, "vws", name).get("status") or {})


def condition(found: dict[str, Any], type_: str) -> dict[str, Any]:
    return next((c for c in found.get("conditions") or [] if c["type"] == type_), {})


@pytest.mark.parametrize(
    ("obj", "words"),
    [
        (server("shard-1", VERSION, pki={"issue": False}), "spec.pki.issue false is not supported"),
        (server("x" * 61, VERSION), "metadata.name must be a DNS-1035 label of at most 60"),
        (server("shard-1", VERSION, replicas=0), "spec.replicas"),
    ],
)
def test_the_api_server_refuses_what_the_offline_rules_refuse(
    crds: list[str], kubectl: Kubectl, namespace: str, obj: dict[str, Any], words: str
) -> None:
    assert "virtualworkspaceservers.kcpshard.dev" in crds
    with pytest.raises(KubectlError) as err:
        apply(kubectl, namespace, obj)
    assert words in str(err.value)


def test_the_shard_of_a_server_cannot_be_changed(
    crds: list[str], kubectl: Kubectl, namespace: str
) -> None:
    apply(kubectl, namespace, server("shard-1", VERSION))
    body = json.dumps({"spec": {"shardRef": {"name": "other"}}})
    with pytest.raises(KubectlError) as err:
        kubectl("patch", "-n", namespace, "vws", "shard-1", "--type=merge", "-p", body)
    assert "spec.shardRef cannot be changed after creation" in str(err.value)


def test_servers_take_over_their_shards_virtual_workspaces_and_give_them_back(
    operator_process: Any, kubectl: Kubectl, namespace: str
) -> None:
    apply(kubectl, namespace, server("root", VERSION), server("shard-1", VERSION))
    wait_for(
        lambda: (
            condition(status(kubectl, namespace, "shard-1"), "Degraded").get("reason")
            == "ShardNotFound"
        ),
        60,
        "the VirtualWorkspaceServer reports its missing Shard",
    )
    apply(
        kubectl,
        namespace,
        shard("root", VERSION),
        shard("shard-1", VERSION, rootShardRef={"name": "root"}),
        front_proxy("kcp", VERSION),
    )

    def server_ready(name: str) -> bool:
        return status(kubectl, namespace, name).get("phase") == "Ready"

    def switched(name: str) -> bool:
        return STANDALONE in kcp_container(kubectl, namespace, name)["args"]

    for name in ("root", "shard-1"):
        wait_for(partial(server_ready, name), 120, f"the VirtualWorkspaceServer {name} Ready")
    for name in ("root", "shard-1"):
        wait_for(partial(switched, name), 90, f"Shard {name} switched to its server")
        wait_ready(kubectl, namespace, name, VERSION)
        args = kcp_container(kubectl, namespace, name)["args"]
        url = f"https://{name}-vw.{namespace}.svc:6443"
        assert f"--shard-virtual-workspace-url={url}" in args
        assert f"--external-hostname={name}-kcp.{namespace}.svc" in args
        assert "--shard-client-cert-file=/etc/kcp/tls/shard-client/tls.crt" in args
        found = status(kubectl, namespace, name)
        assert (found["version"], found["url"], found["readyReplicas"]) == (VERSION, url, 2)
        deployment = get(kubectl, namespace, "deployment", f"{name}-vw")
        assert deployment["spec"]["replicas"] == 2
        assert deployment["metadata"]["ownerReferences"][0]["kind"] == "VirtualWorkspaceServer"
        container = deployment["spec"]["template"]["spec"]["containers"][0]
        assert container["command"] == ["/virtual-workspaces"]
        assert (
            f"--shard-external-url=https://kcp-front-proxy.{namespace}.svc:6443"
            in (container["args"])
        )
        assert get(kubectl, namespace, "pdb", f"{name}-vw")["spec"]["maxUnavailable"] == 1
        for secret in (f"{name}-vw-serving", f"{name}-vw-kubeconfig", f"{name}-kcp-shard-client"):
            get(kubectl, namespace, "secret", secret)

    def mapped() -> bool:
        mapping = get(kubectl, namespace, "configmap", "kcp-front-proxy-mapping")
        entries = yaml.safe_load(mapping["data"]["mapping.yaml"])
        backends = {entry["path"]: entry["backend"] for entry in entries}
        return bool(backends["/services/"] == f"https://root-vw.{namespace}.svc:6443")

    wait_for(mapped, 90, "the front-proxy's /services/ sent to the root's server")
    rows = kubectl("get", "vws", "-n", namespace).splitlines()
    assert rows[0].split() == [
        "NAME",
        "SHARD",
        "DESIRED",
        "RUNNING",
        "READY",
        "PHASE",
        "URL",
        "AGE",
    ]
    row = next(line for line in rows if line.startswith("shard-1 "))
    assert row.split()[1:7] == [
        "shard-1",
        VERSION,
        VERSION,
        "True",
        "Ready",
        f"https://shard-1-vw.{namespace}.svc:6443",
    ]

    kubectl("delete", "-n", namespace, "vws", "shard-1", "--wait=true", timeout=180)
    # The server went only once shard-1 had rolled out running them itself again.
    assert not switched("shard-1"), "shard-1 runs its virtual workspaces again"
    rollout = get(kubectl, namespace, "deployment", "shard-1-kcp")["status"]
    assert rollout.get("updatedReplicas") == rollout.get("replicas") == rollout.get("readyReplicas")
    wait_ready(kubectl, namespace, "shard-1", VERSION)
    args = kcp_container(kubectl, namespace, "shard-1")["args"]
    assert not any("virtual-workspace" in arg for arg in args)
    wait_for(
        lambda: not kubectl(
            "get", "deployment,service,pdb,secret", "-n", namespace,
            "-l", f"{SERVER_LABEL},app.kubernetes.io/instance=shard-1", "-o", "name",
        ).strip(),
        90,
        "the server's children and Secrets garbage-collected",
    )  # fmt: skip
    assert switched("root"), "the root keeps its server"
