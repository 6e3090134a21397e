"""``kcp-shard-operator restore --installation ROOT``: every Shard of an installation restored
in place from backups of one point in time (:mod:`kcp_shard_operator.core.backup.point`), and
waited for with its progress printed.

The root is asked first, and the others once the operator has recorded the root's restore:
the operator then holds the root's Job until the others have stopped, and each other shard's
start until the root runs on its restored data (it records which shard holds each workspace).
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable

from kcp_shard_operator.constants import SHARD_API_VERSION, SHARD_KIND
from kcp_shard_operator.core.api.model import JSON
from kcp_shard_operator.core.backup.point import Member, Point, PointError, choose, version_changes
from kcp_shard_operator.core.backup.restore import RESTORE_ANNOTATION, installation_of, refusal
from kcp_shard_operator.core.status.conditions import READY, condition
from kcp_shard_operator.kube.client import Kube

POLL_SECONDS = 2.0
ENDED = ("Done", "Failed", "Refused")


def _root_ref(obj: JSON) -> str | None:
    return ((obj.get("spec") or {}).get("rootShardRef") or {}).get("name")


def members_of(shards: list[JSON], root: str) -> list[JSON]:
    """The root Shard named ``root`` and the Shards naming it, root first."""
    found = [obj for obj in shards if obj["metadata"]["name"] == root and not _root_ref(obj)]
    if not found:
        raise PointError(f"no root Shard {root!r} (a Shard without spec.rootShardRef)")
    return found + sorted(
        (obj for obj in shards if _root_ref(obj) == root), key=lambda obj: obj["metadata"]["name"]
    )


def chosen(shards: list[JSON], root: str, named: list[str]) -> Point:
    members = [
        Member(obj["metadata"]["name"], not _root_ref(obj), obj.get("status"))
        for obj in members_of(shards, root)
    ]
    return choose(members, named)


def patches(point: Point, shards: list[JSON], set_version: bool) -> dict[str, JSON]:
    """Per Shard, the merge patch that asks for its restore (and sets its version when
    ``set_version``); refused when a version differs and ``set_version`` is not given."""
    specs = {obj["metadata"]["name"]: obj.get("spec") or {} for obj in shards}
    changes = version_changes(point, specs)
    if changes and not set_version:
        named = ", ".join(
            f"{name} ({specs[name].get('version')} -> {version})"
            for name, (version, _) in changes.items()
        )
        raise PointError(
            f"spec.version is not the kcp the backups were taken with: {named}; pass "
            "--set-version to set spec.version (and spec.image.tag) of those Shards to it"
        )
    out: dict[str, JSON] = {}
    root_status = next(o.get("status") for o in shards if o["metadata"]["name"] == point.root)
    for name, entry in point.backups.items():
        version = changes[name][0] if name in changes else str(specs[name].get("version"))
        status = next(obj.get("status") for obj in shards if obj["metadata"]["name"] == name)
        belongs = installation_of(name == point.root, status, root_status)
        running = (status or {}).get("version")
        external = bool((specs[name].get("etcd") or {}).get("endpoints"))
        bucket = bool((specs[name].get("backup") or {}).get("s3"))
        why = refusal(status, str(entry["name"]), version, True, belongs, running, external, bucket)
        if why is not None:
            raise PointError(f"{name}: {why}")
        body: JSON = {"metadata": {"annotations": {RESTORE_ANNOTATION: entry["name"]}}}
        if name in changes:
            version, tag = changes[name]
            spec: JSON = {"version": version}
            if tag is not None:
                spec["image"] = {"tag": tag}
            body["spec"] = spec
        out[name] = body
    return out


def progress(obj: JSON, backup: str) -> tuple[str, str] | None:
    """What to print of a Shard's restore from ``backup``: its phase and message, and
    ``Ready``'s status; None before the operator has taken that restore up."""
    status = obj.get("status") or {}
    restore = status.get("restore") or {}
    if restore.get("request") != backup:
        return None
    ready = condition(status, READY) or {}
    return f"{restore.get('phase')}: {restore.get('message', '')}", str(
        ready.get("status", "Unknown")
    )


def finished(obj: JSON, backup: str) -> bool | None:
    """True once the Shard is restored from ``backup`` and Ready, False when that restore
    failed or was refused, None while it goes on."""
    status = obj.get("status") or {}
    restore = status.get("restore") or {}
    if restore.get("request") != backup or restore.get("phase") not in ENDED:
        return None
    if restore.get("phase") != "Done":
        return False
    ready = condition(status, READY) or {}
    return True if ready.get("status") == "True" else None


def run_installation(
    kube: Kube, namespace: str, args: argparse.Namespace, out: Callable[[str], object]
) -> int:
    shards = kube.list(SHARD_API_VERSION, SHARD_KIND, namespace)
    try:
        point = chosen(shards, args.installation, list(args.backup or []))
        asked = patches(point, shards, args.set_version)
    except PointError as err:
        raise SystemExit(f"error: {err}") from None
    out(f"restoring the installation of {point.root} to {point.description}:\n")
    for name, entry in point.backups.items():
        spec = asked[name].get("spec")
        change = f", spec.version set to {spec['version']}" if spec else ""
        out(f"  {name} from {entry['name']} (kcp {entry.get('kcpVersion')}){change}\n")
    out("everything the shards stored after it is replaced\n")
    started = time.monotonic()
    by_name = {obj["metadata"]["name"]: obj for obj in shards}
    order = [point.root, *(name for name in point.backups if name != point.root)]
    for name in order:
        backup = point.backups[name]["name"]
        _clear_answered(kube, namespace, name, by_name[name], backup, args.timeout)
        _merge(kube, namespace, name, asked[name])
        if name == point.root:
            record = _wait_one(kube, namespace, name, args.timeout, _recorded(backup))
            if record.get("phase") == "Refused":
                raise SystemExit(f"error: the restore of {name} was refused: {record['message']}")
    return _follow(kube, namespace, point, started, args.timeout, out)


def _recorded(backup: str) -> Callable[[JSON], bool]:
    """Whether a ``status.restore`` answers the request for ``backup``."""
    return lambda record: record.get("request") == backup


def _merge(kube: Kube, namespace: str, name: str, body: JSON) -> None:
    kube.merge(SHARD_API_VERSION, SHARD_KIND, namespace, name, body)


def _clear_answered(
    kube: Kube, namespace: str, name: str, obj: JSON, backup: str, timeout: float
) -> None:
    """The annotation answers each value once: cleared when ``backup`` was answered before."""
    restore = (obj.get("status") or {}).get("restore") or {}
    if restore.get("request") != backup:
        return
    _merge(kube, namespace, name, {"metadata": {"annotations": {RESTORE_ANNOTATION: None}}})
    _wait_one(kube, namespace, name, timeout, lambda r: r.get("request") != backup)


def _wait_one(
    kube: Kube, namespace: str, name: str, timeout: float, done: Callable[[JSON], bool]
) -> JSON:
    """``status.restore`` of Shard ``name`` once ``done`` says so."""
    deadline = time.monotonic() + timeout
    while True:
        found = kube.get(SHARD_API_VERSION, SHARD_KIND, namespace, name) or {}
        record = dict((found.get("status") or {}).get("restore") or {})
        if done(record):
            return record
        if time.monotonic() > deadline:
            raise SystemExit(f"error: the operator did not take up the restore of {name}")
        time.sleep(POLL_SECONDS)


def _follow(
    kube: Kube,
    namespace: str,
    point: Point,
    started: float,
    timeout: float,
    out: Callable[[str], object],
) -> int:
    """Print each change of a Shard's restore until every one is Done and Ready."""
    seen: dict[str, tuple[str, str]] = {}
    deadline = started + timeout
    while True:
        outcome: dict[str, bool | None] = {}
        for name, entry in point.backups.items():
            obj = kube.get(SHARD_API_VERSION, SHARD_KIND, namespace, name) or {}
            now = progress(obj, str(entry["name"]))
            before = seen.get(name)
            if now is not None and now != before:
                seen[name] = now
                at = f"{time.monotonic() - started:6.0f}s  {name}:"
                if before is None or before[0] != now[0]:
                    out(f"{at} {now[0]} (Ready={now[1]})\n")
                else:
                    out(f"{at} Ready={now[1]}\n")
            outcome[name] = finished(obj, str(entry["name"]))
        if all(outcome.values()):
            out(
                f"installation of {point.root} restored to {point.description} in "
                f"{time.monotonic() - started:.0f} s: every shard Ready\n"
            )
            return 0
        failed = [name for name, done in outcome.items() if done is False]
        if failed and all(done is not None for done in outcome.values()):
            raise SystemExit(f"error: the restore of {', '.join(failed)} did not succeed")
        if time.monotonic() > deadline:
            waiting = [name for name, done in outcome.items() if not done]
            raise SystemExit(
                f"error: {', '.join(waiting)} not restored and Ready within {timeout:.0f} s"
            )
        time.sleep(POLL_SECONDS)


def write(text: str) -> None:
    sys.stdout.write(text)
    sys.stdout.flush()
