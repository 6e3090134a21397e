"""The Kubeconfig custom resource: a user's kubeconfig for a workspace, typed spec model and
validation.

The operator signs a client certificate for ``spec.username`` in ``spec.groups`` with the CA
the installation's front-proxy and shards trust for client certificates, writes a kubeconfig
whose context points at ``/clusters/<spec.workspace>`` of the target, renews it before it
expires, and optionally binds ClusterRoles to the user inside that workspace.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from kcp_shard_operator.core.api.model import SpecError, field
from kcp_shard_operator.core.api.objects import KcpObject, parse_object
from kcp_shard_operator.core.api.refs import LocalObjectRef
from kcp_shard_operator.core.pki.spec import DURATION_PATTERN, duration_seconds

SYSTEM_MASTERS = "system:masters"
WORKSPACE_PATTERN = r"^root(:[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$"
"""A kcp workspace path from the root: ``root``, ``root:team-a``, ``root:org:team``."""
NAME_PATTERN = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"
MAX_NAME_LENGTH = 63
DEFAULT_VALIDITY = "8760h"
DEFAULT_RENEW_BEFORE = "720h"
MINIMUM_VALIDITY_SECONDS = 120
"""A user's certificate may be short-lived (at least 2m): renewal is checked every 30 s."""
TARGET_RULE = "has(self.frontProxyRef) != has(self.shardRef)"
TARGET_MESSAGE = "spec.target needs exactly one of frontProxyRef and shardRef"


@dataclass(frozen=True)
class TargetSpec:
    """What the kubeconfig reaches: the installation's front-proxy, or one Shard directly."""

    front_proxy_ref: LocalObjectRef | None = field(
        "frontProxyRef",
        "A FrontProxy (same namespace): the kubeconfig's server is its URL (status.url), "
        "which routes the workspace to the shard that holds it.",
        default=None,
    )
    shard_ref: LocalObjectRef | None = field(
        "shardRef",
        "A Shard (same namespace): the kubeconfig's server is the shard's base URL; the "
        "workspace must live on that shard.",
        default=None,
    )


@dataclass(frozen=True)
class KubeconfigSpec:
    """Desired state of a user's kubeconfig."""

    username: str = field(
        "username",
        "The user the client certificate names (its CN), as kcp sees it.",
        minLength=1,
        maxLength=256,
    )
    target: TargetSpec = field(
        "target",
        "Where the kubeconfig points.",
        **{"x-kubernetes-validations": [{"rule": TARGET_RULE, "message": TARGET_MESSAGE}]},
    )
    groups: list[str] = field(
        "groups",
        "The groups the client certificate names (its O attributes).",
        default_factory=list,
        maxItems=32,
    )
    workspace: str = field(
        "workspace",
        "The workspace path the kubeconfig's context points at (e.g. root:team-a); it must exist.",
        default="root",
        pattern=WORKSPACE_PATTERN,
        maxLength=1024,
    )
    secret_name: str | None = field(
        "secretName",
        "The Secret the kubeconfig is written to (key kubeconfig); default <name>-kubeconfig. "
        "A Secret of that name the operator did not make is never written over.",
        default=None,
        maxLength=MAX_NAME_LENGTH,
    )
    validity: str = field(
        "validity",
        "Lifetime of the client certificate (hours, minutes, seconds as in 8760h or 90m; "
        "at least 2m). Shortening it renews the certificate at once.",
        default=DEFAULT_VALIDITY,
        pattern=DURATION_PATTERN,
        maxLength=32,
    )
    renew_before: str = field(
        "renewBefore",
        "How long before expiry the certificate is issued again (shorter than validity). "
        "The old certificate stays valid until it expires: kcp has no client-certificate "
        "revocation.",
        default=DEFAULT_RENEW_BEFORE,
        pattern=DURATION_PATTERN,
        maxLength=32,
    )
    cluster_roles: list[str] = field(
        "clusterRoles",
        "ClusterRoles bound to the user inside the workspace: one ClusterRoleBinding each, "
        "made through the target and removed when dropped from the list or when this "
        "object is deleted.",
        default_factory=list,
        maxItems=16,
    )
    allow_system_masters: bool = field(
        "allowSystemMasters",
        "Allow system:masters in spec.groups (everything on a shard it reaches directly; "
        "the front-proxy drops that group by default).",
        default=False,
    )

    @property
    def validity_seconds(self) -> int:
        return duration_seconds(self.validity) or 0

    @property
    def renew_before_seconds(self) -> int:
        return duration_seconds(self.renew_before) or 0


@dataclass(frozen=True)
class Kubeconfig(KcpObject[KubeconfigSpec]):
    """A Kubeconfig object: identity plus validated spec and the raw status."""


def validate(spec: KubeconfigSpec) -> None:
    """Rules beyond the schema's types; raises :class:`SpecError` naming the field."""
    if (spec.target.front_proxy_ref is None) == (spec.target.shard_ref is None):
        raise SpecError("spec.target", TARGET_MESSAGE)
    if SYSTEM_MASTERS in spec.groups and not spec.allow_system_masters:
        raise SpecError(
            "spec.groups",
            f"{SYSTEM_MASTERS} is refused unless spec.allowSystemMasters is true",
        )
    for index, group in enumerate(spec.groups):
        if not group:
            raise SpecError(f"spec.groups[{index}]", "must not be empty")
    for index, role in enumerate(spec.cluster_roles):
        if not re.match(r"^[^/%]+$", role) or role in (".", ".."):
            raise SpecError(f"spec.clusterRoles[{index}]", f"{role!r} is not a ClusterRole name")
    if spec.secret_name is not None and not re.match(NAME_PATTERN, spec.secret_name):
        raise SpecError("spec.secretName", f"{spec.secret_name!r} is not a Secret name")
    validity, renew = spec.validity_seconds, spec.renew_before_seconds
    if validity < MINIMUM_VALIDITY_SECONDS:
        raise SpecError(
            "spec.validity", f"{spec.validity!r} is not a duration of at least 2m (e.g. 8760h)"
        )
    if not 0 < renew < validity:
        raise SpecError(
            "spec.renewBefore",
            f"{spec.renew_before!r} must be a duration shorter than spec.validity "
            f"({spec.validity})",
        )


def check_name(name: str) -> None:
    if len(name) > MAX_NAME_LENGTH or not re.match(NAME_PATTERN, name):
        raise SpecError("metadata.name", f"{name!r} must be a DNS-1123 label")


def parse_kubeconfig(obj: Any) -> Kubeconfig:
    """A validated :class:`Kubeconfig` from a Kubernetes object mapping."""
    return parse_object(obj, Kubeconfig, KubeconfigSpec, check_name, validate)
