"""The e2e cluster itself: real control plane at the pinned version, kwok nodes and pods."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from testkit.kube import Cluster, KubectlError, apply_crds, condition
from testkit.tools import pinned_version
from testkit.wait import wait_for

pytestmark = pytest.mark.e2e

DEPLOYMENT = """
apiVersion: apps/v1
kind: Deployment
metadata:
  name: probe
spec:
  replicas: 2
  selector:
    matchLabels: {app: probe}
  template:
    metadata:
      labels: {app: probe}
    spec:
      containers:
      - name: probe
        image: registry.k8s.io/pause:3.10
"""

WIDGET_CRD = """
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: widgets.e2e.kcpshard.dev
spec:
  group: e2e.kcpshard.dev
  names: {kind: Widget, plural: widgets, singular: widget, listKind: WidgetList}
  scope: Namespaced
  versions:
  - name: v1
    served: true
    storage: true
    schema:
      openAPIV3Schema:
        type: object
        properties:
          spec:
            type: object
            properties:
              size: {type: integer}
"""


def get_json(cluster: Cluster, *args: str) -> Any:
    return json.loads(cluster.kubectl("get", *args, "-o", "json"))


def test_control_plane_has_pinned_version_and_ready_nodes(cluster: Cluster) -> None:
    pinned = pinned_version("KUBERNETES_VERSION")
    assert json.loads(cluster.kubectl("get", "--raw", "/version"))["gitVersion"] == pinned
    client = json.loads(cluster.kubectl("version", "--client", "-o", "json"))
    assert client["clientVersion"]["gitVersion"] == pinned
    nodes = get_json(cluster, "nodes")["items"]
    assert nodes, "no nodes registered"
    assert all(condition(n, "Ready").get("status") == "True" for n in nodes), nodes


def test_deployment_rolls_out_and_is_garbage_collected(cluster: Cluster, namespace: str) -> None:
    ns = ("-n", namespace)
    cluster.kubectl("apply", *ns, "-f", "-", stdin=DEPLOYMENT)
    cluster.kubectl("rollout", "status", *ns, "deployment/probe", "--timeout=120s")

    pods = get_json(cluster, "pods", *ns, "-l", "app=probe")["items"]
    assert len(pods) == 2
    for pod in pods:
        assert pod["status"]["phase"] == "Running"
        assert condition(pod, "Ready").get("status") == "True"
        assert pod["spec"]["nodeName"], "pod not scheduled: is kube-scheduler running?"
    replicasets = get_json(cluster, "replicasets", *ns, "-l", "app=probe")["items"]
    assert len(replicasets) == 1
    deployment_uid = get_json(cluster, "deployment/probe", *ns)["metadata"]["uid"]
    assert replicasets[0]["metadata"]["ownerReferences"][0]["uid"] == deployment_uid

    cluster.kubectl("delete", *ns, "deployment/probe", "--cascade=background", "--wait=false")

    def children_gone() -> bool:
        left = cluster.kubectl("get", "replicasets,pods", *ns, "-l", "app=probe", "-o", "name")
        return left.strip() == ""

    wait_for(children_gone, 60, "the garbage collector to delete the ReplicaSet and its pods")


def test_apply_crds_waits_until_established(
    cluster: Cluster, namespace: str, tmp_path: Path
) -> None:
    crd_file = tmp_path / "widgets.yaml"
    crd_file.write_text(WIDGET_CRD)
    try:
        assert apply_crds(cluster, crd_file) == ["widgets.e2e.kcpshard.dev"]
        widget = (
            "apiVersion: e2e.kcpshard.dev/v1\nkind: Widget\nmetadata: {name: w}\nspec: {size: 3}\n"
        )
        cluster.kubectl("apply", "-n", namespace, "-f", "-", stdin=widget)
        assert get_json(cluster, "widgets/w", "-n", namespace)["spec"] == {"size": 3}
        bad = widget.replace("size: 3", "size: three")
        with pytest.raises(KubectlError, match="size"):
            cluster.kubectl("apply", "-n", namespace, "-f", "-", stdin=bad)
    finally:
        cluster.kubectl("delete", "-f", str(crd_file), "--ignore-not-found")
