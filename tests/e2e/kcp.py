"""A real sharded kcp on this machine: a root shard and the non-root shard ``shard-1``.

Two ``kcp start`` processes of the pinned old kcp (``KCP_VERSION`` in hack/versions.env),
each with its own root directory and embedded etcd, on free 127.0.0.1 ports. ``shard-1``
gets ``--root-shard-kubeconfig-file`` (the root's admin.kubeconfig, context shard-base) and
``--cache-kubeconfig`` (the root shard's embedded cache server), so its identitycache
controller writes the ConfigMap ``apiexport-identity-cache`` into ``system:shard``.

kcp's own ``cmd/sharded-test-server`` is not used: it also needs the cache-server,
front-proxy and virtual-workspaces binaries and fixed ports (6443, 6444+n).

The pytest fixtures live in :mod:`tests.e2e.kcp_fixture`.
"""

from __future__ import annotations

import base64
import json
import shutil
import ssl
import subprocess
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from testkit.metrics import Totals, request_totals
from testkit.process import LoggedProcess, free_ports, on_free_ports
from testkit.tools import build_tools, log, tools_env
from testkit.wait import WaitTimeoutError, wait_for

CONFIGMAP_PATH = (
    "/clusters/system:shard/api/v1/namespaces/default/configmaps/apiexport-identity-cache"
)
START_TIMEOUT = 240.0
ROOT_LOGICALCLUSTER = "/clusters/root/apis/core.kcp.io/v1alpha1/logicalclusters/cluster"
ROOT_EXPORTS = "/clusters/root/apis/apis.kcp.io/v1alpha1/apiexports"
ROOT_BINDINGS = "/clusters/root/apis/apis.kcp.io/v1alpha1/apibindings"
ROOT_SHARDS = "/clusters/root/apis/core.kcp.io/v1alpha1/shards"
CACHED = "/services/cache/shards/*/clusters/*/apis/apis.kcp.io/v1alpha1"
"""The root's embedded cache server, every shard's and cluster's objects (``--cache-kubeconfig``
of shard-1 points at it)."""
CLUSTER_ANNOTATION = "kcp.io/cluster"
SHARD_EXPORTS = ("shards.core.kcp.io", "tenancy.kcp.io", "topology.kcp.io")
"""The root's APIExports a non-root shard resolves and binds before it starts."""


@dataclass
class KcpProcess:
    """One ``kcp start`` process serving one shard."""

    name: str
    binary: Path
    root_dir: Path
    extra_args: list[str] = field(default_factory=list)
    process: LoggedProcess = field(init=False)
    port: int = field(init=False)
    etcd_client_port: int = field(init=False)
    etcd_peer_port: int = field(init=False)

    def __post_init__(self) -> None:
        self.process = LoggedProcess(self.root_dir.parent / f"{self.name}.log")
        self.port, self.etcd_client_port, self.etcd_peer_port = free_ports(3)

    @property
    def base_url(self) -> str:
        return f"https://127.0.0.1:{self.port}"

    @property
    def admin_kubeconfig(self) -> Path:
        return self.root_dir / "admin.kubeconfig"

    @property
    def etcd_dir(self) -> Path:
        return self.root_dir / "etcd-server"

    def args(self) -> list[str]:
        return [
            str(self.binary),
            "start",
            f"--root-directory={self.root_dir}",
            "--bind-address=127.0.0.1",
            "--external-hostname=127.0.0.1",
            f"--secure-port={self.port}",
            f"--shard-base-url={self.base_url}",
            f"--shard-external-url={self.base_url}",
            f"--embedded-etcd-client-port={self.etcd_client_port}",
            f"--embedded-etcd-peer-port={self.etcd_peer_port}",
            f"--embedded-etcd-directory={self.etcd_dir}",
            "--kubeconfig-path=admin.kubeconfig",
            *self.extra_args,
        ]

    def start(self) -> None:
        self.root_dir.mkdir(parents=True, exist_ok=True)
        self.process.start(self.args(), cwd=self.root_dir)

    def start_over(self) -> None:
        """Forget a first start that failed: new ports and an empty root directory."""
        self.process.stop(0)
        self.port, self.etcd_client_port, self.etcd_peer_port = free_ports(3)
        shutil.rmtree(self.root_dir, ignore_errors=True)

    def running(self) -> bool:
        return self.process.running()

    def stop(self, grace: float = 20) -> int | None:
        """SIGTERM the process group, SIGKILL it after ``grace`` seconds."""
        return self.process.stop(grace)

    def log_tail(self, lines: int = 40) -> str:
        return self.process.log_tail(lines)


def _json(raw: bytes) -> dict[str, Any]:
    """A JSON object body, or ``{"text": ...}`` for plain answers such as /readyz's "ok"."""
    try:
        value = json.loads(raw)
    except ValueError:
        return {"text": raw.decode(errors="replace")}
    return value if isinstance(value, dict) else {"value": value}


def _kubeconfig(path: Path) -> dict[str, Any]:
    loaded: dict[str, Any] = yaml.safe_load(path.read_text())
    return loaded


def _user_token(kubeconfig: dict[str, Any], user: str) -> str:
    for item in kubeconfig["users"]:
        if item["name"] == user:
            return str(item["user"]["token"])
    raise KeyError(user)


@dataclass
class ShardedKcp:
    """A running root shard and ``shard-1``, plus independent HTTP helpers for assertions."""

    workdir: Path
    root: KcpProcess
    shard: KcpProcess

    @property
    def client_ca(self) -> Path:
        """The CA of ``shard-1``'s ``--client-ca-file`` (its key lies next to it)."""
        return self.workdir / "client-ca" / "ca.crt"

    def request(
        self, shard: KcpProcess, method: str, path: str, user: str = "shard-admin"
    ) -> tuple[int, dict[str, Any]]:
        """One request to ``shard`` as ``user`` of its admin.kubeconfig."""
        context = ssl.create_default_context(cafile=str(shard.root_dir / "apiserver.crt"))
        token = _user_token(_kubeconfig(shard.admin_kubeconfig), user)
        request = urllib.request.Request(
            shard.base_url + path, method=method, headers={"Authorization": f"Bearer {token}"}
        )
        try:
            with urllib.request.urlopen(request, timeout=10, context=context) as answer:
                return answer.status, _json(answer.read())
        except urllib.error.HTTPError as err:
            return err.code, _json(err.read())

    def request_totals(self, shard: KcpProcess) -> Totals:
        """The API request counters of ``shard`` now (its /metrics)."""
        status, body = self.request(shard, "GET", "/metrics")
        assert status == 200, f"GET /metrics on {shard.name}: {status} {body}"
        return request_totals(body["text"])

    def configmap(self, shard: KcpProcess | None = None) -> dict[str, Any] | None:
        """The identity-cache ConfigMap on ``shard`` (default ``shard-1``), or None."""
        status, body = self.request(shard or self.shard, "GET", CONFIGMAP_PATH)
        if status == 404:
            return None
        assert status == 200, f"GET {CONFIGMAP_PATH}: {status} {body}"
        return body

    def ready(self, shard: KcpProcess) -> bool:
        shard.process.check_running(f"kcp {shard.name}")
        if not shard.admin_kubeconfig.exists():
            return False
        try:
            return self.request(shard, "GET", "/readyz")[0] == 200
        except OSError:
            return False

    def wait_ready(self, shard: KcpProcess, timeout: float = START_TIMEOUT) -> float:
        """Wait for admin.kubeconfig and /readyz; return the seconds it took."""
        start = time.monotonic()
        wait_for(lambda: self.ready(shard), timeout, f"kcp {shard.name} /readyz")
        return time.monotonic() - start

    def start_new(self, shard: KcpProcess) -> float:
        """Start ``shard`` on a new root directory and wait for /readyz; return the seconds it took.

        When a port from ``free_ports`` was taken meanwhile, kcp exits at once and is started
        on other ports.
        """

        def start() -> float:
            shard.start()
            return self.wait_ready(shard)

        return on_free_ports(start, shard.start_over)

    def missing_for_shards(self) -> list[str]:
        """What shard-1, restarted now, would still lack from the root, empty once the root
        serves it all.

        Before it answers /readyz a non-root shard resolves the identities of the root's
        APIExports in :data:`SHARD_EXPORTS`, binds the APIBindings of its ``system:shard`` to
        those exports as the cache server holds them (APIExports and APIResourceSchemas the
        root replicates into it), lists their resources across its logical clusters at those
        identities, and creates or updates its Shard object in the root, where
        ``shards.core.kcp.io`` must be served. A root started on an empty etcd answers
        /readyz before all of that holds, with new identities and schemas: restarted then,
        shard-1 was seen once never to answer /readyz, its wildcard lists of
        ``shards.core.kcp.io`` and the other root APIs unserved for 240 s. The running
        shard-1 itself is no sign: with new identities its bindings stay on the old ones
        (seen for 240 s) until it restarts.
        """
        missing: list[str] = []
        exports = self._items(self.root, ROOT_EXPORTS, missing)
        bindings = self._items(self.root, ROOT_BINDINGS, missing)
        cached_exports = self._items(self.root, f"{CACHED}/apiexports", missing, "root")
        cached_schemas = self._items(self.root, f"{CACHED}/apiresourceschemas", missing, "root")
        status, body = self.request(self.root, "GET", ROOT_SHARDS)
        if status != 200:
            missing.append(f"shards.core.kcp.io served in root ({status} {body.get('message')})")
        for name in SHARD_EXPORTS:
            export = exports.get(name) or {}
            identity = (export.get("status") or {}).get("identityHash")
            if not identity:
                missing.append(f"APIExport {name} in root with its identity")
                continue
            if ((bindings.get(name) or {}).get("status") or {}).get("phase") != "Bound":
                missing.append(f"the root's APIBinding {name} bound")
            cached = ((cached_exports.get(name) or {}).get("status") or {}).get("identityHash")
            if cached != identity:
                missing.append(f"APIExport {name} in the cache server with its identity")
            names = (export.get("spec") or {}).get("latestResourceSchemas") or []
            absent = [schema for schema in names if schema not in cached_schemas]
            missing += [f"APIResourceSchema {schema} in the cache server" for schema in absent]
        return missing

    def _items(
        self, shard: KcpProcess, path: str, missing: list[str], cluster: str | None = None
    ) -> dict[str, Any]:
        """The items listed at ``path`` (of the logical cluster ``cluster`` only, when given)
        by name; on an error, what failed added to ``missing``."""
        status, body = self.request(shard, "GET", path)
        if status != 200:
            missing.append(f"GET {path} on {shard.name}: {status} {body.get('message')}")
            return {}
        return {
            item["metadata"]["name"]: item
            for item in body.get("items") or []
            if cluster is None
            or (item["metadata"].get("annotations") or {}).get(CLUSTER_ANNOTATION) == cluster
        }

    def wait_root_serves_shards(self, timeout: float = START_TIMEOUT) -> float:
        """Wait until :meth:`missing_for_shards` is empty; return the seconds it took."""
        start = time.monotonic()
        missing: list[str] = []

        def served() -> bool:
            missing[:] = self.missing_for_shards()
            return not missing

        try:
            wait_for(served, timeout, "the root serving what shard-1 needs to start")
        except WaitTimeoutError as err:
            raise WaitTimeoutError(f"{err}; still missing: {'; '.join(missing)}") from None
        return time.monotonic() - start

    def restart_shard(self, binary: Path) -> float:
        """Restart ``shard-1`` on its data with ``binary``; return the seconds until ready."""
        self.shard.stop()
        self.shard.binary = binary
        self.shard.start()
        return self.wait_ready(self.shard)

    def restart_root_on_empty_etcd(self, aside: Path) -> float:
        """Restart the root shard after moving its etcd directory to ``aside``, as a pod does
        that comes back without its volume: certificates and the shard-admin token stay.
        Returns the seconds until ready."""
        return self._restart_on_empty_etcd(self.root, aside)

    def restart_shard_on_empty_etcd(self, aside: Path) -> float:
        """:meth:`restart_root_on_empty_etcd` for ``shard-1``."""
        return self._restart_on_empty_etcd(self.shard, aside)

    def _restart_on_empty_etcd(self, process: KcpProcess, aside: Path) -> float:
        process.stop()
        shutil.move(process.etcd_dir, aside)
        process.start()
        return self.wait_ready(process)

    def restart_root_on(self, etcd: Path) -> float:
        """Restart the root shard on the etcd directory ``etcd`` (a restored backup)."""
        self.root.stop()
        shutil.rmtree(self.root.etcd_dir, ignore_errors=True)
        shutil.move(etcd, self.root.etcd_dir)
        self.root.start()
        return self.wait_ready(self.root)

    def stop(self) -> None:
        self.shard.stop()
        self.root.stop()


def cache_kubeconfig(root: KcpProcess) -> dict[str, Any]:
    """Access to the root shard's embedded cache server as its shard-admin."""
    ca = base64.b64encode((root.root_dir / "apiserver.crt").read_bytes()).decode()
    token = _user_token(_kubeconfig(root.admin_kubeconfig), "shard-admin")
    return {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {
                "name": "cache",
                "cluster": {"server": root.base_url, "certificate-authority-data": ca},
            }
        ],
        "users": [{"name": "cache", "user": {"token": token}}],
        "contexts": [{"name": "cache", "context": {"cluster": "cache", "user": "cache"}}],
        "current-context": "cache",
    }


def kcp_binaries() -> tuple[Path, Path]:
    """The old kcp and the stand-in without the identitycache controller, built if missing."""
    build_tools("kcp")
    binary = Path(tools_env()["KCP_BINARY"])
    standin = binary.with_name("kcp-without-identitycache")
    assert binary.exists(), f"{binary} missing after hack/tools.sh build kcp"
    assert standin.exists(), f"{standin} missing: rerun hack/kcp-build.sh"
    return binary, standin


def _openssl(*args: str) -> None:
    subprocess.run(["openssl", *args], check=True, capture_output=True)


def openssl_ca(folder: Path) -> Path:
    """A throw-away client CA (``ca.crt``, ``ca.key`` in ``folder``); returns the cert."""
    folder.mkdir(parents=True, exist_ok=True)
    _openssl(
        "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
        "-keyout", str(folder / "ca.key"), "-out", str(folder / "ca.crt"), "-days", "1",
        "-subj", "/CN=kcp-shard-operator-e2e-client-ca",
    )  # fmt: skip
    return folder / "ca.crt"


def client_certificate(ca: Path, folder: Path, user: str, group: str) -> tuple[Path, Path]:
    """A client certificate for ``user`` in ``group``, signed by the CA at ``ca``."""
    folder.mkdir(parents=True, exist_ok=True)
    key, csr, crt = folder / f"{user}.key", folder / f"{user}.csr", folder / f"{user}.crt"
    _openssl(
        "req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
        "-keyout", str(key), "-out", str(csr), "-subj", f"/O={group}/CN={user}",
    )  # fmt: skip
    _openssl(
        "x509", "-req", "-in", str(csr), "-CA", str(ca), "-CAkey", str(ca.with_suffix(".key")),
        "-CAcreateserial", "-out", str(crt), "-days", "1",
    )  # fmt: skip
    return crt, key


def start_sharded_kcp(workdir: Path, binary: Path) -> ShardedKcp:
    """Start the root shard, then ``shard-1``; return once shard-1 wrote the ConfigMap."""
    began = time.monotonic()
    root = KcpProcess("root", binary, workdir / "root")
    shard = KcpProcess("shard-1", binary, workdir / "shard-1")
    kcp = ShardedKcp(workdir, root, shard)
    try:
        log(f"starting kcp root shard ({binary})")
        log(f"kcp root shard ready on {root.base_url} in {kcp.start_new(root):.1f}s")
        cache = workdir / "cache.kubeconfig"
        cache.write_text(yaml.safe_dump(cache_kubeconfig(root)))
        cache.chmod(0o600)
        client_ca = openssl_ca(workdir / "client-ca")
        shard.extra_args = [
            "--shard-name=shard-1",
            f"--root-shard-kubeconfig-file={root.admin_kubeconfig}",
            f"--cache-kubeconfig={cache}",
            f"--client-ca-file={client_ca}",
        ]
        log("starting kcp shard-1")
        log(f"kcp shard-1 ready on {shard.base_url} in {kcp.start_new(shard):.1f}s")
        wait_for(kcp.configmap, 120, "apiexport-identity-cache on shard-1")
        log(f"sharded kcp up, ConfigMap written, {time.monotonic() - began:.1f}s in total")
    except BaseException:
        for process in (shard, root):
            print(process.log_tail())
        kcp.stop()
        raise
    return kcp


def identity(obj: dict[str, Any] | None) -> tuple[str, str]:
    assert obj is not None
    return obj["metadata"]["uid"], obj["metadata"]["resourceVersion"]


def root_state(kcp: ShardedKcp) -> dict[str, Any]:
    """What the cleanup must never change on the root shard."""
    status, cluster = kcp.request(kcp.root, "GET", ROOT_LOGICALCLUSTER)
    assert status == 200, cluster
    status, exports = kcp.request(kcp.root, "GET", ROOT_EXPORTS)
    assert status == 200, exports
    return {
        "logicalcluster": identity(cluster),
        "exports": sorted(
            (e["metadata"]["name"], e["metadata"]["resourceVersion"], e["status"]["identityHash"])
            for e in exports["items"]
        ),
        "configmap": kcp.configmap(kcp.root),
    }
