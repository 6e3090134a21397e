"""A reachable cluster: kubectl and helm against it, namespaces, CRDs, credentials, conditions."""

from __future__ import annotations

import base64
import json
import secrets
import subprocess
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from kcp_shard_operator.controller.handlers import FINALIZER

from .tools import helm, log, tools_env

Obj = dict[str, Any]


class KubectlError(RuntimeError):
    """A kubectl call that exited non-zero."""

    def __init__(self, args: tuple[str, ...], returncode: int, stderr: str) -> None:
        super().__init__(f"kubectl {' '.join(args)} exited {returncode}: {stderr.strip()}")
        self.returncode = returncode
        self.stderr = stderr


@dataclass(frozen=True)
class Cluster:
    """A reachable cluster: its kubeconfig and the environment to run tools against it."""

    kubeconfig: Path
    env: Mapping[str, str]

    @classmethod
    def at(cls, kubeconfig: Path) -> Cluster:
        """The cluster of ``kubeconfig``, with the pinned tools on PATH."""
        return cls(kubeconfig=kubeconfig, env={**tools_env(), "KUBECONFIG": str(kubeconfig)})

    def kubectl(self, *args: str, stdin: str | None = None, timeout: float = 120) -> str:
        """Run kubectl against the cluster and return its stdout; raise KubectlError on failure."""
        proc = subprocess.run(
            ["kubectl", *args],
            env=dict(self.env),
            input=stdin,
            capture_output=True,
            text=True,
            timeout=timeout,
        )
        if proc.returncode != 0:
            raise KubectlError(args, proc.returncode, proc.stderr)
        return proc.stdout

    def helm(self, *args: str, timeout: float = 300) -> str:
        """Run helm against the cluster and return its stdout; raise HelmError on failure."""
        return helm(self.env, *args, timeout=timeout).stdout

    def as_service_account(self, namespace: str, name: str, directory: Path) -> Cluster:
        """The same cluster seen by ServiceAccount ``name`` (created if missing) through a
        kubeconfig with a fresh token in ``directory``: what it may do is what its Roles say."""
        self.kubectl("create", "serviceaccount", name, "-n", namespace)
        token = self.kubectl("create", "token", name, "-n", namespace).strip()
        config = json.loads(self.kubectl("config", "view", "--raw", "--minify", "-o", "json"))
        config["users"] = [{"name": name, "user": {"token": token}}]
        config["contexts"][0]["context"]["user"] = name
        kubeconfig = directory / f"{name}.kubeconfig"
        kubeconfig.write_text(json.dumps(config), "utf-8")
        return Cluster(kubeconfig=kubeconfig, env={**self.env, "KUBECONFIG": str(kubeconfig)})


def unique_name(prefix: str) -> str:
    """A DNS-1123 label ``<prefix>-<6 hex>``, at most 63 characters."""
    cleaned = "".join(c if c.isalnum() else "-" for c in prefix.lower()).strip("-")
    return f"{cleaned[:52].rstrip('-')}-{secrets.token_hex(3)}"


def create_namespace(cluster: Cluster, prefix: str) -> str:
    """Create a fresh namespace named after ``prefix`` and return its name."""
    name = unique_name(prefix)
    cluster.kubectl("create", "namespace", name)
    return name


def delete_namespace(cluster: Cluster, name: str) -> None:
    """Delete a namespace without waiting for its finalization."""
    cluster.kubectl("delete", "namespace", name, "--wait=false", "--ignore-not-found")


OPERATED_KINDS = "kubeconfigs,frontproxies,virtualworkspaceservers,shards,cacheservers"
"""The kinds the operator runs, for ``kubectl delete``: a namespace holding a Kubeconfig or a
VirtualWorkspaceServer (which carry its finalizer) cannot finish deleting once no operator runs."""


def delete_operated(cluster: Cluster, namespace: str, timeout: float = 60) -> None:
    """Delete every Kubeconfig, FrontProxy, VirtualWorkspaceServer, Shard and CacheServer in
    ``namespace`` and wait until they are gone; an operator must run to remove their finalizer."""
    cluster.kubectl(
        "delete", OPERATED_KINDS, "--all", "-n", namespace,
        "--ignore-not-found", f"--timeout={timeout:g}s", timeout=timeout + 30,
    )  # fmt: skip


def release_finalized(cluster: Cluster, namespace: str) -> list[str]:
    """Remove the operator's finalizer from what in ``namespace`` still has it, and name those
    objects: after a test, nothing should (its namespace would stay Terminating and the next
    tests would wait for it); what does is a bug of that test, not to be left to the next."""
    items = json.loads(cluster.kubectl("get", OPERATED_KINDS, "-n", namespace, "-o", "json"))
    left = [
        f"{item['kind'].lower()}/{item['metadata']['name']}"
        for item in items["items"]
        if FINALIZER in (item["metadata"].get("finalizers") or [])
    ]
    for ref in left:
        cluster.kubectl(
            "patch", ref, "-n", namespace, "--type=merge", "-p", '{"metadata":{"finalizers":null}}'
        )  # fmt: skip
    return left


def delete_shards(cluster: Cluster, namespace: str, timeout: float = 60) -> None:
    """:func:`delete_operated` as cleanup: a failure is logged, not raised."""
    try:
        delete_operated(cluster, namespace, timeout)
    except KubectlError as err:
        log(f"could not delete the Shards in {namespace}: {err}")


NO_CONDITIONS_YET = ".status.conditions accessor error"
"""What ``kubectl wait --for=condition=...`` says of an object whose ``status.conditions`` is
still null, as a CRD's is right after it is created: it fails at once instead of waiting."""


def apply_crds(cluster: Cluster, path: Path, timeout: float = 60) -> list[str]:
    """Apply the CRDs in ``path`` and wait until each is Established; return their names."""
    with path.open() as stream:
        docs = [doc for doc in yaml.safe_load_all(stream) if doc]
    names = [
        str(doc["metadata"]["name"])
        for doc in docs
        if doc.get("kind") == "CustomResourceDefinition"
    ]
    assert names, f"no CustomResourceDefinition in {path}"
    cluster.kubectl("apply", "--server-side", "--force-conflicts", "-f", str(path))
    deadline = time.monotonic() + timeout
    while True:
        left = max(deadline - time.monotonic(), 1.0)
        try:
            cluster.kubectl(
                "wait",
                "--for=condition=Established",
                f"--timeout={left:g}s",
                *(f"crd/{name}" for name in names),
                timeout=left + 30,
            )
            return names
        except KubectlError as err:
            if NO_CONDITIONS_YET not in err.stderr or time.monotonic() >= deadline:
                raise
        time.sleep(0.2)


def token_cluster(
    cluster: Cluster, namespace: str, service_account: str, path: Path, duration: str = "1h"
) -> Cluster:
    """The cluster as ServiceAccount ``namespace/service_account``, with a fresh token whose
    kubeconfig is written to ``path``."""
    token = cluster.kubectl(
        "create", "token", service_account, "--namespace", namespace, "--duration", duration
    ).strip()
    admin = json.loads(
        cluster.kubectl("config", "view", "--raw", "--minify", "--flatten", "-o", "json")
    )
    entry = admin["clusters"][0]
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [entry],
        "users": [{"name": service_account, "user": {"token": token}}],
        "contexts": [
            {"name": "sa", "context": {"cluster": entry["name"], "user": service_account}}
        ],
        "current-context": "sa",
    }
    path.write_text(yaml.safe_dump(config))
    path.chmod(0o600)
    return Cluster(kubeconfig=path, env={**cluster.env, "KUBECONFIG": str(path)})


def condition(obj: Obj, type_: str) -> Obj:
    """The status condition ``type_`` of ``obj``, or ``{}``."""
    for cond in (obj.get("status") or {}).get("conditions") or []:
        if cond["type"] == type_:
            return dict(cond)
    return {}


def shard_ready(obj: Obj, version: str | None = None) -> bool:
    """Whether a Shard reports Ready, for its current generation, at ``version`` (default the
    version of its spec)."""
    status = obj.get("status") or {}
    return bool(
        status.get("phase") == "Ready"
        and condition(obj, "Ready").get("status") == "True"
        and status.get("version") == (version or obj["spec"]["version"])
        and status.get("observedGeneration") == obj["metadata"]["generation"]
    )


def credential_strings(kubeconfig: Path) -> list[str]:
    """The secret parts of ``kubeconfig``'s users, as they could show up in a log: tokens,
    passwords, client keys (inline or in files; base64 and each line of the PEM body)."""
    config = yaml.safe_load(kubeconfig.read_text()) or {}
    found: list[str] = []
    for entry in config.get("users") or []:
        user = entry.get("user") or {}
        found += [str(user[key]) for key in ("token", "password") if user.get(key)]
        pem = ""
        if user.get("client-key-data"):
            found.append(str(user["client-key-data"]))
            pem = base64.b64decode(user["client-key-data"]).decode(errors="replace")
        elif user.get("client-key"):
            pem = (kubeconfig.parent / str(user["client-key"])).read_text()
        found += [line for line in pem.splitlines() if line and not line.startswith("-----")]
    return found
