"""What the spec of every kcp server (shard, cache server, front-proxy) shares, defined once:
the version, image and replicas fields, the name, version and URL rules (pure)."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from kcp_shard_operator.constants import DEFAULT_IMAGE_REPOSITORY
from kcp_shard_operator.core.api.model import SpecError, field
from kcp_shard_operator.core.kcp.versions import (
    MINIMUM_KCP_VERSION,
    VERSION_PATTERN,
    InvalidVersionError,
    Version,
)
from kcp_shard_operator.core.pki.spec import URL_PATTERN

MAX_REPLICAS = 10
# Children are named <name><suffix>; a Service name is a DNS-1035 label of at most 63 characters.
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


def version_field(server: str, example: str) -> Any:
    """``spec.version`` of ``server`` ("" for a shard, " of the cache server", ...)."""
    return field(
        "version",
        f"kcp version{server}, semver without a leading v (e.g. {example}).",
        pattern=VERSION_PATTERN,
        maxLength=MAX_VERSION_LENGTH,
    )


def image_field(description: str = "Container image.") -> Any:
    return field("image", description, default_factory=ImageSpec)


def replicas_field(description: str, default: int) -> Any:
    return field("replicas", description, default=default, minimum=1, maximum=MAX_REPLICAS)


class ServerSpec:
    """What a kcp server's spec derives from its version and image (a mixin of the kinds'
    spec dataclasses, which define the two fields)."""

    version: str
    image: ImageSpec

    @property
    def kcp_version(self) -> Version:
        return Version.parse(self.version)

    @property
    def image_ref(self) -> str:
        return self.image.ref(self.version)


TAGGED_BUILD_CEL = "!self.version.contains('+') || (has(self.image) && has(self.image.tag))"
TAGGED_BUILD_MESSAGE = (
    "spec.version with build metadata (+...) needs spec.image.tag: an image tag cannot contain '+'"
)


def tagged_build(spec: ServerSpec) -> bool:
    """Whether a version with build metadata names its image tag (a tag cannot hold '+')."""
    return "+" not in spec.version or bool(spec.image.tag)


def max_name_length(suffix: str) -> int:
    """The longest name whose children (``<name><suffix>``, a Service among them) can
    carry it."""
    return 63 - len(suffix)


def check_child_name(name: str, suffix: str) -> None:
    """``name`` fits :func:`max_name_length`, as a DNS-1035 label."""
    max_length = max_name_length(suffix)
    if len(name) > max_length or not re.match(NAME_PATTERN, name):
        raise SpecError(
            "metadata.name",
            f"{name!r} must be a DNS-1035 label of at most {max_length} characters: "
            f"its Service is <name>{suffix}",
        )
