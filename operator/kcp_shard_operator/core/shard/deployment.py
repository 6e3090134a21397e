"""Shard -> its kcp Deployment: the pod template, probes and update strategy (pure)."""

from __future__ import annotations

from collections.abc import Mapping

from kcp_shard_operator.core.api.meta import SECRETS_ANNOTATION, VERSION_ANNOTATION
from kcp_shard_operator.core.api.model import JSON
from kcp_shard_operator.core.cacheserver.names import client_labels
from kcp_shard_operator.core.kcp.podtemplate import Pod, kcp_pod_spec, revisions_digest
from kcp_shard_operator.core.shard.backup import with_backup_sidecar
from kcp_shard_operator.core.shard.claim import DATA_VOLUME, Storage
from kcp_shard_operator.core.shard.meta import labels, metadata, selector_labels
from kcp_shard_operator.core.shard.spec import Shard


def deployment(
    shard: Shard,
    root_name: str | None,
    pod: Pod,
    revisions: Mapping[str, str] | None,
    storage: Storage,
    backup_claim_found: bool = True,
) -> JSON:
    spec = shard.spec
    pod_spec = kcp_pod_spec("kcp", ["/kcp", "start"], pod, spec)
    if backup_claim_found:
        with_backup_sidecar(pod_spec, shard, DATA_VOLUME)
    annotations = {VERSION_ANNOTATION: spec.version}
    if revisions is not None:
        annotations[SECRETS_ANNOTATION] = revisions_digest(pod_spec, revisions)
    pod_labels = labels(shard, root_name, versioned=True)
    if spec.cache.server_ref is not None:
        # What the CacheServer's NetworkPolicy admits.
        pod_labels |= client_labels(spec.cache.server_ref.name)
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": metadata(shard, root_name, versioned=True),
        "spec": {
            "replicas": spec.replicas,
            "selector": {"matchLabels": selector_labels(shard)},
            "strategy": strategy(shard, storage),
            "template": {
                "metadata": {"labels": pod_labels, "annotations": annotations},
                "spec": pod_spec,
            },
        },
    }


def changes_minor_release(shard: Shard) -> bool:
    """Whether ``shard`` moves from the kcp minor release rolled out on every replica
    (``status.version``) to another one."""
    running = shard.status_version
    return running is not None and running.minor_release != shard.spec.kcp_version.minor_release


def strategy(shard: Shard, storage: Storage) -> JSON:
    """One surge pod at a time; ``Recreate`` on a claim or while the shard moves to another
    kcp minor.

    A claim is ReadWriteOnce and holds one embedded etcd: a surge pod could not attach it on
    another node, and on the same node it would open the etcd of the running pod.

    Two kcp minor releases on one etcd fight over their bootstrap objects: kcp 0.27.1
    replicas keep patching the APIExports a 0.28.0 pod bootstraps as apis.kcp.io/v1alpha2,
    and the 0.28.0 pod stays unready for minutes (restarted by its startup probe). Recreate
    stops the old replicas first: the shard is down for one pod's restart instead.
    """
    if storage is Storage.CLAIM or changes_minor_release(shard):
        return {"type": "Recreate"}
    return {"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": 0, "maxSurge": 1}}
