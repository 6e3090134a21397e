"""References from a spec to objects in the Shard's namespace."""

from __future__ import annotations

from dataclasses import dataclass

from kcp_shard_operator.core.api.model import field

KUBECONFIG_KEY = "kubeconfig"
CA_KEY = "ca.crt"


@dataclass(frozen=True)
class LocalObjectRef:
    """A reference to an object in the Shard's namespace."""

    name: str = field("name", "Name of the object.", minLength=1)


@dataclass(frozen=True)
class SecretKeyRef:
    """A key of a Secret in the Shard's namespace."""

    name: str = field("name", "Name of the Secret.", minLength=1)
    key: str = field("key", "Key in the Secret.", default=KUBECONFIG_KEY, minLength=1)


@dataclass(frozen=True)
class CASecretKeyRef:
    """A CA bundle in a key of a Secret in the Shard's namespace."""

    name: str = field("name", "Name of the Secret.", minLength=1)
    key: str = field("key", "Key in the Secret.", default=CA_KEY, minLength=1)
