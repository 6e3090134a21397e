"""Reads through the front-proxy every second, from a pod in the cluster: the way a user in the
cluster reaches kcp (the front-proxy's Service, its users' admin kubeconfig), so that a read
that fails is the front-proxy's or kcp's failure, not a port-forward's.

The pod runs the operator's image (it has Python) with a short script that GETs each path
once a second and prints one JSON line per read: the wall-clock time, the path's key, the HTTP
status (0: no answer) and the error. :meth:`FrontProxyReader.reads` collects them from its
log; :func:`longest_failure` is the figure per step.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import yaml

from testkit.kube import Cluster
from testkit.wait import wait_for

from .kind import image_names, pod_ready

NAME = "fp-reader"
SCRIPT = """
import base64, json, os, ssl, time, urllib.error, urllib.request
config = json.load(open("/etc/reader/kubeconfig"))
cluster, user = config["clusters"][0]["cluster"], config["users"][0]["user"]
for name, key in (("cert", "client-certificate-data"), ("key", "client-key-data")):
    with open(f"/tmp/{name}.pem", "wb") as out:
        out.write(base64.b64decode(user[key]))
ca = base64.b64decode(cluster["certificate-authority-data"]).decode()
context = ssl.create_default_context(cadata=ca)
context.load_cert_chain("/tmp/cert.pem", "/tmp/key.pem")
paths = json.loads(os.environ["READ_PATHS"])
while True:
    begun = time.time()
    for key, path in paths.items():
        at = time.time()
        try:
            with urllib.request.urlopen(cluster["server"] + path, timeout=2, context=context) as r:
                status, error = r.status, ""
        except urllib.error.HTTPError as err:
            status, error = err.code, str(err.reason)
        except Exception as err:
            status, error = 0, f"{type(err).__name__}: {err}"[:160]
        print(json.dumps({"t": at, "key": key, "status": status, "error": error}), flush=True)
    time.sleep(max(0.0, 1.0 - (time.time() - begun)))
"""


@dataclass(frozen=True)
class Read:
    at: float
    """Wall-clock seconds (the kind node shares the host's clock)."""
    key: str
    status: int
    error: str

    @property
    def ok(self) -> bool:
        return self.status == 200


def _deployment(secret: str, paths: dict[str, str]) -> dict[str, Any]:
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": NAME},
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": {"app": NAME}},
            "template": {
                "metadata": {"labels": {"app": NAME}},
                "spec": {
                    "securityContext": {"runAsNonRoot": True, "runAsUser": 65532},
                    "containers": [
                        {
                            "name": "reader",
                            "image": image_names()[0],
                            "imagePullPolicy": "Never",
                            "command": ["python3", "-c", SCRIPT],
                            "env": [{"name": "READ_PATHS", "value": json.dumps(paths)}],
                            "volumeMounts": [
                                {"name": "kubeconfig", "mountPath": "/etc/reader"},
                                {"name": "tmp", "mountPath": "/tmp"},
                            ],
                        }
                    ],
                    "volumes": [
                        {"name": "kubeconfig", "secret": {"secretName": secret}},
                        {"name": "tmp", "emptyDir": {}},
                    ],
                },
            },
        },
    }


@dataclass
class FrontProxyReader:
    """The reader pod in ``namespace``, reading ``paths`` (key -> path) with the kubeconfig
    in Secret ``secret``."""

    cluster: Cluster
    namespace: str
    secret: str
    paths: dict[str, str]

    def start(self) -> None:
        body = yaml.safe_dump(_deployment(self.secret, self.paths))
        self.cluster.kubectl("apply", "-n", self.namespace, "-f", "-", stdin=body)
        wait_for(self._reading, 120, "the front-proxy reader pod reading", interval=2)

    def _pod(self) -> dict[str, Any] | None:
        found = json.loads(
            self.cluster.kubectl(
                "get", "pods", "-n", self.namespace, "-l", f"app={NAME}", "-o", "json"
            )
        )["items"]
        return found[0] if found else None

    def _reading(self) -> bool:
        pod = self._pod()
        return pod is not None and pod_ready(pod) and bool(self.reads())

    def reads(self) -> list[Read]:
        """Every read so far (the pod's whole log)."""
        out = self.cluster.kubectl(
            "logs", "-n", self.namespace, f"deployment/{NAME}", "--tail=-1", timeout=60
        )
        found = []
        for line in out.splitlines():
            try:
                entry = json.loads(line)
            except ValueError:
                continue
            found.append(Read(entry["t"], entry["key"], entry["status"], entry["error"]))
        return found

    def stop(self) -> None:
        self.cluster.kubectl(
            "delete", "deployment", NAME, "-n", self.namespace, "--ignore-not-found"
        )


def longest_failure(reads: list[Read], key: str, start: float, end: float) -> float:
    """The longest time reads of ``key`` kept failing between ``start`` and ``end`` (wall
    clock): from the first failed read of a stretch to the first good one after it (or the
    last failed one at ``end``)."""
    longest, since, last = 0.0, None, None
    for read in (r for r in reads if r.key == key and start <= r.at <= end):
        if read.ok:
            if since is not None:
                longest = max(longest, read.at - since)
            since = None
        else:
            since = read.at if since is None else since
            last = read.at
    if since is not None and last is not None:
        longest = max(longest, last - since)
    return longest


def failures(reads: list[Read], key: str, start: float, end: float) -> list[Read]:
    return [r for r in reads if r.key == key and start <= r.at <= end and not r.ok]
