"""Give users access, on real kcp pods: a Kubeconfig for ``alice`` in group ``team-a``,
bound to ``root:team-a`` with ``cluster-admin`` there, through the FrontProxy.

Her kubeconfig (the Secret the operator writes) creates a ConfigMap in ``root:team-a`` and is
refused (403) in ``root:team-b`` (on shard-1) and at the root; the root shard's audit log
(``spec.audit: {}``: the operator's default policy, to stdout) names her as the creator.
Shortening the validity renews the certificate at once; the old certificate keeps working
until it expires (kcp has no client-certificate revocation) and is refused (401) after.
Deleting the Kubeconfig removes its ClusterRoleBinding; the workspaces and the ConfigMap stay.
Bad input (a workspace that does not exist, ``system:masters``) is a condition naming the
field, and nothing is issued for it. The commands are those of docs/user-access.md.
"""

from __future__ import annotations

import base64
import datetime
import functools
import json
import ssl
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from testkit.kube import Cluster
from testkit.tools import log
from testkit.wait import wait_for

from .durability import front_proxy_kubeconfig
from .kind import describe_failure, kcp_image, kcp_namespace, port_forward

pytestmark = [pytest.mark.e2e, pytest.mark.kind]

START_TIMEOUT = 480
ISSUE_TIMEOUT = 120
ALICE = "alice"
TEAM_A, TEAM_B = "root:team-a", "root:team-b"


@pytest.fixture
def namespace(kind_cluster: Cluster, operator_release: str) -> Iterator[str]:
    with kcp_namespace(kind_cluster, "kcp-users") as name:
        yield name


def installation(namespace: str, version: str) -> list[dict[str, Any]]:
    """A root Shard audited with the default policy, shard-1, and a FrontProxy."""

    def obj(kind: str, name: str, spec: dict[str, Any]) -> dict[str, Any]:
        meta = {"name": name, "namespace": namespace}
        return {"apiVersion": "kcpshard.dev/v1alpha1", "kind": kind, "metadata": meta, "spec": spec}

    return [
        obj("Shard", "root", {"version": version, "audit": {}}),
        obj("Shard", "shard-1", {"version": version, "rootShardRef": {"name": "root"}}),
        obj(
            "FrontProxy",
            "kcp",
            {"version": version, "rootShardRef": {"name": "root"}, "replicas": 1},
        ),
    ]


def kubeconfig_object(namespace: str, name: str, **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "kcpshard.dev/v1alpha1",
        "kind": "Kubeconfig",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"target": {"frontProxyRef": {"name": "kcp"}}, **spec},
    }


def status_of(cluster: Cluster, namespace: str, kind: str, name: str) -> dict[str, Any]:
    found = json.loads(cluster.kubectl("get", kind, name, "-n", namespace, "-o", "json"))
    return dict(found.get("status") or {})


def condition(status: dict[str, Any], type_: str) -> dict[str, Any]:
    return next((c for c in status.get("conditions") or [] if c["type"] == type_), {})


def kubectl_kcp(
    cluster: Cluster, kubeconfig: Path, server: str, *args: str, stdin: str | None = None
) -> subprocess.CompletedProcess[str]:
    """kubectl against kcp with ``kubeconfig``, its server replaced by ``server``."""
    return subprocess.run(
        ["kubectl", "--kubeconfig", str(kubeconfig), "--server", server, *args],
        env=dict(cluster.env), input=stdin, capture_output=True, text=True, timeout=60,
    )  # fmt: skip


def user_kubeconfig(cluster: Cluster, namespace: str, secret: str, path: Path) -> Path:
    """The kubeconfig in the Secret, as the docs get it."""
    data = cluster.kubectl(
        "get", "secret", secret, "-n", namespace, "-o", "jsonpath={.data.kubeconfig}"
    )
    path.write_bytes(base64.b64decode(data))
    return path


def answer(kubeconfig: Path, url: str, method: str = "GET", body: Any = None) -> int:
    """The HTTP status kcp answers the kubeconfig's client certificate at ``url``."""
    config = yaml.safe_load(kubeconfig.read_text())
    folder = kubeconfig.parent / f"{kubeconfig.stem}-tls"
    folder.mkdir(exist_ok=True)
    user = config["users"][0]["user"]
    cluster = config["clusters"][0]["cluster"]
    files = {}
    for key, name in (
        ("client-certificate-data", "tls.crt"),
        ("client-key-data", "tls.key"),
        ("certificate-authority-data", "ca.crt"),
    ):
        data = user.get(key) or cluster.get(key)
        (folder / name).write_bytes(base64.b64decode(data))
        files[name] = str(folder / name)
    context = ssl.create_default_context(cafile=files["ca.crt"])
    context.load_cert_chain(files["tls.crt"], files["tls.key"])
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(url, data=data, method=method)
    request.add_header("Content-Type", "application/json")
    try:
        with urllib.request.urlopen(request, timeout=15, context=context) as reply:
            return int(reply.status)
    except urllib.error.HTTPError as err:
        return int(err.code)


def create_workspace(cluster: Cluster, admin: Path, root_url: str, name: str, shard: str) -> None:
    workspace = {
        "apiVersion": "tenancy.kcp.io/v1alpha1",
        "kind": "Workspace",
        "metadata": {"name": name},
        "spec": {
            "type": {"name": "universal", "path": "root"},
            "location": {"selector": {"matchLabels": {"name": shard}}},
        },
    }
    made = kubectl_kcp(
        cluster, admin, root_url, "create", "--validate=false", "-f", "-",
        stdin=json.dumps(workspace),
    )  # fmt: skip
    assert made.returncode == 0, made.stderr

    def ready() -> bool:
        phase = kubectl_kcp(
            cluster, admin, root_url, "get", "workspace", name, "-o", "jsonpath={.status.phase}"
        )
        return phase.stdout == "Ready"

    wait_for(ready, 120, f"workspace {name} Ready")


def alices_audit_events(cluster: Cluster, namespace: str, configmap: str) -> list[dict[str, Any]]:
    """The root shard's audit events (its stdout) of ``alice`` creating ``configmap``."""
    logs = cluster.kubectl("logs", "-n", namespace, "deploy/root-kcp", "-c", "kcp", timeout=60)
    events = []
    for line in logs.splitlines():
        if '"kind":"Event"' not in line or f'"username":"{ALICE}"' not in line:
            continue
        event = json.loads(line)
        ref = event.get("objectRef") or {}
        if event.get("verb") == "create" and ref.get("name") == configmap:
            events.append(event)
    return events


def test_alice_reaches_her_workspace_only_is_audited_and_renewed(
    kind_cluster: Cluster, namespace: str, tmp_path: Path
) -> None:
    ns, cluster = namespace, kind_cluster
    version = kcp_image()[1].removeprefix("v")
    started = time.monotonic()
    cluster.kubectl("apply", "-f", "-", stdin=yaml.safe_dump_all(installation(ns, version)))
    try:
        wait_for(
            lambda: status_of(cluster, ns, "frontproxy", "kcp").get("phase") == "Ready",
            START_TIMEOUT,
            "the root shard, shard-1 and the FrontProxy Ready",
            interval=3,
        )
        log(f"installation Ready in {time.monotonic() - started:.0f}s")
        policy = cluster.kubectl(
            "get", "configmap", "root-kcp-audit-policy", "-n", ns, "-o", "json"
        )
        assert "audit.k8s.io/v1" in json.loads(policy)["data"]["policy.yaml"]
        admin = front_proxy_kubeconfig(cluster, ns, tmp_path)
        with port_forward(cluster, ns, "kcp-front-proxy") as port:
            base = f"https://127.0.0.1:{port}"
            create_workspace(cluster, admin, f"{base}/clusters/root", "team-a", "root")
            create_workspace(cluster, admin, f"{base}/clusters/root", "team-b", "shard-1")
            _alice(cluster, ns, base, admin, tmp_path)
    except BaseException:
        print(describe_failure(cluster, ns))
        print(cluster.kubectl("get", "kubeconfigs", "-n", ns, "-o", "yaml"))
        raise


def _alice(cluster: Cluster, ns: str, base: str, admin: Path, tmp_path: Path) -> None:
    alice = kubeconfig_object(
        ns, ALICE, username=ALICE, groups=["team-a"], workspace=TEAM_A,
        clusterRoles=["cluster-admin"], validity="6m", renewBefore="1m",
    )  # fmt: skip
    cluster.kubectl("apply", "-f", "-", stdin=yaml.safe_dump(alice))
    wait_for(
        lambda: (
            condition(status_of(cluster, ns, "kubeconfig", ALICE), "Ready").get("status") == "True"
        ),
        ISSUE_TIMEOUT,
        "alice's Kubeconfig Ready",
        interval=1,
    )
    log(cluster.kubectl("get", "kubeconfigs", "-n", ns))
    status = status_of(cluster, ns, "kubeconfig", ALICE)
    assert status["secret"] == "alice-kubeconfig"
    assert status["bindings"] == [
        {
            "workspace": TEAM_A,
            "name": f"kcpshard.dev:{ns}:alice:cluster-admin",
            "clusterRole": "cluster-admin",
        }
    ]
    assert all(c["observedGeneration"] == 1 for c in status["conditions"])
    first = user_kubeconfig(cluster, ns, "alice-kubeconfig", tmp_path / "alice.kubeconfig")
    assert yaml.safe_load(first.read_text())["current-context"] == TEAM_A

    made = kubectl_kcp(
        cluster, first, f"{base}/clusters/{TEAM_A}",
        "create", "configmap", "alice-notes", "--from-literal=owner=alice",
    )  # fmt: skip
    assert made.returncode == 0, made.stderr
    for where in (TEAM_B, "root"):
        refused = kubectl_kcp(
            cluster, first, f"{base}/clusters/{where}",
            "create", "configmap", "alice-notes", "--from-literal=owner=alice",
        )  # fmt: skip
        assert refused.returncode != 0
        assert "forbidden" in refused.stderr, refused.stderr
        url = f"{base}/clusters/{where}/api/v1/namespaces/default/configmaps"
        assert answer(first, url) == 403, where
    assert answer(first, f"{base}/clusters/{TEAM_A}/api/v1/namespaces/default/configmaps") == 200

    events = wait_for(
        lambda: alices_audit_events(cluster, ns, "alice-notes"), 60, "alice in the audit log"
    )
    log(f"audit event of alice's ConfigMap: {json.dumps(events[0])}")
    assert events[0]["user"]["username"] == ALICE
    assert "team-a" in events[0]["user"]["groups"]
    assert events[0]["responseStatus"]["code"] == 201

    _bad_input(cluster, ns)
    _renewal(cluster, ns, base, first, tmp_path)

    cluster.kubectl("delete", "kubeconfig", ALICE, "-n", ns, "--timeout=120s", timeout=150)
    binding = f"kcpshard.dev:{ns}:alice:cluster-admin"
    gone = kubectl_kcp(
        cluster, admin, f"{base}/clusters/{TEAM_A}", "get", "clusterrolebinding", binding
    )
    assert "NotFound" in gone.stderr, gone.stdout + gone.stderr
    # Workspaces survive: both Ready, alice's ConfigMap still in hers.
    for name in ("team-a", "team-b"):
        phase = kubectl_kcp(
            cluster, admin, f"{base}/clusters/root", "get", "workspace", name,
            "-o", "jsonpath={.status.phase}",
        )  # fmt: skip
        assert phase.stdout == "Ready", name
    kept = kubectl_kcp(
        cluster, admin, f"{base}/clusters/{TEAM_A}", "get", "configmap", "alice-notes",
        "-o", "jsonpath={.data.owner}",
    )  # fmt: skip
    assert kept.stdout == ALICE, kept.stderr


def degraded_message(cluster: Cluster, ns: str, name: str) -> str:
    found = condition(status_of(cluster, ns, "kubeconfig", name), "Degraded")
    return str(found.get("message", "")) if found.get("status") == "True" else ""


def _bad_input(cluster: Cluster, ns: str) -> None:
    """A workspace that does not exist and system:masters: conditions naming the field."""
    for name, spec, words in (
        (
            "bob",
            {"username": "bob", "workspace": "root:nope"},
            "spec.workspace: workspace root:nope does not exist",
        ),
        (
            "mallory",
            {"username": "mallory", "groups": ["system:masters"]},
            "spec.groups: system:masters is refused",
        ),
    ):
        cluster.kubectl(
            "apply", "-f", "-", stdin=yaml.safe_dump(kubeconfig_object(ns, name, **spec))
        )
        wait_for(
            functools.partial(degraded_message, cluster, ns, name),
            ISSUE_TIMEOUT,
            f"Kubeconfig {name} Degraded",
            interval=1,
        )
        assert words in degraded_message(cluster, ns, name)
        secrets = cluster.kubectl("get", "secrets", "-n", ns, "-o", "name")
        assert f"secret/{name}-kubeconfig" not in secrets.split()
        cluster.kubectl("delete", "kubeconfig", name, "-n", ns, "--timeout=60s", timeout=90)


def _renewal(cluster: Cluster, ns: str, base: str, first: Path, tmp_path: Path) -> None:
    """A shorter validity renews at once; the old certificate works until it expires."""
    url = f"{base}/clusters/{TEAM_A}/api/v1/namespaces/default/configmaps"
    before = status_of(cluster, ns, "kubeconfig", ALICE)["notAfter"]
    cluster.kubectl(
        "patch", "kubeconfig", ALICE, "-n", ns, "--type=merge",
        "-p", json.dumps({"spec": {"validity": "2m"}}),
    )  # fmt: skip

    def renewed() -> str | None:
        after = status_of(cluster, ns, "kubeconfig", ALICE).get("notAfter", before)
        return str(after) if after < before else None

    new_expiry = wait_for(renewed, 60, "alice's kubeconfig renewed", interval=1)
    events = cluster.kubectl(
        "get", "events", "-n", ns, "--field-selector", f"involvedObject.name={ALICE}",
        "-o", "jsonpath={range .items[*]}{.reason}{'\\n'}{end}",
    )  # fmt: skip
    assert "CertificateRenewed" in events.split(), events
    assert "CertificateIssued" in events.split(), events
    second = user_kubeconfig(cluster, ns, "alice-kubeconfig", tmp_path / "alice-2.kubeconfig")
    assert second.read_bytes() != first.read_bytes()
    assert answer(second, url) == 200
    assert answer(first, url) == 200, "no revocation: the old certificate works until it expires"
    expiry = datetime.datetime.strptime(before, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=datetime.UTC)
    left = (expiry - datetime.datetime.now(datetime.UTC)).total_seconds()
    log(f"renewed (valid until {new_expiry}); the old one expires in {left:.0f}s")
    wait_for(
        lambda: answer(first, url) == 401, left + 60, "the old certificate refused", interval=5
    )
    current = user_kubeconfig(cluster, ns, "alice-kubeconfig", tmp_path / "alice-3.kubeconfig")
    assert answer(current, url) == 200
