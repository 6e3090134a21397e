"""Whether an issued Secret still fits what the pass would issue (pure): keep it, issue it,
issue it again, or leave alone a Secret of that name the operator did not issue."""

from __future__ import annotations

import datetime
from dataclasses import dataclass
from enum import Enum

from kcp_shard_operator.constants import FIELD_MANAGER
from kcp_shard_operator.core.api.model import JSON
from kcp_shard_operator.core.pki.issuance import (
    ISSUED_LABEL,
    KEPT_FOREVER,
    NOT_AFTER_ANNOTATION,
    REQUEST_ANNOTATION,
    SIGNED_BY_ANNOTATION,
    TIME_FORMAT,
    Purpose,
    Request,
)

LIFETIME_SLACK = datetime.timedelta(minutes=1)
"""A certificate outliving the spec's lifetime by more than this is issued again at once."""


class Action(Enum):
    KEEP = "Keep"
    ISSUE = "Issue"
    RENEW = "Renew"
    CONFLICT = "Conflict"


@dataclass(frozen=True)
class Verdict:
    action: Action
    why: str


def signer_id(secret_meta: JSON) -> str:
    """How a certificate names the CA Secret that signed it: name, uid and resourceVersion
    (a CA replaced or changed in place signs everything again)."""
    meta = secret_meta.get("metadata") or {}
    return f"{meta.get('name')}/{meta.get('uid')}/{meta.get('resourceVersion')}"


def parse_time(text: str | None) -> datetime.datetime | None:
    try:
        return datetime.datetime.strptime(str(text), TIME_FORMAT).replace(tzinfo=datetime.UTC)
    except ValueError:
        return None


def verdict(
    request: Request, live: JSON | None, signer: str | None, now: datetime.datetime
) -> Verdict:
    """Whether the Secret ``live`` (its metadata; None when absent) fits ``request``.

    ``signer`` is :func:`signer_id` of the CA (None for what no CA signs). A Secret of that
    name that the operator did not issue is never written over; a CA or service-account key it
    issued is kept whatever changed (:data:`KEPT_FOREVER`).
    """
    if live is None:
        return Verdict(Action.ISSUE, "missing")
    meta = live.get("metadata") or {}
    if (meta.get("labels") or {}).get(ISSUED_LABEL) != request.purpose.value:
        return Verdict(
            Action.CONFLICT,
            f"Secret {request.secret} exists and was not issued by {FIELD_MANAGER} for "
            f"{request.purpose.value}: it is left as it is; delete it, or set the spec's "
            "reference to it, or set spec.pki.issue to false",
        )
    if request.purpose in KEPT_FOREVER:
        return Verdict(Action.KEEP, "")
    annotations = meta.get("annotations") or {}
    if annotations.get(REQUEST_ANNOTATION) != request.digest:
        return Verdict(Action.RENEW, "its names changed")
    if signer is not None and annotations.get(SIGNED_BY_ANNOTATION) != signer:
        return Verdict(Action.RENEW, "its CA changed")
    not_after = parse_time(annotations.get(NOT_AFTER_ANNOTATION))
    if not_after is None:
        return Verdict(Action.RENEW, "its expiry is not recorded")
    longest = now + datetime.timedelta(seconds=request.lifetime_seconds) + LIFETIME_SLACK
    if request.purpose is not Purpose.CLIENT_CA and not_after > longest:
        return Verdict(Action.RENEW, "the lifetime the spec asks for is now shorter")
    if now >= not_after - datetime.timedelta(seconds=request.renew_before_seconds):
        return Verdict(Action.RENEW, f"it expires at {not_after.strftime(TIME_FORMAT)}")
    return Verdict(Action.KEEP, "")
