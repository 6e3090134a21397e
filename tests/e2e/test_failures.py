"""Failure modes on a real API server: no wedge, no silence, hand edits fully put back,
no Secret content in status, Events or logs. Prints the measured recovery times."""

from __future__ import annotations

import base64
import json
import time
from typing import Any

import pytest

from testkit.kube import KubectlError, condition
from testkit.metrics import api_request_totals, writes_between
from testkit.operator_process import CHILD_RESOURCES, RESYNC_WINDOW, OperatorProcess
from testkit.tools import log
from testkit.wait import wait_for

from .shards import Kubectl, apply, get, patch_spec, shard, wait_ready, wait_settled

pytestmark = pytest.mark.e2e
MARKER = "MARKER-7f3a-SECRET"


def event_items(kubectl: Kubectl, ns: str, name: str) -> list[dict[str, Any]]:
    out = kubectl(
        "get", "events", "-n", ns, "--field-selector", f"involvedObject.name={name}", "-o", "json"
    )
    items: list[dict[str, Any]] = json.loads(out)["items"]
    return items


def count_events(kubectl: Kubectl, ns: str, name: str, reason: str) -> int:
    return sum(
        int(item.get("count") or 1)
        for item in event_items(kubectl, ns, name)
        if item["reason"] == reason
    )


def event_messages(kubectl: Kubectl, ns: str, name: str, reason: str) -> list[str]:
    return [
        item.get("message", "")
        for item in event_items(kubectl, ns, name)
        if item["reason"] == reason
    ]


def degraded_with(kubectl: Kubectl, ns: str, name: str, reason: str) -> dict[str, Any] | None:
    cond = condition(get(kubectl, ns, "shard", name), "Degraded")
    return cond if cond.get("status") == "True" and cond.get("reason") == reason else None


def test_minimal_shard_is_accepted_and_long_names_are_refused(
    operator_process: OperatorProcess, kubectl: Kubectl, namespace: str
) -> None:
    minimal = {
        "apiVersion": "kcpshard.dev/v1alpha1",
        "kind": "Shard",
        "metadata": {"name": "minimal"},
        "spec": {"version": "0.33.0"},
    }
    apply(kubectl, namespace, minimal)
    wait_ready(kubectl, namespace, "minimal", "0.33.0")
    assert get(kubectl, namespace, "shard", "minimal")["spec"]["replicas"] == 1
    refused_shards = [
        (shard("s" * 60, "0.33.0"), "metadata.name must be a DNS-1035 label"),
        (shard("shard.one", "0.33.0"), "metadata.name must be a DNS-1035 label"),
        (shard("shard", "0.33.0-" + "a" * 60), "spec.version"),
        (shard("shard", "0.33.0", replicas=11), "spec.replicas"),
        (shard("shard", "0.33.0", resources={"limits": {"cpu": "lots"}}), "spec.resources"),
        (
            shard("shard", "0.33.0", tolerations=[{"operator": "Exists", "value": "v"}]),
            "operator Exists has no value",
        ),
        (shard("shard", "0.33.0", extraArgs=["--v=1"] * 65), "spec.extraArgs"),
    ]
    for obj, message in refused_shards:
        with pytest.raises(KubectlError) as refused:
            apply(kubectl, namespace, obj)
        assert message in str(refused.value)


def test_hand_edited_service_port_does_not_wedge_the_shard(
    operator_process: OperatorProcess, kubectl: Kubectl, namespace: str
) -> None:
    apply(kubectl, namespace, shard("root", "0.33.0"))
    wait_ready(kubectl, namespace, "root", "0.33.0")
    edit = '[{"op": "replace", "path": "/spec/ports/0/port", "value": 7777}]'
    start = time.monotonic()
    kubectl("patch", "-n", namespace, "service", "root-kcp", "--type=json", "-p", edit)

    def ports() -> list[int]:
        return [p["port"] for p in get(kubectl, namespace, "service", "root-kcp")["spec"]["ports"]]

    wait_for(lambda: ports() == [6443], 60, "the Service port to be put back")
    log(f"measured: hand-edited Service port put back in {time.monotonic() - start:.1f}s")
    # Everything after the Service is still reconciled: a later spec change rolls out.
    patch_spec(kubectl, namespace, "root", {"version": "0.34.0"})
    wait_ready(kubectl, namespace, "root", "0.34.0")
    assert ports() == [6443]


def test_sidecar_and_env_added_by_hand_are_removed_in_one_pass(
    operator_process: OperatorProcess, kubectl: Kubectl, namespace: str
) -> None:
    apply(kubectl, namespace, shard("root", "0.33.0"))
    wait_settled(kubectl, namespace, "root", "0.33.0")
    patch = {
        "spec": {
            "template": {
                "spec": {
                    "containers": [
                        {"name": "kcp", "env": [{"name": "HAND", "value": "1"}]},
                        {"name": "sidecar", "image": "example/sidecar:1"},
                    ]
                }
            }
        }
    }
    start = time.monotonic()
    kubectl("patch", "-n", namespace, "deployment", "root-kcp", "-p", json.dumps(patch))

    def restored() -> dict[str, Any] | None:
        dep = get(kubectl, namespace, "deployment", "root-kcp")
        containers = dep["spec"]["template"]["spec"]["containers"]
        clean = [c["name"] for c in containers] == ["kcp"] and "env" not in containers[0]
        return dep if clean else None

    dep = wait_for(restored, 60, "the sidecar and the env var to be removed")
    log(f"measured: sidecar and env var removed in {time.monotonic() - start:.1f}s")
    updated = count_events(kubectl, namespace, "root", "Updated")
    assert updated >= 1
    assert event_messages(kubectl, namespace, "root", "ApplyFailed") == []
    writes = operator_process.log_tail(100_000).count("Deployment root-kcp (Drift)")
    assert writes == 1, "converged in one write"
    # Quiet afterwards: no write of a child and no further Event over a window with at least
    # one resync pass (the Deployment controller still updates the status, a subresource, while
    # it rolls the pods back).
    requests = api_request_totals(operator_process.cluster)
    time.sleep(RESYNC_WINDOW)
    written = writes_between(
        requests, api_request_totals(operator_process.cluster), CHILD_RESOURCES
    )
    assert written == {}, f"writes after the one that put the Deployment back: {written}"
    after = get(kubectl, namespace, "deployment", "root-kcp")
    assert after["metadata"]["generation"] == dep["metadata"]["generation"]
    assert operator_process.log_tail(100_000).count("Deployment root-kcp (Drift)") == writes
    assert count_events(kubectl, namespace, "root", "Updated") == updated
    # A spec change gets its own reason, not "Updated".
    patch_spec(kubectl, namespace, "root", {"extraArgs": ["--v=3"]})
    wait_for(
        lambda: count_events(kubectl, namespace, "root", "Configured") >= 1,
        60,
        "a Configured event",
    )
    assert count_events(kubectl, namespace, "root", "Updated") == updated


def test_child_refused_by_the_api_server_is_reported(
    operator_process: OperatorProcess, kubectl: Kubectl, namespace: str
) -> None:
    # Valid offline, refused by the API server: the request exceeds the limit.
    resources = {"limits": {"cpu": "100m"}, "requests": {"cpu": "1"}}
    start = time.monotonic()
    apply(kubectl, namespace, shard("root", "0.33.0", resources=resources))
    cond = wait_for(
        lambda: degraded_with(kubectl, namespace, "root", "ApplyFailed"),
        60,
        "Degraded=True ApplyFailed",
    )
    log(f"measured: refused Deployment reported in {time.monotonic() - start:.1f}s")
    assert "Deployment root-kcp" in cond["message"]
    assert "less than or equal to cpu limit" in cond["message"]
    assert get(kubectl, namespace, "shard", "root")["status"]["phase"] == "Degraded"
    wait_for(
        lambda: count_events(kubectl, namespace, "root", "ApplyFailed") >= 1,
        30,
        "a Warning ApplyFailed event",
    )
    patch_spec(kubectl, namespace, "root", {"resources": {"requests": {"cpu": "100m"}}})
    wait_ready(kubectl, namespace, "root", "0.33.0")
    assert condition(get(kubectl, namespace, "shard", "root"), "Degraded")["status"] == "False"


def test_unschedulable_pods_and_missing_secrets_are_reported(
    operator_process: OperatorProcess, kubectl: Kubectl, namespace: str
) -> None:
    start = time.monotonic()
    apply(
        kubectl,
        namespace,
        shard("root", "0.33.0", nodeSelector={"pool": "none"}),
        shard("other", "0.33.0", tls={"clientCASecretRef": {"name": "absent-ca"}}),
    )
    cond = wait_for(
        lambda: degraded_with(kubectl, namespace, "root", "PodsNotRunning"),
        60,
        "unschedulable pods to be reported",
    )
    log(f"measured: unschedulable pod reported in {time.monotonic() - start:.1f}s")
    assert "cannot be scheduled" in cond["message"]
    cond = wait_for(
        lambda: degraded_with(kubectl, namespace, "other", "SecretNotFound"),
        60,
        "the missing Secret to be named",
    )
    assert "absent-ca" in cond["message"]
    # A Secret without the key kcp reads is named with the key and the field, not left to
    # kcp's crash loop.
    kubectl("create", "secret", "generic", "-n", namespace, "absent-ca", "--from-literal=ca=x")
    cond = wait_for(
        lambda: degraded_with(kubectl, namespace, "other", "SecretKeyNotFound"),
        15,
        "the missing key to be named",
    )
    assert "Secret absent-ca has no key 'ca.crt' (spec.tls.clientCASecretRef" in cond["message"]
    kubectl("delete", "secret", "-n", namespace, "absent-ca")
    kubectl("create", "secret", "generic", "-n", namespace, "absent-ca", "--from-literal=ca.crt=x")
    start = time.monotonic()
    # Secrets are watched: the Shard is put right before the 30 s resync would come round.
    wait_for(
        lambda: (
            condition(get(kubectl, namespace, "shard", "other"), "Degraded").get("status")
            == "False"
        ),
        15,
        "the created Secret to be found (watched, not left to the resync)",
    )
    log(f"measured: created Secret found in {time.monotonic() - start:.1f}s")


@pytest.mark.kcp_checks
def test_secret_content_never_reaches_status_events_or_log(
    operator_process: OperatorProcess, kubectl: Kubectl, namespace: str
) -> None:
    malformed = f"apiVersion: v1\nusers:\n- name: admin\n  user: {{token: {MARKER}: x}}\n"

    def kubeconfig(server: str, token: str) -> str:
        return json.dumps(
            {
                "clusters": [{"name": "c", "cluster": {"server": server}}],
                "users": [{"name": "u", "user": {"token": token}}],
                "contexts": [{"name": "x", "context": {"cluster": "c", "user": "u"}}],
                "current-context": "x",
            }
        )

    password_url = kubeconfig(f"https://u:{MARKER}@127.0.0.1:1", MARKER)
    # Tokens that cannot form an HTTP header: refused before any request, never quoted.
    newline = kubeconfig("https://127.0.0.1:1", f"{MARKER}\n")
    header = kubeconfig("https://127.0.0.1:1", f"{MARKER}\r\nX-Injected: {MARKER}")
    secrets = []
    for name, text in (
        ("admin-malformed", malformed),
        ("admin-password", password_url),
        ("admin-newline", newline),
        ("admin-header", header),
    ):
        secrets.append(
            {
                "apiVersion": "v1",
                "kind": "Secret",
                "metadata": {"name": name},
                "stringData": {"kubeconfig": text},
            }
        )
    non_root = {
        "rootShardRef": {"name": "root"},
        "cache": {"kubeconfigSecretRef": {"name": "cache-kubeconfig"}},
    }
    apply(
        kubectl,
        namespace,
        *secrets,
        shard("root", "0.34.0"),
        shard(
            "shard-1", "0.34.0", adminKubeconfigSecretRef={"name": "admin-malformed"}, **non_root
        ),
        shard("shard-2", "0.34.0", adminKubeconfigSecretRef={"name": "admin-password"}, **non_root),
        shard("shard-3", "0.34.0", adminKubeconfigSecretRef={"name": "admin-newline"}, **non_root),
        shard("shard-4", "0.34.0", adminKubeconfigSecretRef={"name": "admin-header"}, **non_root),
    )
    for name, reason in (
        ("shard-1", "Failed"),
        ("shard-2", "ShardUnreachable"),
        ("shard-3", "Failed"),
        ("shard-4", "Failed"),
    ):

        def reported(name: str = name, reason: str = reason) -> dict[str, Any] | None:
            cond = condition(get(kubectl, namespace, "shard", name), "IdentityCacheCleaned")
            return cond if cond.get("reason") == reason else None

        cond = wait_for(reported, 90, f"IdentityCacheCleaned {reason} on {name}")
        assert "Secret 'admin-" in cond["message"]
    assert "not valid YAML (line 4" in json.dumps(get(kubectl, namespace, "shard", "shard-1"))
    for name in ("shard-3", "shard-4"):
        cleaned = condition(get(kubectl, namespace, "shard", name), "IdentityCacheCleaned")
        assert "cannot form an HTTP header: it holds a line break" in cleaned["message"]
    shown = kubectl("get", "shards", "-n", namespace, "-o", "json") + kubectl(
        "get", "events", "-n", namespace, "-o", "json"
    )
    assert MARKER not in shown
    assert MARKER not in operator_process.log_tail(100_000)
    # Nor do the keys the operator issued (for the root, and shard-1's serving certificate).
    shown += kubectl("get", "configmaps", "-n", namespace, "-o", "json")
    for secret in ("root-kcp-ca", "root-kcp-serving", "shard-1-kcp-serving"):
        encoded = kubectl(
            "get", "secret", secret, "-n", namespace, "-o", "jsonpath={.data.tls\\.key}"
        )
        key = base64.b64decode(encoded).decode()
        assert "PRIVATE KEY" in key
        body = key.splitlines()[1]
        assert body not in shown
        assert body not in operator_process.log_tail(100_000)
    assert "PRIVATE KEY" not in shown + operator_process.log_tail(100_000)


def test_pods_the_deployment_cannot_create_are_reported(
    operator_process: OperatorProcess, kubectl: Kubectl, namespace: str
) -> None:
    quota = {
        "apiVersion": "v1",
        "kind": "ResourceQuota",
        "metadata": {"name": "no-pods"},
        "spec": {"hard": {"pods": "0"}},
    }
    apply(kubectl, namespace, quota)
    start = time.monotonic()
    apply(kubectl, namespace, shard("root", "0.33.0"))
    cond = wait_for(
        lambda: degraded_with(kubectl, namespace, "root", "ReplicaFailure"),
        90,
        "the Deployment's ReplicaFailure to be reported",
    )
    log(f"measured: ReplicaFailure reported in {time.monotonic() - start:.1f}s")
    assert "exceeded quota" in cond["message"] or "forbidden" in cond["message"]
    kubectl("delete", "resourcequota", "-n", namespace, "no-pods")
    wait_ready(kubectl, namespace, "root", "0.33.0", timeout=120)
