"""What the spec of every kcp server (shard, cache server, front-proxy) shares: name and
version rules, the image, the URL rule (pure)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from kcp_shard_operator.constants import DEFAULT_IMAGE_REPOSITORY
from kcp_shard_operator.core.api.model import SpecError, field
from kcp_shard_operator.core.kcp.versions import (
    MINIMUM_KCP_VERSION,
    InvalidVersionError,
    Version,
)
from kcp_shard_operator.core.pki.spec import URL_PATTERN

MAX_REPLICAS = 10
# Children are named <name>-kcp; a Service name is a DNS-1035 label of at most 63 characters.
NAME_PATTERN = r"^[a-z]([-a-z0-9]*[a-z0-9])?$"


# The version goes into the app.kubernetes.io/version label (at most 63 characters).
MAX_VERSION_LENGTH = 63


def url_rule(path: str) -> dict[str, Any]:
    return {
        "maxLength": 2048,
        "x-kubernetes-validations": [
            {"rule": f"self.matches({URL_PATTERN!r})", "message": url_message(path)}
        ],
    }


def url_message(path: str) -> str:
    return f"{path} must be an https URL with a host, e.g. https://kcp.example.com:6443"


@dataclass(frozen=True)
class ImageSpec:
    """Container image of kcp."""

    repository: str = field("repository", "Image repository.", default=DEFAULT_IMAGE_REPOSITORY)
    tag: str | None = field("tag", "Image tag; defaults to v<spec.version>.", default=None)
    pull_policy: str | None = field(
        "pullPolicy",
        "Image pull policy.",
        default=None,
        enum=["Always", "IfNotPresent", "Never"],
    )

    def ref(self, version: str) -> str:
        """The image reference for kcp ``version``: the tag, or ``v<version>`` without one."""
        return f"{self.repository}:{self.tag or 'v' + version}"


def checked_version(text: str) -> Version:
    """``spec.version`` parsed, and no older than the oldest supported kcp."""
    try:
        version = Version.parse(text)
    except InvalidVersionError as err:
        raise SpecError("spec.version", str(err)) from err
    if version < MINIMUM_KCP_VERSION:
        raise SpecError(
            "spec.version",
            f"kcp {version} is older than the oldest supported {MINIMUM_KCP_VERSION}",
        )
    return version
