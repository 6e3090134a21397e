"""``cleanup-identitycache`` against a real sharded kcp (root shard + shard-1).

The tests share one sharded kcp and run in file order: the old-binary tests first, then
the upgrade to the stand-in binary (kcp without the identitycache controller), after
which shard-1 is put back on the old binary for later users of the fixture.
"""

from __future__ import annotations

import base64
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import yaml

from testkit.metrics import writes_between
from testkit.tools import log
from testkit.wait import wait_for

from .kcp import KcpProcess, ShardedKcp, client_certificate, identity, root_state

pytest_plugins = ("tests.e2e.kcp_fixture",)
pytestmark = pytest.mark.e2e
STAYS_GONE_WINDOW = 10
"""Seconds the deleted ConfigMap is watched on the stand-in; the old controller writes it
again at once, within a second of the delete (logged by the test that shows it)."""


def cleanup(
    kubeconfig: Path, *args: str, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """Run the real command line as a separate process."""
    exe = Path(sys.executable).parent / "kcp-shard-operator"
    return subprocess.run(
        [str(exe), "cleanup-identitycache", "--kubeconfig", str(kubeconfig), *args],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        env=env,
    )


@pytest.fixture
def present(sharded_kcp: ShardedKcp) -> dict[str, Any]:
    """The ConfigMap on shard-1 as the old identitycache controller keeps it."""
    found: dict[str, Any] = wait_for(sharded_kcp.configmap, 60, "apiexport-identity-cache")
    return found


def test_dry_run_changes_nothing(sharded_kcp: ShardedKcp, present: dict[str, Any]) -> None:
    requests = sharded_kcp.request_totals(sharded_kcp.shard)
    result = cleanup(sharded_kcp.shard.admin_kubeconfig, "--dry-run")
    assert result.returncode == 0, result.stderr
    uid, version = identity(present)
    assert f"uid {uid}, resourceVersion {version}" in result.stdout
    assert "dry run: would delete" in result.stdout
    assert "tenancy.kcp.io" in result.stdout
    # The command has exited: every request it sent is counted.
    after = sharded_kcp.request_totals(sharded_kcp.shard)
    assert writes_between(requests, after, ["configmaps"]) == {}
    assert identity(sharded_kcp.configmap()) == (uid, version)


def test_refuses_the_root_shard(sharded_kcp: ShardedKcp) -> None:
    before = root_state(sharded_kcp)
    assert before["configmap"] is None
    for extra in ((), ("--dry-run",), ("--context", "root")):
        result = cleanup(sharded_kcp.root.admin_kubeconfig, *extra)
        assert result.returncode == 1, result.stdout
        assert "is a root shard" in result.stderr
        assert "refusing" in result.stderr
    assert root_state(sharded_kcp) == before


def test_forbidden_without_system_masters(sharded_kcp: ShardedKcp, present: dict[str, Any]) -> None:
    result = cleanup(sharded_kcp.shard.admin_kubeconfig, "--context", "base")
    assert result.returncode == 1
    assert "error (Forbidden)" in result.stderr
    assert "group system:masters" in result.stderr
    assert identity(sharded_kcp.configmap()) == identity(present)
    token_line = next(
        line
        for line in sharded_kcp.shard.admin_kubeconfig.read_text().splitlines()
        if "token:" in line
    )
    assert token_line.split("token:")[1].strip() not in result.stdout + result.stderr


def cert_kubeconfig(kcp: ShardedKcp, cert: Path, key: Path, inline: bool) -> dict[str, Any]:
    """A kubeconfig for shard-1 authenticating with a client certificate."""
    ca = base64.b64encode((kcp.shard.root_dir / "apiserver.crt").read_bytes()).decode()
    if inline:
        user = {
            "client-certificate-data": base64.b64encode(cert.read_bytes()).decode(),
            "client-key-data": base64.b64encode(key.read_bytes()).decode(),
        }
    else:
        user = {"client-certificate": cert.name, "client-key": key.name}
    return {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {
                "name": "shard-1",
                "cluster": {
                    "server": f"{kcp.shard.base_url}/clusters/root",
                    "certificate-authority-data": ca,
                },
            }
        ],
        "users": [{"name": "cert", "user": user}],
        "contexts": [{"name": "cert", "context": {"cluster": "shard-1", "user": "cert"}}],
        "current-context": "cert",
    }


@pytest.mark.parametrize(
    ("group", "inline", "code", "expected"),
    [
        ("system:masters", True, 0, "dry run: would delete"),
        ("system:masters", False, 0, "dry run: would delete"),
        ("e2e-nobody", True, 1, "error (Forbidden)"),
    ],
)
def test_client_certificates(
    sharded_kcp: ShardedKcp,
    present: dict[str, Any],
    tmp_path: Path,
    group: str,
    inline: bool,
    code: int,
    expected: str,
) -> None:
    cert, key = client_certificate(sharded_kcp.client_ca, tmp_path, "e2e-user", group)
    path = tmp_path / "cert.kubeconfig"
    path.write_text(yaml.safe_dump(cert_kubeconfig(sharded_kcp, cert, key, inline)))
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    result = cleanup(path, "--dry-run", env={**os.environ, "TMPDIR": str(scratch)})
    assert result.returncode == code, result.stdout + result.stderr
    assert expected in result.stdout + result.stderr
    assert list(scratch.iterdir()) == [], "inline key material must not stay on disk"
    assert identity(sharded_kcp.configmap()) == identity(present)


def test_unreachable_shard_fails_clearly(sharded_kcp: ShardedKcp, tmp_path: Path) -> None:
    gone = KcpProcess("gone", sharded_kcp.shard.binary, tmp_path / "gone")
    config = sharded_kcp.shard.admin_kubeconfig.read_text().replace(
        sharded_kcp.shard.base_url, gone.base_url
    )
    path = tmp_path / "admin.kubeconfig"
    path.write_text(config)
    result = cleanup(path)
    assert result.returncode == 1
    assert f"error (ShardUnreachable): cannot reach {gone.base_url}" in result.stderr


def test_old_shard_recreates_a_deleted_configmap(
    sharded_kcp: ShardedKcp, present: dict[str, Any]
) -> None:
    """Why the operator waits for the rollout: an old shard writes the ConfigMap again."""
    uid, _ = identity(present)
    result = cleanup(sharded_kcp.shard.admin_kubeconfig)
    deleted = time.monotonic()
    assert result.returncode == 0, result.stderr
    assert f"deleted ConfigMap default/apiexport-identity-cache in system:shard (uid {uid}" in (
        result.stdout
    )

    def recreated() -> dict[str, Any] | None:
        found = sharded_kcp.configmap()
        return found if found is not None and identity(found)[0] != uid else None

    again = wait_for(recreated, 60, "the old controller to recreate the ConfigMap")
    log(f"measured: the old controller wrote it again {time.monotonic() - deleted:.1f}s later")
    assert set(again["data"]) == set(present["data"])


def test_cleanup_after_upgrade(sharded_kcp: ShardedKcp, standin_binary: Path) -> None:
    """On a shard without the identitycache controller the ConfigMap stays stale until the
    command deletes it; then it stays gone, a second run is a no-op, the shard serves."""
    old_binary = sharded_kcp.shard.binary
    root_before = root_state(sharded_kcp)
    wait_for(sharded_kcp.configmap, 60, "apiexport-identity-cache before the upgrade")
    try:
        log(
            f"shard-1 restarted on the stand-in in {sharded_kcp.restart_shard(standin_binary):.1f}s"
        )
        stale = sharded_kcp.configmap()
        assert stale is not None, "the upgrade itself must not remove the ConfigMap"

        requests = sharded_kcp.request_totals(sharded_kcp.shard)
        first = cleanup(sharded_kcp.shard.admin_kubeconfig)
        assert first.returncode == 0, first.stderr
        assert f"in system:shard (uid {identity(stale)[0]}" in first.stdout
        assert "deleted ConfigMap" in first.stdout
        # Gone for good: over a window well past the time the old controller takes to write
        # it again (test_old_shard_recreates_a_deleted_configmap), nothing writes a ConfigMap.
        time.sleep(STAYS_GONE_WINDOW)
        assert sharded_kcp.configmap() is None

        second = cleanup(sharded_kcp.shard.admin_kubeconfig)
        assert second.returncode == 0, second.stderr
        assert "no apiexport-identity-cache in system:shard" in second.stdout
        assert "nothing to do" in second.stdout
        assert "deleted" not in second.stdout
        after = sharded_kcp.request_totals(sharded_kcp.shard)
        assert writes_between(requests, after, ["configmaps"]) == {"DELETE configmaps": 1}

        status, listing = sharded_kcp.request(
            sharded_kcp.shard, "GET", "/clusters/system:shard/api/v1/namespaces/default/configmaps"
        )
        assert status == 200
        assert "apiexport-identity-cache" not in [i["metadata"]["name"] for i in listing["items"]]
        assert sharded_kcp.ready(sharded_kcp.shard)
        assert root_state(sharded_kcp) == root_before
    finally:
        log(f"shard-1 back on the old kcp in {sharded_kcp.restart_shard(old_binary):.1f}s")
