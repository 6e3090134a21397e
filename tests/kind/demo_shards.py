"""Print a root and a non-root Shard on the locally built kcp image, with their Secrets.

    python -m tests.kind.demo_shards NAMESPACE | kubectl apply -f -

Used by ``CLUSTER=kind make demo``; the certificates are throw-away (a temporary CA).
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path
from typing import Any

import yaml

from tests.e2e.pki import Pki, shard_secrets

from .kind import kcp_image, shard_spec


def documents(namespace: str, folder: Path) -> list[dict[str, Any]]:
    pki = Pki.create(folder)
    _, tag = kcp_image()
    version = tag.removeprefix("v")
    objs = [
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}},
        *shard_secrets(pki, namespace, "root", ["shard-1"]),
        shard_spec("root", namespace, version, tag),
        shard_spec("shard-1", namespace, version, tag, root="root"),
    ]
    for obj in objs[1:]:
        obj["metadata"]["namespace"] = namespace
    return objs


def main() -> None:
    with tempfile.TemporaryDirectory() as folder:
        print(yaml.safe_dump_all(documents(sys.argv[1], Path(folder))), end="")


if __name__ == "__main__":
    main()
