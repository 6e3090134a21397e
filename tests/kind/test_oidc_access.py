"""Users reach their workspaces with tokens, on real pods: ``spec.auth`` of a FrontProxy and
its root Shard, with a real OIDC issuer, not one written for the test: the kind cluster's own
ServiceAccount issuer (its API server serves the discovery document and the keys; projected
ServiceAccount tokens with an audience are its ID tokens).

A root Shard and a FrontProxy come up without ``spec.auth``; workspaces ``root:team-a`` and
``root:team-b`` are made with a ConfigMap each. Then ``spec.auth`` is set (OIDC with the
issuer's CA from a Secret, ServiceAccount tokens on the front-proxy; OIDC on the shard for
direct access): both roll, and

- a token of the issuer reaches ``root:team-a`` through the front-proxy (and on the shard
  directly) as the user its ``sub`` claim names, with the prefix; it writes a ConfigMap there
  and is refused (403) in ``root:team-b``; a token with another audience gets 401, and so does
  the first token once it has expired;
- a ServiceAccount token of ``root:team-a`` (TokenRequest there) works there through the
  front-proxy and is refused (403) in ``root:team-b``, even though ``root:team-b`` holds a
  ServiceAccount of the same namespace and name bound to cluster-admin by that name (whose own
  token writes in ``root:team-b`` and is refused in ``root:team-a``);
- the workspaces and ConfigMaps made before are all there at the end.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from functools import partial
from pathlib import Path
from typing import Any

import pytest

from testkit.kube import Cluster
from testkit.tools import log
from testkit.wait import wait_for

from .access import KcpUser, ca_of, kcp_kubectl, kcp_kubectl_refused
from .durability import admin_kubeconfig, front_proxy_kubeconfig
from .kind import (
    Forward,
    describe_failure,
    kcp_image,
    kcp_namespace,
    kcp_object,
    pod_ready,
    pods,
)

pytestmark = [pytest.mark.e2e, pytest.mark.kind]

ISSUER = "https://kubernetes.default.svc.cluster.local"
AUDIENCE = "kcp"
PREFIX = "oidc:"
DISCOVERY_BINDING = "kcp-oidc-e2e-issuer-discovery"
START_TIMEOUT = 420
TOKEN_SECONDS = 600
"""The shortest token the API server issues (TokenRequest's minimum)."""
TEAMS = ("team-a", "team-b")


@pytest.fixture
def namespace(kind_cluster: Cluster, operator_release: str) -> Iterator[str]:
    with kcp_namespace(kind_cluster, "kcp-oidc") as name:
        yield name


@pytest.fixture
def issuer_discovery(kind_cluster: Cluster) -> Iterator[str]:
    """The issuer's discovery document and keys readable without credentials (what kcp asks
    them with), as the Kubernetes docs on ServiceAccount issuer discovery show."""
    kind_cluster.kubectl(
        "create", "clusterrolebinding", DISCOVERY_BINDING,
        "--clusterrole=system:service-account-issuer-discovery", "--group=system:unauthenticated",
    )  # fmt: skip
    try:
        yield json.loads(kind_cluster.kubectl("get", "--raw", "/.well-known/openid-configuration"))[
            "issuer"
        ]
    finally:
        kind_cluster.kubectl("delete", "clusterrolebinding", DISCOVERY_BINDING)


def apply(cluster: Cluster, namespace: str, items: list[dict[str, Any]]) -> None:
    listed = {"apiVersion": "v1", "kind": "List", "items": items}
    cluster.kubectl("apply", "-n", namespace, "-f", "-", stdin=json.dumps(listed))


def objects(version: str, *, auth: bool) -> list[dict[str, Any]]:
    oidc = {
        "issuerURL": ISSUER,
        "clientID": AUDIENCE,
        "usernamePrefix": PREFIX,
        "caSecretRef": {"name": "kind-issuer-ca"},
    }
    shard: dict[str, Any] = {"version": version}
    proxy: dict[str, Any] = {"version": version, "rootShardRef": {"name": "root"}}
    if auth:
        shard["auth"] = {"oidc": oidc}
        proxy["auth"] = {"oidc": oidc, "serviceAccount": {}}
    return [
        {"apiVersion": "kcpshard.dev/v1alpha1", "kind": "Shard", "metadata": {"name": "root"},
         "spec": shard},
        {"apiVersion": "kcpshard.dev/v1alpha1", "kind": "FrontProxy", "metadata": {"name": "kcp"},
         "spec": proxy},
    ]  # fmt: skip


def rolled_out(cluster: Cluster, namespace: str, flag: str) -> bool:
    """The Shard and the FrontProxy Ready at their generation, every pod of each Ready and
    started with ``flag`` (empty: any)."""
    for kind, name, app in (("shard", "root", "kcp"), ("frontproxy", "kcp", "kcp-front-proxy")):
        obj = kcp_object(cluster, namespace, kind, name)
        status = obj.get("status") or {}
        if status.get("phase") != "Ready":
            return False
        if status.get("observedGeneration") != obj["metadata"]["generation"]:
            return False
        running = pods(cluster, namespace, name, name=app)
        if not running or not all(pod_ready(pod) for pod in running):
            return False
        # Every pod of the old revision gone, none terminating: a port-forward then reaches a
        # pod that stays.
        if any(pod["metadata"].get("deletionTimestamp") for pod in running):
            return False
        if len(running) != (2 if kind == "frontproxy" else 1):
            return False
        for pod in running:
            args = pod["spec"]["containers"][0]["args"]
            if flag and not any(arg.startswith(flag) for arg in args):
                return False
    return True


def issuer_token(cluster: Cluster, namespace: str, audience: str, duration: str = "10m") -> str:
    """An ID token of the kind cluster's issuer for ServiceAccount alice (``kubectl create
    token`` with an audience, as the docs show)."""
    return cluster.kubectl(
        "create", "token", "alice", "-n", namespace, f"--audience={audience}",
        f"--duration={duration}",
    ).strip()  # fmt: skip


def test_oidc_and_service_account_tokens_reach_their_workspace_only(
    kind_cluster: Cluster, namespace: str, issuer_discovery: str, tmp_path: Path
) -> None:
    ns, kubectl = namespace, kind_cluster.kubectl
    assert issuer_discovery == ISSUER, issuer_discovery
    version = kcp_image()[1].removeprefix("v")
    root_ca = kubectl("get", "configmap", "kube-root-ca.crt", "-n", ns,
                      "-o", "jsonpath={.data.ca\\.crt}")  # fmt: skip
    (tmp_path / "issuer-ca.crt").write_text(root_ca)
    kubectl("create", "secret", "generic", "kind-issuer-ca", "-n", ns,
            f"--from-file=ca.crt={tmp_path / 'issuer-ca.crt'}")  # fmt: skip
    kubectl("create", "serviceaccount", "alice", "-n", ns)
    started = time.monotonic()
    apply(kind_cluster, ns, objects(version, auth=False))
    proxy = Forward(kind_cluster, ns, "kcp-front-proxy")
    shard = Forward(kind_cluster, ns, "root-kcp")
    try:
        wait_for(lambda: rolled_out(kind_cluster, ns, ""), START_TIMEOUT, "root and kcp Ready", 3)
        log(f"root Shard and FrontProxy Ready {time.monotonic() - started:.0f}s after apply")
        admin = front_proxy_kubeconfig(kind_cluster, ns, tmp_path)
        proxy_ca = ca_of(kind_cluster, admin, tmp_path / "kcp-ca.crt")
        shard_admin = admin_kubeconfig(kind_cluster, ns, "root", tmp_path)
        shard_ca = ca_of(kind_cluster, shard_admin, tmp_path / "shard-ca.crt")

        def as_admin(workspace: str, *args: str) -> str:
            server = f"--server={proxy.url()}/clusters/{workspace}"
            return kcp_kubectl(kind_cluster, admin, server, *args)

        clusters = make_workspaces(as_admin, tmp_path)
        alice = f"{PREFIX}system:serviceaccount:{ns}:alice"
        as_admin("root:team-a", "create", "clusterrolebinding", "alice-admin",
                 "--clusterrole=cluster-admin", f"--user={alice}")  # fmt: skip
        for team in TEAMS:
            as_admin(f"root:{team}", "create", "namespace", "robots")
            as_admin(f"root:{team}", "create", "serviceaccount", "robot", "-n", "robots")
            # The same binding by name in both: in team-b it binds team-b's robot only.
            as_admin(f"root:{team}", "create", "clusterrolebinding", "robot-admin",
                     "--clusterrole=cluster-admin", "--serviceaccount=robots:robot")  # fmt: skip

        # The token whose expiry the test waits for, made before the roll: the shortest the
        # API server issues.
        short = issuer_token(kind_cluster, ns, AUDIENCE)
        short_made = time.monotonic()
        started = time.monotonic()
        apply(kind_cluster, ns, objects(version, auth=True))
        wait_for(lambda: rolled_out(kind_cluster, ns, "--oidc-issuer-url="), START_TIMEOUT,
                 "root and kcp rolled out with spec.auth", 3)  # fmt: skip
        log(f"root Shard and FrontProxy rolled with spec.auth in {time.monotonic() - started:.0f}s")
        proxy.restart()
        shard.restart()

        # OIDC through the front-proxy: the user the claims name, with the prefix.
        user = KcpUser(kind_cluster, short, proxy, proxy_ca)
        who = wait_for(
            lambda: user.accepted("root:team-a"),
            120,
            "the front-proxy to take the issuer's token (it fetches the discovery first)",
        )
        log(f"whoami through the front-proxy with the issuer's token: {who}")
        assert who["username"] == alice, who
        kubeconfig = user.kubeconfig(tmp_path, "alice", "root:team-a")
        printed = user.kubectl(kubeconfig, "auth", "whoami")
        log(f"kubectl auth whoami:\n{printed}")
        assert alice in printed
        user.kubectl(kubeconfig, "create", "configmap", "from-alice", "-n", "default",
                     "--from-literal=by=alice")  # fmt: skip
        assert user.create_config_map("root:team-b", "default", "from-alice") == 403
        assert user.create_config_map("root", "default", "from-alice") == 403
        wrong = KcpUser(kind_cluster, issuer_token(kind_cluster, ns, "not-kcp"), proxy,
                        proxy_ca)  # fmt: skip
        assert wrong.whoami("root:team-a")[0] == 401

        # OIDC on the shard directly, with the shard's own flags.
        direct = KcpUser(kind_cluster, short, shard, shard_ca)
        who = wait_for(
            lambda: direct.accepted("root:team-a"), 120, "the shard to take the issuer's token"
        )
        assert who["username"] == alice, who

        # ServiceAccount tokens of a workspace: there, and nowhere else.
        robot_a = KcpUser(
            kind_cluster,
            as_admin("root:team-a", "create", "token", "robot", "-n", "robots").strip(),
            proxy,
            proxy_ca,
        )
        robot_b = KcpUser(
            kind_cluster,
            as_admin("root:team-b", "create", "token", "robot", "-n", "robots").strip(),
            proxy,
            proxy_ca,
        )
        status, who = robot_a.whoami("root:team-a")
        log(f"whoami through the front-proxy with team-a's ServiceAccount token: {who}")
        assert status == 201, who
        assert who["username"] == "system:serviceaccount:robots:robot", who
        assert who["extra"]["authentication.kubernetes.io/cluster-name"] == [clusters["team-a"]]
        assert robot_a.create_config_map("root:team-a", "robots", "from-robot") == 201
        robot = robot_a.kubeconfig(tmp_path, "robot", "root:team-a")
        log(f"kubectl auth whoami (robot):\n{robot_a.kubectl(robot, 'auth', 'whoami')}")
        elsewhere = f"--server={proxy.url()}/clusters/root:team-b"
        printed = kcp_kubectl_refused(kind_cluster, robot, elsewhere, "get", "configmaps", "-n",
                                      "robots")  # fmt: skip
        log(f"robot of team-a in team-b: {printed}")
        assert "Forbidden" in printed or "Unauthorized" in printed, printed
        status, who = robot_b.whoami("root:team-b")
        assert status == 201, who
        assert who["extra"]["authentication.kubernetes.io/cluster-name"] == [clusters["team-b"]]
        assert robot_b.create_config_map("root:team-b", "robots", "from-robot-b") == 201
        refused = {
            "team-a token in team-b (whoami)": robot_a.whoami("root:team-b")[0],
            "team-a token in team-b (ConfigMap)": robot_a.create_config_map(
                "root:team-b", "robots", "from-robot"
            ),
            "team-b token in team-a (ConfigMap)": robot_b.create_config_map(
                "root:team-a", "robots", "from-b"
            ),
        }
        log(f"ServiceAccount tokens outside their workspace: {refused}")
        assert set(refused.values()) <= {401, 403}, refused

        # The short token, which worked above, once expired.
        left = TOKEN_SECONDS + 5 - (time.monotonic() - short_made)
        log(f"waiting {max(left, 0):.0f}s for the issuer's short token to expire")
        wait_for(lambda: user.whoami("root:team-a")[0] == 401, max(left, 0) + 90,
                 "the expired token to be refused", 5)  # fmt: skip
        took = time.monotonic() - short_made
        log(f"the issuer's token refused (401) {took:.0f}s after it was made")
        assert time.monotonic() - short_made >= TOKEN_SECONDS - 60

        # The workspaces and what was in them before the roll, and what the tokens wrote.
        for team in TEAMS:
            data = json.loads(as_admin(f"root:{team}", "get", "configmap", "before", "-n",
                                       "default", "-o", "json"))  # fmt: skip
            assert data["data"] == {"team": team}, data
        assert as_admin("root:team-a", "get", "configmap", "from-alice", "-n", "default",
                        "-o", "jsonpath={.data.by}") == "alice"  # fmt: skip
        phases = as_admin(
            "root",
            "get",
            "workspaces",
            "-o",
            "jsonpath={range .items[*]}{.metadata.name}={.status.phase} {end}",
        )
        assert set(phases.split()) == {f"{team}=Ready" for team in TEAMS}, phases
    except BaseException:
        print(describe_failure(kind_cluster, ns))
        raise
    finally:
        proxy.close()
        shard.close()


def workspace_ready(as_admin: Callable[..., str], name: str) -> bool:
    return as_admin("root", "get", "workspace", name, "-o", "jsonpath={.status.phase}") == "Ready"


def make_workspaces(as_admin: Callable[..., str], folder: Path) -> dict[str, str]:
    """``root:team-a`` and ``root:team-b``, Ready, with a ConfigMap each; their logical
    clusters."""
    for team in TEAMS:
        manifest = folder / f"{team}.yaml"
        manifest.write_text(
            json.dumps(
                {
                    "apiVersion": "tenancy.kcp.io/v1alpha1",
                    "kind": "Workspace",
                    "metadata": {"name": team},
                }
            )
        )
        as_admin("root", "create", "-f", str(manifest))
    found: dict[str, str] = {}
    for team in TEAMS:
        wait_for(partial(workspace_ready, as_admin, team), 180, f"workspace {team} Ready", 2)
        found[team] = as_admin("root", "get", "workspace", team, "-o", "jsonpath={.spec.cluster}")
        as_admin(f"root:{team}", "create", "configmap", "before", "-n", "default",
                 f"--from-literal=team={team}")  # fmt: skip
    return found
