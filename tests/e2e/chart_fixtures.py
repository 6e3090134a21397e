"""Helpers for the chart's end-to-end tests: a release of the chart, the samples in a namespace
of their own, RBAC denials in an operator log, the operator with a ServiceAccount's token."""

from __future__ import annotations

import re
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from testkit.kube import Cluster, delete_shards
from testkit.operator_process import OperatorProcess
from testkit.tools import log
from tests.chart import CHART, SAMPLES

SAMPLES_NAMESPACE = "kcp-samples"
_Q = r'\\*"'  # a quote, escaped or not, as it appears in kopf's logged API errors
RBAC_DENIAL = re.compile(
    rf"User {_Q}system:serviceaccount:[^\"\\]+{_Q} cannot (?P<verb>\w+) "
    rf"resource {_Q}(?P<resource>[^\"\\]+){_Q}"
    rf"(?: in API group {_Q}[^\"\\]*{_Q})?(?: in the namespace {_Q}(?P<namespace>[^\"\\]+){_Q})?"
)


@contextmanager
def release(cluster: Cluster, name: str, namespace: str, *values: str) -> Iterator[str]:
    """``helm install --wait`` of the chart; yields the install output, uninstalls afterwards."""
    log(f"helm install {name} into {namespace} {' '.join(values)}")
    out = cluster.helm(
        "install", name, str(CHART), "--namespace", namespace,
        "--wait", "--timeout", "120s", *values,
    )  # fmt: skip
    try:
        yield out
    finally:
        cluster.helm("uninstall", name, "--namespace", namespace, "--wait", "--ignore-not-found")


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
    # kwok pods run no kcp: the operator does not ask it.
    operator = OperatorProcess(cluster=as_sa, args=[*args, "--no-kcp-checks"], log_path=log_path)
    operator.start()
    try:
        yield operator
    finally:
        for namespace in namespaces:
            delete_shards(admin, namespace)
        operator.stop()
