"""Rules on shards as values and manifests describe them.

``Shard`` specs (items of the project chart's ``shards:`` and ``Shard`` manifests)
lose ``rootShardKubeconfigSecretRef`` where their kcp version ignores the flag it
feeds; values of kcp-dev/helm-charts' deprecated ``shard`` chart are reported on.
"""

from __future__ import annotations

from ruamel.yaml.nodes import MappingNode, SequenceNode

from kcp_shard_operator.constants import SHARD_API_VERSION, SHARD_KIND
from kcp_shard_operator.core.kcp.versions import (
    InvalidVersionError,
    Version,
    ignores_root_shard_flag,
)
from kcp_shard_operator.migrate.locate import FLAG, Locator, Unknown
from kcp_shard_operator.migrate.nodes import Segment, Visit, get, pair_index, scalar, truthy

ROOT_SHARD_REF_KEY = "rootShardKubeconfigSecretRef"
SHARD_CHART_KUBECONFIG_MOUNT = "/etc/kcp/shard"
"""Where kcp-dev/helm-charts' deprecated ``shard`` chart mounts the root-shard kubeconfig."""


def find_shards(loc: Locator, visit: Visit) -> None:
    node = visit.node
    if not isinstance(node, MappingNode):
        return
    shards = get(node, "shards")
    if isinstance(shards, SequenceNode):
        for i, item in enumerate(shards.value):
            if isinstance(item, MappingNode):
                _shard_spec(loc, item, (*visit.path, "shards", i))
    if (
        scalar(get(node, "apiVersion")) == SHARD_API_VERSION
        and scalar(get(node, "kind")) == SHARD_KIND
    ):
        spec = get(node, "spec")
        if isinstance(spec, MappingNode):
            _shard_spec(loc, spec, (*visit.path, "spec"))


def _shard_spec(loc: Locator, spec: MappingNode, path: tuple[Segment, ...]) -> None:
    version_text = scalar(get(spec, "version")) or ""
    version: Version | None = None
    try:
        version = Version.parse(version_text)
    except InvalidVersionError:
        version = None
    loc.shard_specs[id(spec)] = version or Unknown(version_text)
    if get(spec, "rootShardRef") is not None and not isinstance(
        get(get(spec, "cache"), "kubeconfigSecretRef"), MappingNode
    ):
        loc.errors.append(
            loc.find(
                spec,
                path,
                "non-root shard (rootShardRef set) has no cache.kubeconfigSecretRef: "
                "kcp refuses to start it (--cache-kubeconfig is required for non-root shards)",
            )
        )
    index = pair_index(spec, ROOT_SHARD_REF_KEY)
    if index is None:
        return
    key, ref = spec.value[index]
    ref_path = (*path, ROOT_SHARD_REF_KEY)
    if version is None:
        loc.warnings.append(
            loc.find(key, ref_path, "kept: the shard has no valid version to decide on")
        )
        return
    if not ignores_root_shard_flag(version, loc.release):
        return
    loc.plan.remove_pair(spec, index)
    loc.changes.append(
        loc.find(
            key,
            ref_path,
            f"removed {ROOT_SHARD_REF_KEY} (kcp {version} ignores {FLAG})",
        )
    )
    secret = scalar(get(ref, "name"))
    if secret:
        loc.unneeded.append(
            loc.find(
                key,
                ref_path,
                f"Secret {secret}: it only fed {FLAG}; delete it once no older shard uses it",
            )
        )


def shard_chart_values(loc: Locator, root: MappingNode) -> None:
    """Values of the deprecated kcp ``shard`` chart, whose template renders the flag."""
    kcp = get(root, "kcp")
    if not isinstance(kcp, MappingNode):
        return
    ignored = get(kcp, "sharding")
    if isinstance(ignored, MappingNode):
        loc.warnings.append(
            loc.find(
                ignored,
                ("kcp", "sharding"),
                "read by nothing in the deprecated shard chart, which reads the "
                "top-level sharding.*",
            )
        )
    sharding = get(root, "sharding")
    is_root = get(sharding, "isRoot")
    if not truthy(get(sharding, "enabled")) or is_root is None or truthy(is_root):
        return
    where = is_root
    path: tuple[Segment, ...] = ("sharding", "isRoot")
    if not (
        truthy(get(get(root, "cache"), "enabled"))
        or truthy(get(get(root, "externalCache"), "enabled"))
    ):
        loc.errors.append(
            loc.find(
                where,
                path,
                "non-root shard with neither cache.enabled nor externalCache.enabled: "
                "kcp refuses to start it (--cache-kubeconfig is required for non-root shards)",
            )
        )
    fullname = scalar(get(root, "fullnameOverride")) or (
        "<release>-" + (scalar(get(root, "nameOverride")) or "shard")
    )
    loc.unneeded.append(
        loc.find(
            where,
            path,
            f"Secret {fullname}-shard-admin-kubeconfig (volume kcp-shard-kubeconfig at "
            f"{SHARD_CHART_KUBECONFIG_MOUNT}) from kcp {loc.release} on; this deprecated "
            f"chart's template renders {FLAG} itself (convert with --from-shard-chart)",
        )
    )
