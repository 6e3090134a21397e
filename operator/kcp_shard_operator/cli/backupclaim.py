"""``kcp-shard-operator backups --claim NAME``: the backups a backup claim holds, read from their
manifests without a Shard (:mod:`kcp_shard_operator.core.backup.listing`).

A short-lived pod on the backup image mounts the claim read-only and prints the manifests; the
command waits for it to end, reads its log, and deletes it, also when it fails, times out or is
interrupted (Ctrl-C, SIGTERM).
"""

from __future__ import annotations

import secrets
import signal
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from types import FrameType
from typing import Protocol

from kcp_shard_operator.core.api.model import JSON
from kcp_shard_operator.core.backup.listing import LISTING_NAME, Listing, listing_pod, parse_listing
from kcp_shard_operator.kube.client import APIError, error_message


class PodAPI(Protocol):
    """The calls the listing makes (:class:`Kube` answers them)."""

    def get(self, api_version: str, kind: str, namespace: str, name: str) -> JSON | None: ...
    def create(self, obj: JSON) -> JSON: ...
    def delete(self, api_version: str, kind: str, namespace: str, name: str) -> None: ...
    def pod_log(self, namespace: str, name: str, container: str) -> str | None: ...


POLL_SECONDS = 1.0
ENDED = ("Succeeded", "Failed")
CONTAINER = "list"


def list_claim(kube: PodAPI, namespace: str, claim: str, image: str, timeout: float) -> Listing:
    """The backups on the claim ``namespace/claim``, read by a pod of ``image`` within
    ``timeout`` seconds; ``SystemExit`` with one line when there is no such claim, or the
    pod fails or does not end in time."""
    if kube.get("v1", "PersistentVolumeClaim", namespace, claim) is None:
        raise SystemExit(f"error: PersistentVolumeClaim {claim!r} not found in {namespace}")
    name = f"{LISTING_NAME}-{secrets.token_hex(4)}"
    with _terminated_as_exit():
        kube.create(listing_pod(claim, namespace, name, image))
        try:
            pod = _ended(kube, namespace, name, timeout)
            log = kube.pod_log(namespace, name, CONTAINER) or ""
        finally:
            _delete(kube, namespace, name)
    if pod["status"]["phase"] != "Succeeded":
        last = log.strip().splitlines()[-1:] or [_state(pod)]
        raise SystemExit(f"error: pod {name} listing claim {claim} failed: {last[0]}")
    return parse_listing(log, claim)


def _ended(kube: PodAPI, namespace: str, name: str, timeout: float) -> JSON:
    deadline = time.monotonic() + timeout
    while True:
        pod = kube.get("v1", "Pod", namespace, name)
        if pod is None:
            raise SystemExit(f"error: pod {name} listing the claim was deleted before it ended")
        if (pod.get("status") or {}).get("phase") in ENDED:
            return pod
        if time.monotonic() > deadline:
            raise SystemExit(
                f"error: pod {name} listing the claim did not end within {timeout:.0f} s "
                f"({_state(pod)}); a ReadWriteOnce claim mounted on another node cannot be "
                "mounted by it"
            )
        time.sleep(POLL_SECONDS)


def _state(pod: JSON) -> str:
    """What keeps ``pod`` from running, or its phase: a waiting container's reason and message,
    an unscheduled pod's condition."""
    status = pod.get("status") or {}
    for container in status.get("containerStatuses") or []:
        waiting = (container.get("state") or {}).get("waiting")
        if waiting:
            return f"{waiting.get('reason')}: {waiting.get('message', '')}".rstrip(": ")
    for found in status.get("conditions") or []:
        if found.get("type") == "PodScheduled" and found.get("status") == "False":
            return f"{found.get('reason')}: {found.get('message', '')}".rstrip(": ")
    return f"phase {status.get('phase', 'Pending')}"


def _delete(kube: PodAPI, namespace: str, name: str) -> None:
    try:
        kube.delete("v1", "Pod", namespace, name)
    except APIError as err:
        sys.stderr.write(f"warning: pod {name} not deleted ({error_message(err)}): delete it\n")


@contextmanager
def _terminated_as_exit() -> Iterator[None]:
    """SIGTERM raises ``SystemExit`` inside, as Ctrl-C raises ``KeyboardInterrupt``, so that
    the pod is deleted on either."""

    def terminated(signum: int, frame: FrameType | None) -> None:
        raise SystemExit(f"error: terminated (signal {signum})")

    previous = signal.signal(signal.SIGTERM, terminated)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)
