"""A backup of a shard on an external etcd, on real pods: an etcd pod serving TLS only
(client certificates required), a root shard on it with a key prefix, its client TLS Secret
and two endpoints, the first a Service without pods (a member down), and ``spec.backup`` from
the start. ``kcp-shard-operator backup`` takes a snapshot through the sidecar from the
healthy endpoint with kcp's client certificate; the entry is checked (endpoint, size, sha256,
keys) and the file verified again here (``etcdutl snapshot status`` and sha256 on the claim).
The shard is untouched: the same pod, no restart, every object there. A restore asked on it is
refused (``RestoreRefused``), nothing stopped. The figures go to
``bench/results/external-etcd-backup.json``.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from kcp_shard_operator.core.backup.restore import RESTORE_ANNOTATION
from testkit.kcpdata import KcpData
from testkit.kube import Cluster
from testkit.tools import log
from testkit.wait import wait_for
from tests.e2e.pki import Pki, secret, shard_secrets

from .backups import namespace_with_backup_image
from .durability import RESULTS, pki_kubeconfig, shard_apis
from .kind import (
    OLD,
    condition_of,
    describe_failure,
    etcd_pod,
    etcd_service,
    pods,
    shard_object,
    shard_spec,
    start_etcd_pod,
    wait_version,
)
from .test_backup import CLAIM, _claim, _cli, _in_sidecar

pytestmark = [pytest.mark.e2e, pytest.mark.kind]

CLIENT_TLS = "etcd-client-tls"
ETCD_SERVER_TLS = "etcd-server-tls"
ROLL_TIMEOUT = 600


def _etcd() -> list[dict[str, Any]]:
    """An etcd that takes TLS clients only, and a Service without pods: a member that is down."""
    return [
        *etcd_pod(ETCD_SERVER_TLS),
        etcd_service("etcd-down", {"app": "etcd-member-that-is-down"}),
    ]


@pytest.fixture
def etcd_namespace(kind_cluster: Cluster, operator_release: str) -> Iterator[str]:
    with namespace_with_backup_image(kind_cluster, "kcp-etcd-backup") as namespace:
        yield namespace


def _etcd_secrets(pki: Pki, namespace: str) -> list[dict[str, Any]]:
    """The etcd's serving certificate, and the client TLS Secret the Shard names."""
    crt, key = pki.serving("etcd", namespace)
    client_crt, client_key = pki.admin()
    ca = pki.ca.read_text()
    server = {"ca.crt": ca, "tls.crt": crt.read_text(), "tls.key": key.read_text()}
    client = {"ca.crt": ca, "tls.crt": client_crt.read_text(), "tls.key": client_key.read_text()}
    return [secret(ETCD_SERVER_TLS, server), secret(CLIENT_TLS, client)]


def _pod_state(cluster: Cluster, namespace: str) -> dict[str, int]:
    """Pod name -> restarts of its containers, of the root shard."""
    return {
        pod["metadata"]["name"]: sum(
            c.get("restartCount", 0) for c in pod["status"].get("containerStatuses") or []
        )
        for pod in pods(cluster, namespace, "root")
    }


def test_a_backup_of_a_shard_on_an_external_etcd_is_verified_and_leaves_it_untouched(
    kind_cluster: Cluster, etcd_namespace: str, tmp_path: Path
) -> None:
    ns, kubectl = etcd_namespace, kind_cluster.kubectl
    pki = Pki.create(tmp_path / "pki")
    found = [*_etcd_secrets(pki, ns), *shard_secrets(pki, ns, "root", []), _claim(ns)]
    kubectl("apply", "-n", ns, "-f", "-", stdin=yaml.safe_dump_all(found))
    start_etcd_pod(kind_cluster, ns, _etcd())
    healthy = f"https://etcd.{ns}.svc:2379"
    shard = shard_spec("root", ns, OLD, f"v{OLD}")
    shard["spec"]["etcd"] = {
        "endpoints": [f"https://etcd-down.{ns}.svc:2379", healthy],
        "prefix": "/root",
        "tlsSecretRef": {"name": CLIENT_TLS},
    }
    shard["spec"]["backup"] = {"claimRef": {"name": CLAIM}}
    kubectl("apply", "-n", ns, "-f", "-", stdin=yaml.safe_dump(shard))
    figures: dict[str, Any] = {}
    try:
        wait_version(kind_cluster, ns, ("root",), OLD, ROLL_TIMEOUT)
        with shard_apis(kind_cluster, ns, pki_kubeconfig(pki, tmp_path), ("root",)) as apis:
            data = KcpData.create(apis, tmp_path / "data-checks.txt", prefix="etcdbackup")
            running = _pod_state(kind_cluster, ns)
            (pod,) = running

            started = time.monotonic()
            printed = _cli(kind_cluster, "backup", "root", "-n", ns)
            took = time.monotonic() - started
            status = shard_object(kind_cluster, ns, "root")["status"]
            (entry,) = status["backups"]
            log(f"backup of root on external etcd: {entry} ({took:.1f}s via the CLI)\n{printed}")
            assert entry["name"] in printed
            assert entry["trigger"] == "OnDemand"
            assert entry["endpoint"] == healthy
            assert entry["kcpVersion"] == OLD
            assert entry["keys"] > 0
            assert entry["revision"] > 0
            assert entry["path"] == f"root/{entry['name']}.db"
            backed_up = condition_of(kind_cluster, ns, "root", "BackedUp")
            assert (backed_up["status"], backed_up["reason"]) == ("True", "Succeeded")
            assert f"from {healthy}" in backed_up["message"]

            # The file on the claim is the one listed: size, sha256, etcdutl's revision/keys.
            path = f"/backups/{entry['path']}"
            size = int(_in_sidecar(kind_cluster, ns, pod, "/busybox", "stat", "-c", "%s", path))
            digest = _in_sidecar(kind_cluster, ns, pod, "/busybox", "sha256sum", path).split()[0]
            read = json.loads(
                _in_sidecar(kind_cluster, ns, pod, "/etcdutl", "snapshot", "status", path,
                            "-w", "json")
            )  # fmt: skip
            assert (size, digest) == (entry["size"], entry["sha256"])
            assert (read["revision"], read["totalKey"]) == (entry["revision"], entry["keys"])
            figures["snapshot"] = {
                "seconds": entry["durationSeconds"],
                "bytes": entry["size"],
                "keys": entry["keys"],
                "cli seconds": round(took, 1),
                "endpoint": entry["endpoint"],
            }
            listed = _cli(kind_cluster, "backups", "root", "-n", ns)
            log(f"kcp-shard-operator backups root -n {ns}:\n{listed}")
            assert entry["name"] in listed

            # The shard was not touched: the same pod, no restart, every object there.
            assert _pod_state(kind_cluster, ns) == running
            assert data.verify(apis, "a backup of the external etcd") == []

            # A restore is refused on an external etcd: nothing stopped.
            kubectl("annotate", "shard", "root", "-n", ns, f"{RESTORE_ANNOTATION}={entry['name']}")
            wait_for(
                lambda: condition_of(kind_cluster, ns, "root", "Restored").get("reason")
                == "RestoreRefused",
                120, "the restore refused", interval=2,
            )  # fmt: skip
            refused = condition_of(kind_cluster, ns, "root", "Restored")
            log(f"Restored: {refused}")
            assert refused["status"] == "False"
            assert "external etcd" in refused["message"]
            assert "docs/backups.md#an-external-etcd" in refused["message"]
            assert _pod_state(kind_cluster, ns) == running
            assert shard_object(kind_cluster, ns, "root")["status"]["readyReplicas"] == 1
            assert data.verify(apis, "a restore refused") == []
        log(f"external etcd backup figures: {json.dumps(figures, indent=1)}")
        RESULTS.mkdir(parents=True, exist_ok=True)
        (RESULTS / "external-etcd-backup.json").write_text(json.dumps(figures, indent=1) + "\n")
    except BaseException:
        print(describe_failure(kind_cluster, ns))
        raise
