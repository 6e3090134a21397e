"""Shard -> everything the operator applies for it (pure).

The operator and ``kcp-shard-operator render`` both call :func:`render_shard`,
so what a user previews is what the operator applies. Each kind of object has its
builder module: deployment, service, pdb, claim (the data volume), kcpargs (the flags).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from kcp_shard_operator.core.api.meta import stamped
from kcp_shard_operator.core.api.model import JSON, SpecError
from kcp_shard_operator.core.kcp.audit import POLICY_KEY, default_policy
from kcp_shard_operator.core.kcp.versions import Version
from kcp_shard_operator.core.shard.args import kcp_flags
from kcp_shard_operator.core.shard.claim import Storage, claim, data_volume, storage_of
from kcp_shard_operator.core.shard.deployment import deployment
from kcp_shard_operator.core.shard.meta import metadata
from kcp_shard_operator.core.shard.names import audit_policy_name
from kcp_shard_operator.core.shard.pdb import pdb
from kcp_shard_operator.core.shard.service import service
from kcp_shard_operator.core.shard.spec import Shard


@dataclass(frozen=True)
class Rendered:
    """What a Shard renders to, and what was dropped on the way."""

    deployment: JSON
    service: JSON
    pdb: JSON | None
    claim: JSON | None = None
    audit_policy: JSON | None = None
    """The ConfigMap of the default audit policy (spec.audit without a policy of its own)."""
    storage: Storage = Storage.CLAIM
    dropped_args: list[str] = field(default_factory=list)
    unused_refs: list[str] = field(default_factory=list)

    @property
    def objects(self) -> list[JSON]:
        """In the order they are applied: the claim before the pods that mount it."""
        optional = [obj for obj in (self.claim, self.audit_policy) if obj is not None]
        return [self.service, *optional, self.deployment] + ([self.pdb] if self.pdb else [])


def render_shard(
    shard: Shard,
    root: Shard | None,
    deprecating_release: Version,
    secret_revisions: Mapping[str, str] | None = None,
    *,
    on_empty_dir: bool = False,
    backup_claim_found: bool = True,
) -> Rendered:
    """The children of ``shard``; ``root`` is required exactly for non-root shards.

    With ``secret_revisions`` (Secret name -> resourceVersion), the pod template carries a
    digest of the mounted Secrets' revisions, so pods restart when a certificate rotates.
    ``on_empty_dir``: the live Deployment keeps kcp's data on an emptyDir (see
    :func:`kcp_shard_operator.core.shard.claim.storage_of`). ``backup_claim_found``: the
    claim ``spec.backup`` names exists (without it the pod gets no backup sidecar).
    """
    root_name = None
    if not shard.spec.is_root:
        assert shard.spec.root_shard_ref is not None
        root_name = shard.spec.root_shard_ref.name
        if root is None or root.name != root_name or root.namespace != shard.namespace:
            raise SpecError("spec.rootShardRef", f"root Shard {root_name!r} not found")
        if not root.spec.is_root:
            raise SpecError("spec.rootShardRef", f"Shard {root_name!r} is not a root shard")
    storage = storage_of(shard.spec, on_empty_dir)
    pod, dropped, unused = kcp_flags(
        shard, root_name, deprecating_release, data_volume(shard, storage)
    )
    budget = pdb(shard, root_name)
    return Rendered(
        deployment=stamped(
            deployment(shard, root_name, pod, secret_revisions, storage, backup_claim_found)
        ),
        service=stamped(service(shard, root_name)),
        pdb=stamped(budget) if budget else None,
        claim=stamped(claim(shard, root_name)) if storage is Storage.CLAIM else None,
        audit_policy=_audit_policy(shard, root_name),
        storage=storage,
        dropped_args=dropped,
        unused_refs=unused,
    )


def _audit_policy(shard: Shard, root_name: str | None) -> JSON | None:
    """The operator's default audit policy, where ``spec.audit`` names none of its own."""
    audit = shard.spec.audit
    if audit is None or audit.policy_config_map_ref is not None:
        return None
    return stamped(
        {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": metadata(shard, root_name, name=audit_policy_name(shard)),
            "data": {POLICY_KEY: default_policy()},
        }
    )
