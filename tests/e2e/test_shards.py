"""The operator against a real API server: rollouts, ordering, drift, GC, validation."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import yaml

from kcp_shard_operator.controller.handlers import FINALIZER
from testkit.kube import KubectlError, condition
from testkit.metrics import api_request_totals, writes_between
from testkit.operator_process import CHILD_RESOURCES, RESYNC_WINDOW, OperatorProcess
from testkit.wait import wait_for
from tests.numeric_hash import numeric_hash_shard

from .shards import (
    Kubectl,
    apply,
    events,
    get,
    kcp_container,
    patch_spec,
    placeholder_secrets,
    shard,
    wait_ready,
    wait_settled,
)

pytestmark = pytest.mark.e2e
ROOT_FLAG = "--root-shard-kubeconfig-file"
HASH = "kcpshard.dev/config-hash"
GOLDEN = Path(__file__).parent.parent / "golden" / "migrate"


NON_ROOT_SECRETS = ("cache-kubeconfig", "root-admin-kubeconfig")


@pytest.fixture(autouse=True)
def non_root_secrets(kubectl: Kubectl, namespace: str) -> None:
    """The Secrets :func:`non_root` names."""
    placeholder_secrets(kubectl, namespace, *NON_ROOT_SECRETS)


def non_root(name: str, version: str, **spec: Any) -> dict[str, Any]:
    fields: dict[str, Any] = {
        "rootShardRef": {"name": "root"},
        "cache": {"kubeconfigSecretRef": {"name": "cache-kubeconfig"}},
        "rootShardKubeconfigSecretRef": {"name": "root-admin-kubeconfig"},
    }
    fields.update(spec)
    return shard(name, version, **fields)


def template_version(kubectl: Kubectl, ns: str, name: str) -> str:
    dep = get(kubectl, ns, "deployment", f"{name}-kcp")
    return str(dep["spec"]["template"]["metadata"]["annotations"]["kcpshard.dev/kcp-version"])


def test_shards_roll_out_and_report_ready(
    operator_process: OperatorProcess, kubectl: Kubectl, namespace: str
) -> None:
    apply(kubectl, namespace, shard("root", "0.32.3"), non_root("shard-1", "0.32.3"))
    wait_ready(kubectl, namespace, "root", "0.32.3")
    wait_ready(kubectl, namespace, "shard-1", "0.32.3")
    dep = get(kubectl, namespace, "deployment", "shard-1-kcp")
    args = dep["spec"]["template"]["spec"]["containers"][0]["args"]
    assert f"{ROOT_FLAG}=/etc/kcp/root-shard/kubeconfig" in args
    assert dep["metadata"]["ownerReferences"][0]["name"] == "shard-1"
    assert get(kubectl, namespace, "service", "shard-1-kcp")["spec"]["ports"][0]["port"] == 6443
    printed = kubectl("get", "shards", "-n", namespace)
    assert "RUNNING" in printed.splitlines()[0]
    assert "0.32.3" in printed


def test_version_change_rolls_the_deployment(
    operator_process: OperatorProcess, kubectl: Kubectl, namespace: str
) -> None:
    apply(
        kubectl,
        namespace,
        shard("root", "0.32.3", replicas=2, etcd={"endpoints": ["https://e:2379"]}),
    )
    wait_ready(kubectl, namespace, "root", "0.32.3")
    assert get(kubectl, namespace, "pdb", "root-kcp")["spec"]["maxUnavailable"] == 1
    patch_spec(kubectl, namespace, "root", {"version": "0.34.0"})
    wait_ready(kubectl, namespace, "root", "0.34.0")
    assert kcp_container(kubectl, namespace, "root")["image"].endswith(":v0.34.0")
    assert "RolledOut" in events(kubectl, namespace, "root")


def test_non_root_waits_for_its_root(
    operator_process: OperatorProcess, kubectl: Kubectl, namespace: str
) -> None:
    apply(kubectl, namespace, shard("root", "0.32.3"), non_root("shard-1", "0.32.3"))
    wait_ready(kubectl, namespace, "root", "0.32.3")
    wait_ready(kubectl, namespace, "shard-1", "0.32.3")
    # The root's new pods cannot be scheduled: its rollout stays incomplete.
    patch_spec(kubectl, namespace, "root", {"version": "0.34.0", "nodeSelector": {"pool": "none"}})
    patch_spec(kubectl, namespace, "shard-1", {"version": "0.34.0"})

    def waiting() -> bool:
        cond = condition(get(kubectl, namespace, "shard", "shard-1"), "Progressing")
        return cond.get("reason") == "WaitingForRootShard"

    wait_for(waiting, 60, "shard-1 to wait for its root shard")
    held = get(kubectl, namespace, "deployment", "shard-1-kcp")["metadata"]["generation"]
    # Still waiting after at least one resync pass: no pass rolled shard-1 meanwhile.
    time.sleep(RESYNC_WINDOW)
    assert get(kubectl, namespace, "deployment", "shard-1-kcp")["metadata"]["generation"] == held
    assert template_version(kubectl, namespace, "shard-1") == "0.32.3"
    assert get(kubectl, namespace, "shard", "root")["status"]["version"] == "0.32.3"
    assert get(kubectl, namespace, "shard", "shard-1")["status"]["phase"] == "WaitingForRootShard"
    assert "WaitingForRootShard" in events(kubectl, namespace, "shard-1")
    # A hand edit is still put back while waiting, at the version the shard runs now.
    kubectl("scale", "-n", namespace, "deployment", "shard-1-kcp", "--replicas=3")
    wait_for(
        lambda: get(kubectl, namespace, "deployment", "shard-1-kcp")["spec"]["replicas"] == 1,
        60,
        "the waiting shard's Deployment to be scaled back",
    )
    assert template_version(kubectl, namespace, "shard-1") == "0.32.3"

    kubectl(
        "patch",
        "-n",
        namespace,
        "shard",
        "root",
        "--type=json",
        "-p",
        '[{"op": "remove", "path": "/spec/nodeSelector"}]',
    )
    wait_ready(kubectl, namespace, "root", "0.34.0")
    wait_ready(kubectl, namespace, "shard-1", "0.34.0")
    args = kcp_container(kubectl, namespace, "shard-1")["args"]
    assert not any(a.startswith(ROOT_FLAG) for a in args)


def test_deprecated_flag_in_extra_args_is_dropped(
    operator_process: OperatorProcess, kubectl: Kubectl, namespace: str
) -> None:
    apply(
        kubectl,
        namespace,
        shard("root", "0.34.0"),
        non_root("shard-1", "0.34.0", extraArgs=[ROOT_FLAG, "/etc/x", "--v=3"]),
    )
    wait_ready(kubectl, namespace, "shard-1", "0.34.0")
    args = kcp_container(kubectl, namespace, "shard-1")["args"]
    assert "--v=3" in args
    assert ROOT_FLAG not in args
    assert "/etc/x" not in args
    cond = condition(get(kubectl, namespace, "shard", "shard-1"), "DeprecatedFlagDropped")
    assert cond["status"] == "True"
    assert f"{ROOT_FLAG} /etc/x" in cond["message"]
    wait_for(
        lambda: "IgnoredByKcpVersion" in events(kubectl, namespace, "shard-1"),
        30,
        "the IgnoredByKcpVersion event",
    )


def test_hand_edited_deployment_is_put_back_and_in_sync_is_not_rewritten(
    operator_process: OperatorProcess, kubectl: Kubectl, namespace: str
) -> None:
    apply(kubectl, namespace, shard("root", "0.34.0"))
    wait_settled(kubectl, namespace, "root", "0.34.0")
    before = get(kubectl, namespace, "deployment", "root-kcp")["metadata"]["resourceVersion"]
    requests = api_request_totals(operator_process.cluster)
    kubectl("annotate", "-n", namespace, "shard", "root", "touched=1")
    # The pass the annotation starts and at least one resync pass: no request writes a child
    # (the API server's counters also show writes that change nothing).
    time.sleep(RESYNC_WINDOW)
    written = writes_between(
        requests, api_request_totals(operator_process.cluster), CHILD_RESOURCES
    )
    assert written == {}, f"the operator wrote children that were in sync: {written}"
    after = get(kubectl, namespace, "deployment", "root-kcp")["metadata"]["resourceVersion"]
    assert after == before, "the operator rewrote a Deployment that was already in sync"

    kubectl("scale", "-n", namespace, "deployment", "root-kcp", "--replicas=4")
    kubectl("set", "image", "-n", namespace, "deployment/root-kcp", "kcp=example/evil:1")

    def restored() -> bool:
        dep = get(kubectl, namespace, "deployment", "root-kcp")
        image = dep["spec"]["template"]["spec"]["containers"][0]["image"]
        return bool(dep["spec"]["replicas"] == 1 and image == "ghcr.io/kcp-dev/kcp:v0.34.0")

    wait_for(restored, 60, "the Deployment to be put back")
    wait_for(lambda: "Updated" in events(kubectl, namespace, "root"), 30, "an Updated event")


def test_deleting_a_shard_collects_its_children(
    operator_process: OperatorProcess, kubectl: Kubectl, namespace: str
) -> None:
    apply(kubectl, namespace, shard("root", "0.34.0"))
    wait_ready(kubectl, namespace, "root", "0.34.0")
    kubectl("delete", "-n", namespace, "shard", "root", "--wait=true")

    def gone() -> bool:
        left = kubectl("get", "-n", namespace, "deployments,services,replicasets", "-o", "name")
        return left.strip() == ""

    wait_for(gone, 90, "garbage collection of root's children")


def test_shards_carry_no_finalizer_and_an_older_operators_is_taken_off(
    operator_process: OperatorProcess, kubectl: Kubectl, namespace: str
) -> None:
    """The resync is the operator's own loop, not a kopf timer per object: kopf puts no
    finalizer on a Shard, takes off the one an older operator put, and the Shard is deleted
    at once."""
    older = shard("root", "0.34.0")
    older["metadata"]["finalizers"] = [FINALIZER]
    apply(kubectl, namespace, older, non_root("shard-1", "0.34.0"))
    wait_ready(kubectl, namespace, "root", "0.34.0")
    wait_ready(kubectl, namespace, "shard-1", "0.34.0")

    def finalizers() -> dict[str, list[str]]:
        items = json.loads(kubectl("get", "-n", namespace, "shards", "-o", "json"))["items"]
        return {i["metadata"]["name"]: i["metadata"].get("finalizers") or [] for i in items}

    wait_for(
        lambda: finalizers() == {"root": [], "shard-1": []}, 60, "no finalizer on either Shard"
    )
    kubectl("delete", "-n", namespace, "shard", "shard-1", "--wait=true", "--timeout=30s")


@pytest.mark.parametrize(
    ("obj", "message"),
    [
        (
            non_root("s", "0.34.0", cache={}, pki={"issue": False}),
            "need spec.cache.kubeconfigSecretRef",
        ),
        (shard("s", "0.34.0", externalURL="kcp.example.com"), "must be an https URL"),
        (shard("s", "0.34.0", pki={"certificateLifetime": "1y"}), "spec.pki.certificateLifetime"),
        (shard("s", "v0.34.0"), "spec.version"),
        (shard("s", "0.34.0", replicas=0), "spec.replicas"),
        (shard("s", "0.34.0", replicas=2), "needs spec.etcd.endpoints"),
        (shard("s", "0.34.0+build.1"), "needs spec.image.tag"),
        (
            shard("s", "0.34.0", logicalClusterAdminKubeconfigSecretRef={"name": "lca"}),
            "needs spec.externalURL",
        ),
        (
            shard("s", "0.34.0", tls={"rootCASecretRef": {"name": "ca", "key": ""}}),
            "spec.tls.rootCASecretRef.key",
        ),
    ],
)
def test_invalid_shards_are_refused(
    crds: list[str], kubectl: Kubectl, namespace: str, obj: dict[str, Any], message: str
) -> None:
    with pytest.raises(KubectlError) as refused:
        apply(kubectl, namespace, obj)
    assert message in str(refused.value)


def test_root_shard_ref_is_immutable(crds: list[str], kubectl: Kubectl, namespace: str) -> None:
    apply(kubectl, namespace, non_root("s", "0.34.0"))
    with pytest.raises(KubectlError) as refused:
        patch_spec(kubectl, namespace, "s", {"rootShardRef": {"name": "other"}})
    assert "cannot be changed after creation" in str(refused.value)
    with pytest.raises(KubectlError):
        kubectl(
            "patch",
            "-n",
            namespace,
            "shard",
            "s",
            "--type=json",
            "-p",
            '[{"op": "remove", "path": "/spec/rootShardRef"}]',
        )


def test_invalid_spec_is_reported_in_status(
    operator_process: OperatorProcess, kubectl: Kubectl, namespace: str
) -> None:
    apply(kubectl, namespace, non_root("orphan", "0.34.0"))

    def degraded() -> dict[str, Any]:
        return condition(get(kubectl, namespace, "shard", "orphan"), "Degraded")

    cond = wait_for(
        lambda: degraded() if degraded().get("status") == "True" else None,
        60,
        "orphan to be Degraded",
    )
    assert cond["reason"] == "RootShardNotFound"
    with pytest.raises(KubectlError):
        get(kubectl, namespace, "deployment", "orphan-kcp")


def test_rotated_secret_restarts_the_pods(
    operator_process: OperatorProcess, kubectl: Kubectl, namespace: str
) -> None:
    kubectl(
        "create", "secret", "generic", "-n", namespace, "client-ca", "--from-literal=ca.crt=one"
    )
    apply(
        kubectl,
        namespace,
        shard("root", "0.34.0", tls={"clientCASecretRef": {"name": "client-ca"}}),
    )
    wait_ready(kubectl, namespace, "root", "0.34.0")

    def revision() -> str:
        dep = get(kubectl, namespace, "deployment", "root-kcp")
        return str(
            dep["spec"]["template"]["metadata"]["annotations"]["kcpshard.dev/secret-revisions"]
        )

    before = revision()
    kubectl(
        "patch",
        "-n",
        namespace,
        "secret",
        "client-ca",
        "--type=merge",
        "-p",
        '{"stringData": {"ca.crt": "two"}}',
    )
    # Secrets are watched: the rotation is followed well within one resync period (30 s).
    wait_for(lambda: revision() != before, 15, "the pod template to follow the rotated Secret")
    wait_ready(kubectl, namespace, "root", "0.34.0")


def test_render_output_with_a_numeric_looking_hash_is_read_by_kubectl(
    kubectl: Kubectl, namespace: str, tmp_path: Path
) -> None:
    obj, digest = numeric_hash_shard(namespace)
    source = tmp_path / "shard.yaml"
    source.write_text(json.dumps(obj), encoding="utf-8")
    rendered = subprocess.run(
        [str(Path(sys.executable).parent / "kcp-shard-operator"), "render", "-f", str(source)],
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    out = kubectl(
        "apply", "--dry-run=server", "--validate=strict", "-o", "json", "-f", "-", stdin=rendered
    )
    hashes = [item["metadata"]["annotations"][HASH] for item in json.loads(out)["items"]]
    assert digest in hashes


@pytest.mark.parametrize("case", ["shard-chart-root", "shard-chart-nonroot"])
def test_shards_converted_from_the_shard_chart_are_accepted(
    crds: list[str], kubectl: Kubectl, namespace: str, case: str
) -> None:
    manifest = yaml.safe_load((GOLDEN / f"{case}.shard.yaml").read_text(encoding="utf-8"))
    manifest["metadata"]["namespace"] = namespace
    out = kubectl("apply", "--dry-run=server", "-o", "json", "-f", "-", stdin=json.dumps(manifest))
    assert json.loads(out)["spec"]["replicas"] == 1
