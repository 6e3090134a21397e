from __future__ import annotations

import asyncio
import datetime
import logging
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import kopf
import pytest
import yaml
from kubernetes.client import Configuration

from kcp_shard_operator.cli import run
from kcp_shard_operator.cli.main import main
from kcp_shard_operator.cli.run import CHATTY_LOGGERS, configure_logging, kopf_login
from kcp_shard_operator.kube import credentials
from kcp_shard_operator.kube.client import user_agent


def test_peering_lifetime_below_ten_seconds_is_refused() -> None:
    with pytest.raises(SystemExit, match="--peering-lifetime must be at least 10 seconds"):
        main(["run", "--peering-lifetime", "5"])


@pytest.mark.parametrize("port", ["8080", "70000", "-1"])
def test_a_metrics_port_that_cannot_work_is_refused(port: str) -> None:
    with pytest.raises(SystemExit, match=f"--metrics-port {port} must be 0 \\(off\\)"):
        main(["run", "--metrics-port", port])


@pytest.fixture
def restored_logging() -> Iterator[None]:
    """The root logger's handlers and the levels configure_logging sets, put back after."""
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    names = [*CHATTY_LOGGERS, "asyncio"]
    saved = {
        name: (logging.getLogger(name).level, logging.getLogger(name).propagate) for name in names
    }
    yield
    root.handlers[:], root.level = handlers, level
    for name, (old_level, propagate) in saved.items():
        logging.getLogger(name).setLevel(old_level)
        logging.getLogger(name).propagate = propagate


@pytest.mark.usefixtures("restored_logging")
@pytest.mark.parametrize("level", ["info", "warning", "debug"])
def test_request_and_probe_lines_are_logged_at_debug_only(level: str) -> None:
    configure_logging(level, "text")
    debug = level == "debug"
    request_line = logging.getLogger("urllib3.connectionpool").isEnabledFor(logging.DEBUG)
    access_line = logging.getLogger("aiohttp.access").isEnabledFor(logging.INFO)
    assert (request_line, access_line) == (debug, debug)
    assert logging.getLogger("urllib3").isEnabledFor(logging.WARNING)


def test_a_kcp_checks_setting_that_is_not_a_boolean_is_one_line(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("KCP_SHARD_KCP_CHECKS", "sometimes")
    with pytest.raises(SystemExit, match=r"KCP_SHARD_KCP_CHECKS='sometimes' is not a boolean"):
        main(["run"])


def test_kopf_logs_in_as_the_operator_and_runs_the_plugin_again_next_time(
    tmp_path: Path,
) -> None:
    runs = tmp_path / "runs"
    expiry = datetime.datetime.now(datetime.UTC) + datetime.timedelta(hours=1)
    (tmp_path / "plugin.py").write_text(
        "import json, pathlib\n"
        f"runs = pathlib.Path({str(runs)!r})\n"
        "count = int(runs.read_text()) + 1 if runs.exists() else 1\n"
        "runs.write_text(str(count))\n"
        "print(json.dumps({'apiVersion': 'client.authentication.k8s.io/v1',\n"
        "    'kind': 'ExecCredential', 'status': {'token': f'tok-{count}',\n"
        f"    'expirationTimestamp': {expiry.strftime('%Y-%m-%dT%H:%M:%SZ')!r}}}}}))\n"
    )
    user = {
        "exec": {
            "apiVersion": "client.authentication.k8s.io/v1",
            "command": sys.executable,
            "args": [str(tmp_path / "plugin.py")],
        },
        "as": "operator",
        "as-groups": ["a", "b"],
    }
    config = {
        "current-context": "c",
        "contexts": [{"name": "c", "context": {"cluster": "c", "user": "u", "namespace": "ops"}}],
        "clusters": [
            {
                "name": "c",
                "cluster": {"server": "https://api:6443", "insecure-skip-tls-verify": True},
            }
        ],
        "users": [{"name": "u", "user": user}],
    }
    (tmp_path / "kc").write_text(yaml.safe_dump(config))
    login = kopf_login(credentials.load(str(tmp_path / "kc")))

    async def twice() -> list[tuple[str, list[str], str, str | None, Any]]:
        seen = []
        for _ in range(2):
            found = await login()
            headers = found.aiohttp_session.headers
            seen.append(
                (
                    headers["Authorization"],
                    headers.getall("Impersonate-Group"),
                    headers["User-Agent"],
                    found.default_namespace,
                    found.expiration,
                )
            )
            await found.aiohttp_session.close()
        return seen

    first, second = asyncio.run(twice())
    assert first == ("Bearer tok-1", ["a", "b"], user_agent(), "ops", expiry.replace(microsecond=0))
    assert second[0] == "Bearer tok-2"
    assert runs.read_text() == "2"


def test_the_connection_pool_is_as_large_as_kopf_s_thread_pool(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    sizes: list[int] = []
    given: dict[str, Any] = {}
    cluster = credentials.Credentials(Configuration(host="https://api:6443"), lambda: None)
    monkeypatch.setattr(run, "configure_logging", lambda *_: None)
    monkeypatch.setattr(run, "cluster_credentials", lambda _: cluster)
    monkeypatch.setattr(run, "Kube", lambda _, pool_size: sizes.append(pool_size))
    monkeypatch.setattr(kopf, "run", lambda **kwargs: given.update(kwargs))
    assert main(["run", "--metrics-port", "0"]) == 0
    assert sizes == [run.WORKERS]
    assert given["settings"].execution.max_workers == run.WORKERS


def test_tls_server_name_is_refused_by_run_in_one_line(monkeypatch: pytest.MonkeyPatch) -> None:
    configuration = Configuration(host="https://10.0.0.1:6443")
    configuration.tls_server_name = "api.internal"
    cluster = credentials.Credentials(configuration, lambda: None, context="c")
    monkeypatch.setattr(run, "configure_logging", lambda *_: None)
    monkeypatch.setattr(run, "cluster_credentials", lambda _: cluster)
    with pytest.raises(SystemExit, match=r"^error: context 'c': tls-server-name is not supported"):
        main(["run", "--metrics-port", "0"])
