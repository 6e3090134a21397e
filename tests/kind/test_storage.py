"""kind's default StorageClass provisions node-local volumes dynamically, offline.

The node image ships kind's own storage manifest with local images (hack/kind/images.sh):
local-path-provisioner built from its Go module, its helper pod on Debian's static busybox.
A claim of the default class binds, a non-root pod with a read-only root filesystem writes to
it, a second pod reads the file back, and deleting the claim deletes the volume and its
directory on the node. Without a working provisioner the claim stays Pending and this fails.
"""

from __future__ import annotations

import json
import secrets
import subprocess
import time
from collections.abc import Iterator
from typing import Any

import pytest
import yaml

from testkit.kube import Cluster, create_namespace, delete_namespace
from testkit.tools import log
from testkit.wait import wait_for

pytestmark = [pytest.mark.e2e, pytest.mark.kind]

PROVISIONER = "rancher.io/local-path"
DEFAULT_CLASS_ANNOTATION = "storageclass.kubernetes.io/is-default-class"
NONROOT = 65532
BIND_TIMEOUT = 120


@pytest.fixture
def storage_namespace(kind_cluster: Cluster) -> Iterator[str]:
    name = create_namespace(kind_cluster, "kind-storage")
    yield name
    delete_namespace(kind_cluster, name)


def get_json(cluster: Cluster, *args: str) -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads(cluster.kubectl("get", *args, "-o", "json"))
    return loaded


def helper_image(cluster: Cluster) -> str:
    """The provisioner's helper image (a static busybox): pre-loaded in the node, so the test
    pods need no registry either."""
    config = get_json(cluster, "configmap", "local-path-config", "-n", "local-path-storage")
    image: str = yaml.safe_load(config["data"]["helperPod.yaml"])["spec"]["containers"][0]["image"]
    return image


def nonroot_pod(name: str, claim: str, image: str, script: str) -> dict[str, Any]:
    """A pod as the operator's shards run: uid/gid/fsGroup 65532, read-only root filesystem,
    no capabilities; ``script`` runs in busybox sh (applets as ``busybox NAME``: the image
    links only sh, mkdir and rm) with the claim on /data."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name},
        "spec": {
            "restartPolicy": "Never",
            "securityContext": {
                "runAsNonRoot": True,
                "runAsUser": NONROOT,
                "runAsGroup": NONROOT,
                "fsGroup": NONROOT,
                "seccompProfile": {"type": "RuntimeDefault"},
            },
            "containers": [
                {
                    "name": "probe",
                    "image": image,
                    "imagePullPolicy": "Never",
                    "command": ["/bin/busybox", "sh", "-c", script],
                    "securityContext": {
                        "readOnlyRootFilesystem": True,
                        "allowPrivilegeEscalation": False,
                        "capabilities": {"drop": ["ALL"]},
                    },
                    "volumeMounts": [{"name": "data", "mountPath": "/data"}],
                }
            ],
            "volumes": [{"name": "data", "persistentVolumeClaim": {"claimName": claim}}],
        },
    }


def run_to_completion(cluster: Cluster, ns: str, pod: dict[str, Any]) -> str:
    """Create ``pod``, wait until its claim is bound and it succeeded, return its log, delete it."""
    name = pod["metadata"]["name"]
    claim = pod["spec"]["volumes"][0]["persistentVolumeClaim"]["claimName"]
    cluster.kubectl("apply", "-n", ns, "-f", "-", stdin=json.dumps(pod))

    def bound() -> bool:
        phase: str | None = get_json(cluster, "pvc", claim, "-n", ns).get("status", {}).get("phase")
        return phase == "Bound"

    wait_for(bound, BIND_TIMEOUT, f"claim {ns}/{claim} Bound by the default class's provisioner")

    def finished() -> str | None:
        phase: str | None = get_json(cluster, "pod", name, "-n", ns).get("status", {}).get("phase")
        return phase if phase in ("Succeeded", "Failed") else None

    phase = wait_for(finished, BIND_TIMEOUT, f"pod {ns}/{name} to finish")
    output = cluster.kubectl("logs", "-n", ns, name)
    assert phase == "Succeeded", f"pod {name} {phase}: {output}"
    cluster.kubectl("delete", "pod", "-n", ns, name, "--wait=true", timeout=90)
    return output


def node_has_dir(node: str, path: str) -> bool:
    return subprocess.run(["docker", "exec", node, "test", "-d", path], check=False).returncode == 0


def test_default_class_provisions_a_volume_a_nonroot_pod_keeps_and_the_claim_deletes(
    kind_cluster: Cluster, storage_namespace: str
) -> None:
    ns = storage_namespace
    classes = get_json(kind_cluster, "storageclass")["items"]
    defaults = [
        c
        for c in classes
        if c["metadata"].get("annotations", {}).get(DEFAULT_CLASS_ANNOTATION) == "true"
    ]
    assert [(c["metadata"]["name"], c["provisioner"], c["reclaimPolicy"]) for c in defaults] == [
        ("standard", PROVISIONER, "Delete")
    ], classes

    started = time.monotonic()
    claim = {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": {"name": "data"},
        "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "64Mi"}}},
    }
    kind_cluster.kubectl("apply", "-n", ns, "-f", "-", stdin=json.dumps(claim))
    image = helper_image(kind_cluster)
    token = secrets.token_hex(8)
    write = f"echo {token} >/data/token && busybox id -u && busybox id -g"
    written = run_to_completion(kind_cluster, ns, nonroot_pod("writer", "data", image, write))
    assert written.split() == [str(NONROOT), str(NONROOT)], written
    pvc = get_json(kind_cluster, "pvc", "data", "-n", ns)
    assert pvc["status"]["phase"] == "Bound", pvc
    assert pvc["spec"]["storageClassName"] == "standard", pvc
    volume = pvc["spec"]["volumeName"]
    pv = get_json(kind_cluster, "pv", volume)
    path = (pv["spec"].get("hostPath") or pv["spec"]["local"])["path"]
    node = pv["spec"]["nodeAffinity"]["required"]["nodeSelectorTerms"][0]["matchExpressions"][0]
    node_name = node["values"][0]
    log(f"claim bound to {volume} at {node_name}:{path} in {time.monotonic() - started:.0f}s")
    assert node_has_dir(node_name, path), f"no directory {path} on node {node_name}"

    read_back = "busybox cat /data/token && busybox stat -c '%u %g' /data/token"
    read = run_to_completion(kind_cluster, ns, nonroot_pod("reader", "data", image, read_back))
    assert read.split() == [token, str(NONROOT), str(NONROOT)], read

    started = time.monotonic()
    kind_cluster.kubectl("delete", "pvc", "data", "-n", ns, "--wait=true", timeout=90)

    def volume_gone() -> bool:
        listed = get_json(kind_cluster, "pv")["items"]
        return all(p["metadata"]["name"] != volume for p in listed) and not node_has_dir(
            node_name, path
        )

    wait_for(volume_gone, BIND_TIMEOUT, f"volume {volume} and {node_name}:{path} to be deleted")
    log(f"volume {volume} and its directory gone {time.monotonic() - started:.0f}s after the claim")
