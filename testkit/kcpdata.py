"""A kcp shard is a database: data made on a sharded kcp, then the check that all of it is there.

:meth:`KcpData.create` makes, on each shard through its own URL (:class:`ShardAPI`):

- in ``root``, one Workspace per shard, pinned to it with ``spec.location.selector`` over the
  ``name`` label kcp itself puts on every ``shards.core.kcp.io`` object when a shard registers
  (v0.27.1 and v0.28.x alike: ``pkg/server/server.go``, ``Labels: {"name": <--shard-name>}``);
- in each workspace's logical cluster, on the shard that holds it: a Namespace, a ConfigMap
  with known data, an APIExport and an APIBinding to it (``apis.kcp.io/v1alpha1``: stored by
  v0.27.1, served by v0.28.x through conversion from its stored v1alpha2).

It records every object's UID and content, and the root's Shard objects (the root must keep
listing every shard). :meth:`KcpData.verify` reads each one again from the shard that holds it
and returns what is missing, replaced (new UID) or changed, after printing a table of found
against created.

With a front-proxy among the APIs (key :data:`FRONT_PROXY`, its users' admin kubeconfig), it
also makes what a user makes through it: per shard a Workspace pinned to that shard and a
ConfigMap in it, both created and read back through the front-proxy by the workspace's path
(``root:<name>``), and the same LogicalCluster and ConfigMap read on the shard itself (same
UID), which shows where kcp placed them.

A workspace on a non-root shard stays ``Initializing`` in the root's view without a
front-proxy (the root's workspace controller reads its LogicalCluster through the external
URL), while its LogicalCluster on the shard turns Ready: the checker reads each logical cluster
on its shard, as the admin of system:masters.
"""

from __future__ import annotations

import json
import secrets
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .kcpapi import JSON, ShardAPI, UnreachableError
from .tools import log
from .wait import wait_for

ROOT = "root"
FRONT_PROXY = "front-proxy"
"""The key of the front-proxy's API among the shards' (not a shard: nothing is pinned to it)."""
SHARDS_PATH = "/clusters/root/apis/core.kcp.io/v1alpha1/shards"
WORKSPACES_PATH = "/clusters/root/apis/tenancy.kcp.io/v1alpha1/workspaces"
APIS = "apis/apis.kcp.io/v1alpha1"
NAMESPACE = "data-check"
EXPORT = "data-check.kcp-shard-operator.dev"
OWNER_ANNOTATION = "experimental.tenancy.kcp.io/owner"
OWNER = json.dumps({"username": "kcp-data-check", "groups": ["system:masters"]})
"""The owner recorded on each Workspace. kcp records the creator itself, except for a member of
``system:masters`` (the checker's admin): the workspace's initializers then find no owner to
act as (``could not unmarshal user info``) and its LogicalCluster never leaves
``Initializing``."""
SCHEDULE_TIMEOUT = 120.0
UNREACHABLE_WAIT = 60.0
SLOW_WAIT = 10.0


def _spec(obj: JSON, *keys: str) -> Any:
    value: Any = obj
    for key in keys:
        value = (value or {}).get(key)
    return value


CONTENT: dict[str, Callable[[JSON], JSON]] = {
    "Shard": lambda o: {"baseURL": _spec(o, "spec", "baseURL")},
    "Workspace": lambda o: {
        "cluster": _spec(o, "spec", "cluster"),
        "location": _spec(o, "spec", "location"),
    },
    "LogicalCluster": lambda o: {"path": _spec(o, "metadata", "annotations", "kcp.io/path")},
    "Namespace": lambda o: {},
    "ConfigMap": lambda o: {"data": o.get("data")},
    "APIExport": lambda o: {"identityHash": _spec(o, "status", "identityHash")},
    "APIBinding": lambda o: {"export": _spec(o, "spec", "reference", "export")},
}
"""What of each kind must not change: its identity beside the UID."""


@dataclass(frozen=True)
class Record:
    """One object as created: where it lives, its UID and content."""

    kind: str
    shard: str
    name: str
    path: str
    uid: str
    content: JSON


@dataclass(frozen=True)
class Finding:
    """One record read again: ``ok``, ``missing``, ``replaced`` (another UID), ``changed``
    (other content), ``unreachable`` or ``error <status>``."""

    record: Record
    state: str
    uid: str = ""
    detail: str = ""

    @property
    def ok(self) -> bool:
        return self.state == "ok"


def registered_shards(root: ShardAPI) -> list[str]:
    """The names of the root's ``shards.core.kcp.io`` objects."""
    body = root.get(SHARDS_PATH)
    assert body is not None, f"{SHARDS_PATH} not found on {root.name}"
    return sorted(item["metadata"]["name"] for item in body["items"])


def _record(kind: str, shard: ShardAPI, name: str, path: str, obj: JSON) -> Record:
    return Record(kind, shard.name, name, path, obj["metadata"]["uid"], CONTENT[kind](obj))


INITIALIZER_GAVE_UP = "error getting logicalcluster"
"""What a virtual-workspace server answers kcp's APIBinding initializer for a LogicalCluster
its informer has not seen yet."""
RETRY_ANNOTATION = "kcpshard.dev/retry"
RETRY_SECONDS = 10.0
WORKSPACE_TYPES_PATH = "/clusters/root/apis/tenancy.kcp.io/v1alpha1/workspacetypes"


def unstick(root: ShardAPI, target: ShardAPI, logical_cluster: str, obj: JSON) -> None:
    """Make kcp's APIBinding initializer try again on the LogicalCluster ``obj`` (at path
    ``logical_cluster`` on ``target``) when it gave up on it, by touching the root's
    WorkspaceTypes that have default APIBindings (through ``root``, the root shard or the
    front-proxy), at most every :data:`RETRY_SECONDS`.

    kcp (v0.27 to v0.31, ``apibinder_initializer_reconcile.go``) creates a new workspace's
    APIBindings through the initializing-workspaces virtual workspace. When that answers
    otherwise than "APIExport missing", the initializer records ``APIBindingsInitialized=False
    APIBindingErrors`` and does not try again: it is queued again by a LogicalCluster's
    creation or deletion, an APIBinding's change in it or a WorkspaceType's change, never by a
    change of the LogicalCluster itself. A standalone virtual-workspace server whose informer
    has not listed the shard again since the shard's pod was replaced answers "error getting
    logicalcluster ... not found", and the workspace stays ``Initializing``."""
    stuck = any(
        found.get("type") == "APIBindingsInitialized"
        and found.get("reason") == "APIBindingErrors"
        and INITIALIZER_GAVE_UP in str(found.get("message"))
        for found in _spec(obj, "status", "conditions") or []
    )
    if not stuck or _spec(obj, "status", "phase") != "Initializing":
        return
    if time.monotonic() - _touched.get(logical_cluster, -RETRY_SECONDS) < RETRY_SECONDS:
        return
    _touched[logical_cluster] = time.monotonic()
    types = root.get(WORKSPACE_TYPES_PATH) or {}
    touch = {"metadata": {"annotations": {RETRY_ANNOTATION: str(time.time())}}}
    touched = []
    for workspace_type in types.get("items") or []:
        if _spec(workspace_type, "spec", "defaultAPIBindings"):
            name = workspace_type["metadata"]["name"]
            path = f"{WORKSPACE_TYPES_PATH}/{name}"
            status, _ = root.request("PATCH", path, touch, "application/merge-patch+json")
            touched.append(f"{name} ({status})")
    log(
        f"kcp's APIBinding initializer gave up on {logical_cluster} on {target.name} "
        f"({INITIALIZER_GAVE_UP}): touched the root's WorkspaceTypes {', '.join(touched)}"
    )


_touched: dict[str, float] = {}
"""When :func:`unstick` last touched the WorkspaceTypes for a LogicalCluster."""


def _initialized(root: ShardAPI, target: ShardAPI, logical_cluster: str) -> Callable[[JSON], bool]:
    """Whether a LogicalCluster is Ready; :func:`unstick` while it is not."""

    def check(obj: JSON) -> bool:
        if _spec(obj, "status", "phase") == "Ready":
            return True
        unstick(root, target, logical_cluster, obj)
        return False

    return check


def _ready(shard: ShardAPI, path: str, check: Callable[[JSON], bool]) -> JSON | None:
    obj = shard.get(path)
    return obj if obj is not None and check(obj) else None


def _wait(shard: ShardAPI, path: str, check: Callable[[JSON], bool], what: str) -> JSON:
    """:func:`wait_for` the object at ``path``; a wait longer than :data:`SLOW_WAIT` is
    logged, with when it began (what kcp logged meanwhile tells why)."""
    begun = time.monotonic()
    found = wait_for(lambda: _ready(shard, path, check), SCHEDULE_TIMEOUT, what, interval=1)
    took = time.monotonic() - begun
    if took > SLOW_WAIT:
        since = time.strftime("%H:%M:%S", time.localtime(time.time() - took))
        log(f"{what}: waited {took:.1f}s (since {since})")
    return found


def _workspace_records(
    root: ShardAPI, target: ShardAPI, workspace: str, token: str
) -> list[Record]:
    """A Workspace pinned to ``target`` and the objects inside it."""
    ws_path = f"{WORKSPACES_PATH}/{workspace}"
    root.create(
        WORKSPACES_PATH,
        {
            "apiVersion": "tenancy.kcp.io/v1alpha1",
            "kind": "Workspace",
            "metadata": {"name": workspace, "annotations": {OWNER_ANNOTATION: OWNER}},
            "spec": {"location": {"selector": {"matchLabels": {"name": target.name}}}},
        },
    )
    ws = _wait(root, ws_path, lambda o: bool(_spec(o, "spec", "cluster")), f"{ws_path} scheduled")
    cluster = f"/clusters/{ws['spec']['cluster']}"
    lc_path = f"{cluster}/apis/core.kcp.io/v1alpha1/logicalclusters/cluster"
    logical = _wait(
        target,
        lc_path,
        _initialized(root, target, lc_path),
        f"LogicalCluster of {workspace} Ready on {target.name}",
    )
    ns_path = f"{cluster}/api/v1/namespaces"
    namespace = target.create(ns_path, {"metadata": {"name": NAMESPACE}})
    cm_path = f"{ns_path}/{NAMESPACE}/configmaps"
    data = {"workspace": workspace, "shard": target.name, "token": token}
    configmap = target.create(cm_path, {"metadata": {"name": "data-check"}, "data": data})
    target.create(
        f"{cluster}/{APIS}/apiexports",
        {"apiVersion": "apis.kcp.io/v1alpha1", "kind": "APIExport", "metadata": {"name": EXPORT}},
    )
    export_path = f"{cluster}/{APIS}/apiexports/{EXPORT}"
    export = _wait(
        target, export_path, lambda o: bool(_spec(o, "status", "identityHash")), "identity"
    )
    binding_body = {
        "apiVersion": "apis.kcp.io/v1alpha1",
        "kind": "APIBinding",
        "metadata": {"name": "data-check"},
        "spec": {"reference": {"export": {"name": EXPORT}}},
    }
    target.create(f"{cluster}/{APIS}/apibindings", binding_body)
    binding_path = f"{cluster}/{APIS}/apibindings/data-check"
    binding = _wait(
        target,
        binding_path,
        lambda o: _spec(o, "status", "phase") == "Bound",
        f"APIBinding in {workspace} Bound",
    )
    inside = f"{workspace}/"
    return [
        _record("Workspace", root, workspace, ws_path, ws),
        _record("LogicalCluster", target, inside, lc_path, logical),
        _record("Namespace", target, inside + NAMESPACE, f"{ns_path}/{NAMESPACE}", namespace),
        _record(
            "ConfigMap",
            target,
            f"{inside}{NAMESPACE}/data-check",
            f"{cm_path}/data-check",
            configmap,
        ),
        _record("APIExport", target, inside + EXPORT, export_path, export),
        _record("APIBinding", target, inside + "data-check", binding_path, binding),
    ]


def _through_front_proxy(
    front: ShardAPI, target: ShardAPI, workspace: str, token: str
) -> list[Record]:
    """A Workspace pinned to ``target`` and a ConfigMap in it, created through the front-proxy
    as its users' admin (kcp records that user as the owner), read through it by path and on
    ``target`` by logical cluster."""
    ws_path = f"{WORKSPACES_PATH}/{workspace}"
    front.create(
        WORKSPACES_PATH,
        {
            "apiVersion": "tenancy.kcp.io/v1alpha1",
            "kind": "Workspace",
            "metadata": {"name": workspace},
            "spec": {"location": {"selector": {"matchLabels": {"name": target.name}}}},
        },
    )

    def ready(workspace: JSON) -> bool:
        if _spec(workspace, "status", "phase") == "Ready":
            return True
        cluster = _spec(workspace, "spec", "cluster")
        if cluster:
            path = f"/clusters/{cluster}/apis/core.kcp.io/v1alpha1/logicalclusters/cluster"
            unstick(front, target, path, target.get(path) or {})
        return False

    ws = _wait(front, ws_path, ready, f"{ws_path} Ready through the front-proxy")
    cluster = f"/clusters/{ws['spec']['cluster']}"
    lc_path = f"{cluster}/apis/core.kcp.io/v1alpha1/logicalclusters/cluster"
    logical = _wait(
        target, lc_path, lambda o: bool(o), f"LogicalCluster of {workspace} on {target.name}"
    )
    by_path = f"/clusters/root:{workspace}/api/v1/namespaces/default/configmaps"
    data = {"workspace": workspace, "shard": target.name, "token": token}
    configmap = front.create(by_path, {"metadata": {"name": "data-check"}, "data": data})
    on_shard = f"{cluster}/api/v1/namespaces/default/configmaps/data-check"
    inside = f"{workspace}/"
    return [
        _record("Workspace", front, workspace, ws_path, ws),
        _record("LogicalCluster", target, inside, lc_path, logical),
        _record(
            "ConfigMap", front, f"{inside}default/data-check", f"{by_path}/data-check", configmap
        ),
        _record("ConfigMap", target, f"{inside}default/data-check", on_shard, configmap),
    ]


def _read(shard: ShardAPI, record: Record) -> Finding:
    try:
        status, obj = shard.request("GET", record.path)
    except UnreachableError as err:
        return Finding(record, "unreachable", detail=str(err))
    if status == 404:
        return Finding(record, "missing")
    if status != 200:
        return Finding(record, f"error {status}", detail=str(obj)[:200])
    uid = str(obj["metadata"]["uid"])
    if uid != record.uid:
        return Finding(record, "replaced", uid, "a new object of the same name")
    content = CONTENT[record.kind](obj)
    if content != record.content:
        return Finding(record, "changed", uid, f"{record.content} -> {content}")
    return Finding(record, "ok", uid)


def table(findings: list[Finding], step: str) -> str:
    """Found against created, one row per object, with the counts in the first line."""
    bad = [f for f in findings if not f.ok]
    states = sorted({f.state for f in bad})
    counts = ", ".join(f"{sum(f.state == s for f in bad)} {s}" for s in states) or "all intact"
    rows = [
        f"data check {step}: {len(findings)} created, "
        f"{sum(f.ok for f in findings)} found unchanged ({counts})",
        f"{'kind':<15} {'shard':<11} {'name':<56} {'created uid':<12} {'found uid':<12} state",
    ]
    for finding in findings:
        record = finding.record
        found = finding.uid[:8] if finding.uid else "-"
        line = (
            f"{record.kind:<15} {record.shard:<11} {record.name:<56} {record.uid[:8]:<12} "
            f"{found:<12} {finding.state}"
        )
        rows.append(line + (f" ({finding.detail})" if finding.detail else ""))
    return "\n".join(rows)


@dataclass
class KcpData:
    """The records of :meth:`create`; ``report`` (optional) gets every table appended."""

    records: list[Record]
    report: Path | None = None
    tables: list[str] = field(default_factory=list)

    @classmethod
    def create(
        cls, apis: Mapping[str, ShardAPI], report: Path | None = None, prefix: str = "data"
    ) -> KcpData:
        """A workspace on each shard of ``apis`` (by kcp shard name, ``root`` among them)
        with its objects, and the root's Shard objects; with the front-proxy among them, a
        workspace per shard made through it too. Printed as the first table."""
        started = time.monotonic()
        shards = {name: api for name, api in apis.items() if name != FRONT_PROXY}
        root = shards[ROOT]
        token = secrets.token_hex(3)
        wait_for(
            lambda: set(shards) <= set(registered_shards(root)),
            SCHEDULE_TIMEOUT,
            f"the root shard listing the shards {sorted(shards)}",
        )
        records = []
        for name in sorted(shards):
            path = f"{SHARDS_PATH}/{name}"
            shard = root.get(path)
            assert shard is not None, path
            records.append(_record("Shard", root, name, path, shard))
        for name in sorted(shards):
            workspace = f"{prefix}-{name}-{token}"
            records += _workspace_records(root, shards[name], workspace, token)
        front = apis.get(FRONT_PROXY)
        if front is not None:
            for name in sorted(shards):
                workspace = f"{prefix}-fp-{name}-{token}"
                records += _through_front_proxy(front, shards[name], workspace, token)
        data = cls(records, report)
        log(f"created {len(records)} objects to check in {time.monotonic() - started:.1f}s")
        data.verify(apis, "after creating them")
        return data

    def through_front_proxy(self) -> dict[str, str]:
        """Per shard, the path of the ConfigMap made through the front-proxy in the workspace
        on that shard, as read through it (by the workspace's path)."""
        on_shards = {
            r.name: r.shard
            for r in self.records
            if r.kind == "ConfigMap" and r.shard != FRONT_PROXY
        }
        return {
            on_shards[r.name]: r.path
            for r in self.records
            if r.kind == "ConfigMap" and r.shard == FRONT_PROXY
        }

    def verify(self, shards: Mapping[str, ShardAPI], step: str) -> list[Finding]:
        """Every record read again from its shard; returns the ones not ``ok``. Reads again
        while a shard is unreachable, for up to a minute; nothing else is retried."""
        deadline = time.monotonic() + UNREACHABLE_WAIT
        while True:
            findings = [_read(shards[r.shard], r) for r in self.records]
            if not any(f.state == "unreachable" for f in findings):
                break
            if time.monotonic() >= deadline:
                break
            time.sleep(2)
        text = table(findings, step)
        self.tables.append(text)
        print(f"\n{text}\n", flush=True)
        if self.report is not None:
            with self.report.open("a") as out:
                out.write(text + "\n\n")
        return [f for f in findings if not f.ok]

    def assert_intact(self, shards: Mapping[str, ShardAPI], step: str) -> None:
        """:meth:`verify`, failing on any object missing, replaced or changed."""
        problems = self.verify(shards, step)
        assert not problems, f"data lost {step}:\n{table(problems, step)}"
