"""The VirtualWorkspaceServer custom resource: kcp's standalone virtual-workspace server
(``virtual-workspaces``) for one Shard, typed spec model and validation.

A shard serves its virtual workspaces (``/services/...``: the APIExport, initializing and
workspace views) in its own process unless a virtual-workspace server is named for it; then the
shard runs them no more (``--run-virtual-workspaces=false``), advertises the server's URL
(``--shard-virtual-workspace-url``, which every APIExportEndpointSlice lists) and proxies its
own ``/services/`` requests there. The server keeps no state: two replicas by default.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from kcp_shard_operator.core.api.model import JSON, SpecError, field
from kcp_shard_operator.core.api.objects import KcpObject, parse_object
from kcp_shard_operator.core.api.refs import LocalObjectRef
from kcp_shard_operator.core.kcp.podfields import (
    affinity_field,
    check_extra_args,
    check_pod_fields,
    extra_args_field,
    node_selector_field,
    resources_field,
    tolerations_field,
)
from kcp_shard_operator.core.kcp.serverspec import (
    TAGGED_BUILD_CEL,
    TAGGED_BUILD_MESSAGE,
    ImageSpec,
    ServerSpec,
    check_child_name,
    checked_version,
    image_field,
    replicas_field,
    tagged_build,
    version_field,
)
from kcp_shard_operator.core.pki.spec import (
    IssuesOwnPKI,
    check_pki,
    lifetime_field,
    renew_before_field,
)

CHILD_SUFFIX = "-vw"
DEFAULT_REPLICAS = 2


@dataclass(frozen=True)
class VirtualWorkspacesPKISpec:
    """What the operator issues for the virtual-workspace server."""

    issue: bool = field(
        "issue",
        "Issue the serving certificate (<name>-vw-serving) and the kubeconfig to its shard "
        "(<name>-vw-kubeconfig, system:masters), signed by the installation's CA, and the "
        "shard's client certificate the shard proxies its own /services/ requests with. "
        "false: the server cannot be rendered (it has no other source for them yet).",
        default=True,
    )
    certificate_lifetime: str = lifetime_field("VirtualWorkspaceServer")
    renew_before: str = renew_before_field()


@dataclass(frozen=True)
class VirtualWorkspaceServerSpec(ServerSpec, IssuesOwnPKI):
    """Desired state of a standalone kcp virtual-workspace server."""

    version: str = version_field(" of the virtual-workspace server", "0.28.0")
    shard_ref: LocalObjectRef = field(
        "shardRef",
        "The Shard (same namespace) whose virtual workspaces this server runs; the Shard "
        "stops running them in-process. One server per Shard (the first by name wins). "
        "Immutable.",
    )
    image: ImageSpec = image_field(
        "Container image (kcp's image, which holds /virtual-workspaces)."
    )
    replicas: int = replicas_field(
        "Number of virtual-workspace server pods (stateless; more than one gets a "
        "PodDisruptionBudget).",
        DEFAULT_REPLICAS,
    )
    pki: VirtualWorkspacesPKISpec = field(
        "pki", "What the operator issues.", default_factory=VirtualWorkspacesPKISpec
    )
    extra_args: list[str] = extra_args_field("virtual-workspaces (e.g. --v=4)")
    resources: JSON | None = resources_field()
    node_selector: dict[str, str] = node_selector_field()
    tolerations: list[JSON] = tolerations_field()
    affinity: JSON | None = affinity_field()


@dataclass(frozen=True)
class VirtualWorkspaceServer(KcpObject[VirtualWorkspaceServerSpec]):
    """A VirtualWorkspaceServer object: identity plus validated spec and the raw status."""


RULES: tuple[tuple[str, str, Callable[[VirtualWorkspaceServerSpec], bool] | None], ...] = (
    (
        "!has(self.pki) || !has(self.pki.issue) || self.pki.issue",
        "spec.pki.issue false is not supported yet: the operator issues the server's serving "
        "certificate and kubeconfig",
        lambda spec: spec.pki.issue,
    ),
    (TAGGED_BUILD_CEL, TAGGED_BUILD_MESSAGE, tagged_build),
    (
        "self.shardRef.name == oldSelf.shardRef.name",
        "spec.shardRef cannot be changed after creation",
        None,
    ),
)


def validate(spec: VirtualWorkspaceServerSpec) -> None:
    """Rules beyond the schema's types; raises :class:`SpecError`."""
    checked_version(spec.version)
    for _, message, holds in RULES:
        if holds is not None and not holds(spec):
            raise SpecError("spec", message)
    check_extra_args(spec.extra_args)
    check_pki(spec.as_pki)
    check_pod_fields(spec.node_selector, spec.resources, spec.tolerations)


def check_name(name: str) -> None:
    check_child_name(name, CHILD_SUFFIX)


def parse_virtual_workspace_server(obj: Any) -> VirtualWorkspaceServer:
    """A validated :class:`VirtualWorkspaceServer` from a Kubernetes object mapping."""
    return parse_object(
        obj, VirtualWorkspaceServer, VirtualWorkspaceServerSpec, check_name, validate
    )
