"""The Helm chart under test: the pinned helm binary, rendering, picking objects."""

from __future__ import annotations

import functools
import os
import subprocess
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import yaml

REPO = Path(__file__).resolve().parent.parent
CHART = REPO / "charts" / "kcp-shard-operator"
CI_VALUES = sorted((CHART / "ci").glob("*-values.yaml"))
INSTALL_YAML = REPO / "manifests" / "install.yaml"
RENDER_INSTALL = REPO / "hack" / "render-install.sh"
CRD_SOURCE = REPO / "manifests" / "crds" / "kcpshard.dev_shards.yaml"
CRD_COPY = CHART / "crds" / "kcpshard.dev_shards.yaml"
SAMPLES = REPO / "manifests" / "samples"

Obj = dict[str, Any]


def pinned_version(name: str) -> str:
    """A version from hack/versions.env, e.g. ``pinned_version("KUBERNETES_VERSION")``."""
    for line in (REPO / "hack" / "versions.env").read_text().splitlines():
        key, _, value = line.partition("=")
        if key.strip() == name:
            return value.strip()
    raise KeyError(name)


@functools.cache
def tools_env() -> dict[str, str]:
    """The environment with the pinned tools on PATH; builds helm when it is missing (cached)."""
    hack = REPO / "hack" / "tools.sh"
    subprocess.run([str(hack), "build", "helm"], check=True, capture_output=True)
    out = subprocess.run(
        ["bash", "-c", f'eval "$({hack} env)" && env -0'],
        check=True,
        capture_output=True,
        env=dict(os.environ),
    ).stdout
    return dict(item.split("=", 1) for item in out.decode().split("\0") if "=" in item)


def helm(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """Run the pinned helm; the caller checks ``returncode``."""
    return subprocess.run(
        ["helm", *args], env=env or tools_env(), capture_output=True, text=True, timeout=300
    )


def template(
    *args: str, release: str = "t", namespace: str = "ops"
) -> subprocess.CompletedProcess[str]:
    """``helm template`` of the chart with extra ``args`` (values files, --set ...)."""
    return helm(
        "template",
        release,
        str(CHART),
        "--namespace",
        namespace,
        "--kube-version",
        pinned_version("KUBERNETES_VERSION"),
        *args,
    )


def render(*args: str, release: str = "t", namespace: str = "ops") -> list[Obj]:
    """The objects ``helm template`` renders; fails the test when helm fails."""
    proc = template(*args, release=release, namespace=namespace)
    assert proc.returncode == 0, proc.stderr
    return [doc for doc in yaml.safe_load_all(proc.stdout) if doc]


def of_kind(objects: Iterable[Obj], kind: str) -> list[Obj]:
    return [obj for obj in objects if obj["kind"] == kind]


def one(objects: Iterable[Obj], kind: str) -> Obj:
    found = of_kind(objects, kind)
    assert len(found) == 1, f"expected one {kind}, got {len(found)}"
    return found[0]


def load_yaml_docs(path: Path) -> list[Obj]:
    with path.open() as stream:
        return [doc for doc in yaml.safe_load_all(stream) if doc]
