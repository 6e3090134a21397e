"""hack/cluster.sh's choice of ports for a new kwok cluster, under the script's own
``set -euo pipefail``."""

from __future__ import annotations

import subprocess
from pathlib import Path

from testkit.tools import HACK

CLUSTER = HACK / "cluster.sh"


def free_ports(workdir: Path) -> list[int]:
    """What ``kwok_free_ports`` prints with ``workdir`` as kwok's working directory."""
    script = (
        "set -euo pipefail\n"
        f"source <(sed -n '/^kwok_free_ports()/,/^}}/p' {CLUSTER})\n"
        "mapfile -t ports < <(kwok_free_ports)\n"
        'printf "%s\\n" "${ports[@]}"\n'
    )
    proc = subprocess.run(
        ["bash", "-c", script],
        env={"KWOK_WORKDIR": str(workdir), "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    return [int(line) for line in proc.stdout.split()]


def test_the_first_cluster_gets_its_ports(tmp_path: Path) -> None:
    """No cluster yet: the glob of their configurations matches nothing, which is no port
    taken (it was a failed pipeline, and so no port, on a clean CI machine)."""
    (tmp_path / "clusters" / "being-made").mkdir(parents=True)
    ports = free_ports(tmp_path)
    assert len(ports) == 6
    assert all(10000 < port < 32767 for port in ports)


def test_ports_another_cluster_names_are_not_given_again(tmp_path: Path) -> None:
    other = tmp_path / "clusters" / "other"
    other.mkdir(parents=True)
    (other / "kwok.yaml").write_text(
        "options:\n  kubeApiserverPort: 32766\n  etcdPort: 32765\n  kwokControllerPort: 32763\n"
    )
    ports = free_ports(tmp_path)
    assert len(ports) == 6
    assert not {32766, 32765, 32763} & set(ports)
