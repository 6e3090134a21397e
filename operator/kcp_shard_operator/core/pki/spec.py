"""What the operator issues for a Shard, as the spec says it (``spec.pki``), and durations."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from kcp_shard_operator.core.api.model import SpecError, field
from kcp_shard_operator.core.api.refs import LocalObjectRef

DURATION_PATTERN = r"^([0-9]+h)?([0-9]+m)?([0-9]+s)?$"
DEFAULT_CERTIFICATE_LIFETIME = "8760h"
DEFAULT_RENEW_BEFORE = "720h"


def lifetime_field(kind: str) -> str:
    """``certificateLifetime`` of a spec's ``pki`` (the same on every kind)."""
    result: str = field(
        "certificateLifetime",
        f"Lifetime of the certificates issued for this {kind} (hours, minutes, seconds as in "
        "8760h or 90m; at least 10m).",
        default=DEFAULT_CERTIFICATE_LIFETIME,
        pattern=DURATION_PATTERN,
        maxLength=32,
    )
    return result


def renew_before_field() -> str:
    """``renewBefore`` of a spec's ``pki`` (the same on every kind)."""
    result: str = field(
        "renewBefore",
        "How long before expiry a certificate is issued again (shorter than "
        "certificateLifetime); the pods that mount it roll.",
        default=DEFAULT_RENEW_BEFORE,
        pattern=DURATION_PATTERN,
        maxLength=32,
    )
    return result


@dataclass(frozen=True)
class PKISpec:
    """Certificates and kubeconfigs the operator issues for what the Shard leaves unset."""

    issue: bool = field(
        "issue",
        "Issue every certificate, CA bundle and kubeconfig the Shard mounts and no *SecretRef "
        "names: the serving certificate, the client CA, the admin and logical-cluster-admin "
        "kubeconfig, and on non-root shards the cache and root-shard kubeconfigs. A set "
        "*SecretRef is used as it is. false: nothing is issued.",
        default=True,
    )
    ca_secret_ref: LocalObjectRef | None = field(
        "caSecretRef",
        "On a root shard: a Secret with tls.crt and tls.key of a CA that signs the "
        "installation's certificates instead of one the operator generates (<root>-kcp-ca).",
        default=None,
    )
    certificate_lifetime: str = lifetime_field("Shard")
    renew_before: str = renew_before_field()


URL_PATTERN = r"^https://(\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9.-]+)(:[0-9]{1,5})?(/[^\s]*)?$"
"""What kcp takes for --shard-base-url and --shard-external-url: an https URL with a host."""


def url_host(url: str) -> str | None:
    """The host of an https ``url`` (an IPv6 address without brackets); None if not one."""
    found = re.match(URL_PATTERN, url)
    return found.group(1).strip("[]") if found else None


MINIMUM_CERTIFICATE_LIFETIME = 600


def duration_seconds(text: str) -> int | None:
    """Seconds of a duration such as ``8760h``, ``90m`` or ``1h30m``; None if it is not one."""
    found = re.fullmatch(DURATION_PATTERN, text)
    if not text or found is None:
        return None
    hours, minutes, seconds = (int(part[:-1]) if part else 0 for part in found.groups())
    return hours * 3600 + minutes * 60 + seconds


def check_pki(pki: PKISpec) -> None:
    lifetime = duration_seconds(pki.certificate_lifetime)
    renew = duration_seconds(pki.renew_before)
    if lifetime is None or lifetime < MINIMUM_CERTIFICATE_LIFETIME:
        raise SpecError(
            "spec.pki.certificateLifetime",
            f"{pki.certificate_lifetime!r} is not a duration of at least 10m (e.g. 8760h)",
        )
    if renew is None or not 0 < renew < lifetime:
        raise SpecError(
            "spec.pki.renewBefore",
            f"{pki.renew_before!r} must be a duration (e.g. 720h) shorter than "
            f"spec.pki.certificateLifetime ({pki.certificate_lifetime})",
        )


class IssuesOwnPKI:
    """The :class:`PKISpec` of a kind whose ``spec.pki`` holds only ``issue``, the lifetime
    and the renewal window (a mixin of the cache server's and front-proxy's spec)."""

    pki: Any

    @property
    def as_pki(self) -> PKISpec:
        return PKISpec(
            issue=self.pki.issue,
            certificate_lifetime=self.pki.certificate_lifetime,
            renew_before=self.pki.renew_before,
        )
