"""Which Secrets and keys a rendered kcp pod (a shard or a front-proxy) reads, and which of
them a Secret lacks (pure).

A Secret mounted without ``items`` gives kcp every key as a file: a missing key shows only as
kcp failing to read the file, in a crash loop. Naming the Secret, the key and the spec field
up front is what a user needs.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping

from kcp_shard_operator.core.api.model import JSON


def read_keys(pod_spec: JSON) -> list[tuple[str, str, str]]:
    """(Secret, key, flag) of every Secret file a flag of the kcp container names."""
    mounts = {
        mount["name"]: mount["mountPath"]
        for mount in _container(pod_spec).get("volumeMounts") or []
    }
    secrets = {
        volume["name"]: volume["secret"]
        for volume in pod_spec.get("volumes") or []
        if "secret" in volume and volume["name"] in mounts
    }
    found = []
    for arg in _container(pod_spec).get("args") or []:
        flag, _, value = arg.partition("=")
        for volume, source in secrets.items():
            prefix = mounts[volume].rstrip("/") + "/"
            if not value.startswith(prefix):
                continue
            path = value[len(prefix) :]
            items = {item["path"]: item["key"] for item in source.get("items") or []}
            found.append((source["secretName"], items.get(path, path), flag))
    return found


def _container(pod_spec: JSON) -> JSON:
    containers: list[JSON] = pod_spec.get("containers") or [{}]
    return containers[0]


def missing_keys(
    pod_spec: JSON,
    secret_keys: Mapping[str, Collection[str]],
    spec_fields: Mapping[str, str],
) -> list[str]:
    """One line per key a Secret the pod mounts lacks; Secrets whose keys are not known (not
    found, reported apart) are left out. ``spec_fields`` names the field behind each flag."""
    problems = []
    for secret, key, flag in read_keys(pod_spec):
        keys = secret_keys.get(secret)
        if keys is None or key in keys:
            continue
        where = spec_fields.get(flag, flag)
        problems.append(f"Secret {secret} has no key {key!r} ({where}, for {flag})")
    return sorted(set(problems))


def absent_secrets(mounted: list[str], secret_revisions: Mapping[str, str] | None) -> list[str]:
    """The mounted Secrets that do not exist (none known without their revisions)."""
    if secret_revisions is None:
        return []
    return [name for name in mounted if not secret_revisions.get(name)]
