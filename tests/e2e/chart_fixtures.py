"""Helpers for the chart's end-to-end tests: helm against the test cluster, a kubeconfig with a
ServiceAccount token, the samples in a namespace of their own, RBAC denials in an operator log."""

from __future__ import annotations

import json
import re
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import yaml

from tests.chart import CHART, SAMPLES

from .kube import Cluster, KubectlError, OperatorProcess, log

SAMPLES_NAMESPACE = "kcp-samples"
_Q = r'\\*"'  # a quote, escaped or not, as it appears in kopf's logged API errors
RBAC_DENIAL = re.compile(
    rf"User {_Q}system:serviceaccount:[^\"\\]+{_Q} cannot (?P<verb>\w+) "
    rf"resource {_Q}(?P<resource>[^\"\\]+){_Q}"
    rf"(?: in API group {_Q}[^\"\\]*{_Q})?(?: in the namespace {_Q}(?P<namespace>[^\"\\]+){_Q})?"
)


class HelmError(RuntimeError):
    """A helm call that exited non-zero."""


def helm(cluster: Cluster, *args: str, timeout: float = 300) -> str:
    """Run helm against the cluster and return its stdout; raise HelmError on failure."""
    proc = subprocess.run(
        ["helm", *args], env=dict(cluster.env), capture_output=True, text=True, timeout=timeout
    )
    if proc.returncode != 0:
        raise HelmError(f"helm {' '.join(args)} exited {proc.returncode}: {proc.stderr.strip()}")
    return proc.stdout


@contextmanager
def release(cluster: Cluster, name: str, namespace: str, *values: str) -> Iterator[str]:
    """``helm install --wait`` of the chart; yields the install output, uninstalls afterwards."""
    log(f"helm install {name} into {namespace} {' '.join(values)}")
    out = helm(
        cluster, "install", name, str(CHART), "--namespace", namespace,
        "--wait", "--timeout", "120s", *values,
    )  # fmt: skip
    try:
        yield out
    finally:
        helm(cluster, "uninstall", name, "--namespace", namespace, "--wait", "--ignore-not-found")


def token_cluster(cluster: Cluster, namespace: str, service_account: str, path: Path) -> Cluster:
    """The cluster as ServiceAccount ``namespace/service_account``, with a fresh token."""
    token = cluster.kubectl(
        "create", "token", service_account, "--namespace", namespace, "--duration", "1h"
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


def samples_in(namespace: str) -> str:
    """manifests/samples/ as one YAML stream, moved to ``namespace``."""
    docs = [path.read_text() for path in sorted(SAMPLES.glob("*.yaml"))]
    return "\n---\n".join(docs).replace(SAMPLES_NAMESPACE, namespace)


def rbac_denials(text: str) -> list[str]:
    """The distinct RBAC denials of a ServiceAccount in a log, as "<verb> <resource> in <where>"."""
    return sorted(
        {
            f"{m['verb']} {m['resource']} in {m['namespace'] or 'the cluster scope'}"
            for m in RBAC_DENIAL.finditer(text)
        }
    )


@contextmanager
def running_operator(
    admin: Cluster, as_sa: Cluster, args: list[str], log_path: Path, namespaces: list[str]
) -> Iterator[OperatorProcess]:
    """The operator as a local process with ``as_sa``'s credentials.

    Afterwards, also after a failure, the Shards in ``namespaces`` are deleted while the operator
    still runs, so that it removes its finalizer and the namespaces can go.
    """
    operator = OperatorProcess(cluster=as_sa, args=args, log_path=log_path)
    operator.start()
    try:
        yield operator
    finally:
        for namespace in namespaces:
            try:
                admin.kubectl(
                    "delete", "shards", "--all", "-n", namespace, "--ignore-not-found",
                    "--timeout=60s", timeout=90,
                )  # fmt: skip
            except KubectlError as err:
                log(f"could not delete the Shards in {namespace}: {err}")
        operator.stop()
