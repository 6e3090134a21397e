"""The Helm chart under test: rendering with the pinned helm, picking objects."""

from __future__ import annotations

import subprocess
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import yaml

from testkit.tools import REPO, helm, helm_env, pinned_version

CHART = REPO / "charts" / "kcp-shard-operator"
CI_VALUES = sorted((CHART / "ci").glob("*-values.yaml"))
INSTALL_YAML = REPO / "manifests" / "install.yaml"
RENDER_INSTALL = REPO / "hack" / "render-install.sh"
CRD_SOURCE = REPO / "manifests" / "crds" / "kcpshard.dev.yaml"
CRD_COPY = CHART / "crds" / "kcpshard.dev.yaml"
SAMPLES = REPO / "manifests" / "samples"

Obj = dict[str, Any]


def template(
    *args: str, release: str = "t", namespace: str = "ops"
) -> subprocess.CompletedProcess[str]:
    """``helm template`` of the chart with extra ``args`` (values files, --set ...)."""
    return helm(
        helm_env(),
        "template",
        release,
        str(CHART),
        "--namespace",
        namespace,
        "--kube-version",
        pinned_version("KUBERNETES_VERSION"),
        *args,
        check=False,
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
