"""The commands through a kubeconfig whose user is a real exec plugin, as EKS, GKE and AKS
write them: ``plan``, ``kubeconfig`` and ``run`` against the kwok API server, and
``cleanup-identitycache`` against a real kcp shard.

The plugin is a small script that prints an ``ExecCredential`` with a ServiceAccount token
(``kubectl create token``) and counts its runs in a file; its first answer can be a token the
server refuses, to show it runs again after a 401. The kubeconfig's current context is one the
server refuses, and the plugin's context names the test's namespace: ``--context`` and the
context's namespace are honoured, or the commands fail.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from testkit.kube import Cluster
from testkit.operator_process import OperatorProcess
from testkit.tools import log

from .kcp import ShardedKcp
from .shards import Kubectl, apply, shard, wait_ready

pytest_plugins = ("tests.e2e.kcp_fixture",)
pytestmark = pytest.mark.e2e
VERSION = "0.27.1"
PLUGIN = """\
import json, pathlib, sys
folder = pathlib.Path(sys.argv[1])
runs = folder / "runs"
count = int(runs.read_text()) + 1 if runs.exists() else 1
runs.write_text(str(count))
first = folder / "first-token"
token = (first if count == 1 and first.exists() else folder / "token").read_text().strip()
print(json.dumps({
    "apiVersion": "client.authentication.k8s.io/v1",
    "kind": "ExecCredential",
    "status": {"token": token},
}))
"""


@dataclass
class Plugin:
    """An exec plugin in ``folder`` and a kubeconfig using it in context ``plugin``."""

    folder: Path
    kubeconfig: Path

    def runs(self) -> int:
        counted = self.folder / "runs"
        return int(counted.read_text()) if counted.exists() else 0

    def refuse_first(self) -> None:
        """The plugin's next first run gives a token the server refuses (then the real one)."""
        (self.folder / "runs").unlink(missing_ok=True)
        (self.folder / "first-token").write_text("not-a-valid-token")


def plugin_kubeconfig(folder: Path, token: str, cluster: dict[str, Any], namespace: str) -> Plugin:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "plugin.py").write_text(PLUGIN)
    (folder / "token").write_text(token)
    scope = {"namespace": namespace} if namespace else {}
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "target", "cluster": cluster}],
        "users": [
            {
                "name": "plugin",
                "user": {
                    "exec": {
                        "apiVersion": "client.authentication.k8s.io/v1",
                        "command": sys.executable,
                        "args": [str(folder / "plugin.py"), str(folder)],
                        "interactiveMode": "Never",
                    }
                },
            },
            {"name": "refused", "user": {"token": "refused-by-the-server"}},
        ],
        "contexts": [
            {"name": "plugin", "context": {"cluster": "target", "user": "plugin", **scope}},
            {"name": "refused", "context": {"cluster": "target", "user": "refused"}},
        ],
        "current-context": "refused",
    }
    path = folder / "kubeconfig"
    path.write_text(yaml.safe_dump(config))
    return Plugin(folder, path)


ACCOUNT = "e2e-exec-plugin"


@pytest.fixture
def plugin(cluster: Cluster, crds: list[str], namespace: str, tmp_path: Path) -> Plugin:
    """A ServiceAccount that may do anything in the test's namespace and nothing outside it
    (a command that looked elsewhere would be refused), and a kubeconfig whose plugin gives its
    token."""
    cluster.kubectl("create", "serviceaccount", ACCOUNT, "-n", namespace)
    cluster.kubectl(
        "create", "rolebinding", ACCOUNT, "-n", namespace, "--clusterrole=cluster-admin",
        f"--serviceaccount={namespace}:{ACCOUNT}",
    )  # fmt: skip
    token = cluster.kubectl("create", "token", ACCOUNT, "-n", namespace).strip()
    view = json.loads(cluster.kubectl("config", "view", "--raw", "--minify", "-o", "json"))
    target = view["clusters"][0]["cluster"]
    return plugin_kubeconfig(tmp_path / "plugin", token, target, namespace)


@pytest.fixture
def cluster_admin(cluster: Cluster, plugin: Plugin, namespace: str) -> Iterator[None]:
    """The ServiceAccount may read outside its namespace too (the operator reads
    StorageClasses and kopf its API discovery)."""
    binding = f"{namespace}-exec-plugin"
    cluster.kubectl(
        "create", "clusterrolebinding", binding, "--clusterrole=cluster-admin",
        f"--serviceaccount={namespace}:{ACCOUNT}",
    )  # fmt: skip
    try:
        yield
    finally:
        cluster.kubectl("delete", "clusterrolebinding", binding, "--ignore-not-found")


def command(plugin: Plugin, *args: str) -> subprocess.CompletedProcess[str]:
    """The real command line through the plugin's kubeconfig (``$KUBECONFIG`` points nowhere:
    only ``--kubeconfig`` can give the credentials)."""
    exe = Path(sys.executable).parent / "kcp-shard-operator"
    started = time.monotonic()
    done = subprocess.run(
        [str(exe), *args, "--kubeconfig", str(plugin.kubeconfig)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        env={"PATH": "/usr/bin:/bin", "KUBECONFIG": str(plugin.folder / "absent")},
    )
    log(f"measured: {args[0]} through the exec plugin in {time.monotonic() - started:.2f}s")
    return done


def test_plan_through_the_plugin_in_the_context_s_namespace(
    plugin: Plugin, kubectl: Kubectl, namespace: str
) -> None:
    apply(kubectl, namespace, shard("root", VERSION))
    plugin.refuse_first()
    done = command(plugin, "plan", "--context", "plugin", "-o", "json")
    assert done.returncode == 0, done.stderr
    steps = json.loads(done.stdout)["steps"]
    assert [(s["kind"], s["namespace"], s["name"]) for s in steps] == [("Shard", namespace, "root")]
    # The first token was refused (401): the plugin ran again, once.
    assert plugin.runs() == 2
    # The current context's static token is refused: without --context, one line.
    refused = command(plugin, "plan", "-o", "json")
    assert refused.returncode == 2
    assert refused.stderr.startswith("error: reading the objects in ")
    assert "401 Unauthorized" in refused.stderr
    assert refused.stderr.count("\n") == 1


def test_kubeconfig_through_the_plugin_in_the_context_s_namespace(
    plugin: Plugin, kubectl: Kubectl, namespace: str
) -> None:
    apply(kubectl, namespace, shard("root", VERSION))
    issued = {"apiVersion": "v1", "kind": "Config", "clusters": [], "users": [], "contexts": []}
    kubectl(
        "create", "secret", "generic", "root-kcp-admin-kubeconfig", "-n", namespace,
        f"--from-literal=kubeconfig={yaml.safe_dump(issued)}",
    )  # fmt: skip
    done = command(plugin, "kubeconfig", "root", "--context", "plugin")
    assert done.returncode == 0, done.stderr
    assert yaml.safe_load(done.stdout) == issued
    assert plugin.runs() == 1


@pytest.mark.usefixtures("cluster_admin")
def test_run_watches_and_writes_through_the_plugin(
    plugin: Plugin, cluster: Cluster, kubectl: Kubectl, namespace: str, tmp_path: Path
) -> None:
    plugin_cluster = Cluster(
        kubeconfig=plugin.kubeconfig, env={**cluster.env, "KUBECONFIG": str(plugin.kubeconfig)}
    )
    operator = OperatorProcess(
        cluster=plugin_cluster,
        args=["--namespace", namespace, "--standalone", "--no-kcp-checks", "--context", "plugin"],
        log_path=tmp_path / "operator.log",
    )
    operator.start()
    try:
        apply(kubectl, namespace, shard("root", VERSION))
        wait_ready(kubectl, namespace, "root", VERSION)
        assert plugin.runs() >= 1
    finally:
        kubectl("delete", "shard", "root", "-n", namespace, "--wait=true", "--timeout=60s")
        operator.stop()


def test_cleanup_identitycache_through_the_plugin(sharded_kcp: ShardedKcp, tmp_path: Path) -> None:
    admin = yaml.safe_load(sharded_kcp.shard.admin_kubeconfig.read_text())
    contexts = {c["name"]: c["context"] for c in admin["contexts"]}
    users = {u["name"]: u["user"] for u in admin["users"]}
    clusters = {c["name"]: c["cluster"] for c in admin["clusters"]}
    base = contexts["shard-base"]
    token = users[base["user"]]["token"]
    found = plugin_kubeconfig(tmp_path / "plugin", token, clusters[base["cluster"]], "")
    done = command(found, "cleanup-identitycache", "--context", "plugin", "--dry-run")
    assert done.returncode == 0, done.stderr
    assert "dry run: would delete" in done.stdout
    assert found.runs() == 1
