from __future__ import annotations

import stat
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes.client import Configuration

from kcp_shard_operator.cli import kubeconfig
from kcp_shard_operator.cli.main import main
from kcp_shard_operator.kube import credentials
from kcp_shard_operator.kube.credentials import Credentials
from kcp_shard_operator.kube.kubeconfig import CredentialsError
from tests.conftest import shard_object
from tests.fake_kube import refused

KEY = "-----BEGIN EC PRIVATE KEY-----secret"
ISSUED = yaml.safe_dump(
    {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {"name": "base", "cluster": {"server": "https://root-kcp.ns.svc:6443"}},
            {"name": "shard-base", "cluster": {"server": "https://root-kcp.ns.svc:6443/x"}},
        ],
        "users": [{"name": "admin", "user": {"client-key-data": KEY}}],
        "contexts": [{"name": "base", "context": {"cluster": "base", "user": "admin"}}],
        "current-context": "base",
    }
).encode()


class Fake:
    """The two reads the command makes, from dicts."""

    def __init__(
        self,
        shards: dict[tuple[str, str], Any],
        secrets: dict[tuple[str, str], dict[str, bytes]],
        error: Exception | None = None,
    ) -> None:
        self.shards, self.secrets, self.error = shards, secrets, error

    def get(self, api_version: str, kind: str, namespace: str, name: str) -> Any:
        assert api_version == "kcpshard.dev/v1alpha1"
        if self.error:
            raise self.error
        found = self.shards.get((namespace, name))
        return found if found is not None and found["kind"] == kind else None

    def secret_data(self, namespace: str, name: str) -> dict[str, bytes] | None:
        return self.secrets.get((namespace, name))


@pytest.fixture
def cluster(monkeypatch: pytest.MonkeyPatch) -> Fake:
    issued = {("ns", "root-kcp-admin-kubeconfig"): {"kubeconfig": ISSUED}}
    fake = Fake({("ns", "root"): shard_object()}, issued)
    found = Credentials(Configuration(host="https://k"), lambda: None)
    monkeypatch.setattr(credentials, "load", lambda *_: found)
    monkeypatch.setattr(kubeconfig, "Kube", lambda _: fake)
    return fake


def error_of(argv: list[str], capsys: pytest.CaptureFixture[str]) -> str:
    """The one line the command exits with; nothing printed besides."""
    with pytest.raises(SystemExit) as exc:
        main(argv)
    assert capsys.readouterr().out == ""
    message = str(exc.value.code)
    assert message.startswith("error: ")
    assert "\n" not in message
    assert KEY not in message
    return message


def test_the_issued_secret_is_printed(cluster: Fake, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["kubeconfig", "root", "-n", "ns"]) == 0
    assert yaml.safe_load(capsys.readouterr().out) == yaml.safe_load(ISSUED)


def test_the_users_ref_and_key_are_used(cluster: Fake, capsys: pytest.CaptureFixture[str]) -> None:
    ref = {"name": "mine", "key": "admin.conf"}
    cluster.shards[("ns", "root")] = shard_object(adminKubeconfigSecretRef=ref)
    cluster.secrets[("ns", "mine")] = {"admin.conf": b'{"clusters": [], "users": []}'}
    assert main(["kubeconfig", "root", "-n", "ns"]) == 0
    assert capsys.readouterr().out == "clusters: []\nusers: []\n"


def test_the_ref_key_defaults_to_kubeconfig(
    cluster: Fake, capsys: pytest.CaptureFixture[str]
) -> None:
    cluster.shards[("ns", "root")] = shard_object(adminKubeconfigSecretRef={"name": "mine"})
    cluster.secrets[("ns", "mine")] = {"kubeconfig": b"clusters: []"}
    assert main(["kubeconfig", "root", "-n", "ns"]) == 0
    assert capsys.readouterr().out == "clusters: []\n"


def test_namespace_defaults_to_default(cluster: Fake, capsys: pytest.CaptureFixture[str]) -> None:
    assert error_of(["kubeconfig", "root"], capsys) == "error: Shard default/root not found"


def test_server_replaces_every_clusters_server(
    cluster: Fake, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["kubeconfig", "root", "-n", "ns", "--server", "https://localhost:6443/"]) == 0
    printed = yaml.safe_load(capsys.readouterr().out)
    servers = [item["cluster"]["server"] for item in printed["clusters"]]
    assert servers == ["https://localhost:6443", "https://localhost:6443"]
    assert printed["users"] == yaml.safe_load(ISSUED)["users"]


def test_server_must_be_a_url(cluster: Fake, capsys: pytest.CaptureFixture[str]) -> None:
    message = error_of(["kubeconfig", "root", "-n", "ns", "--server", "localhost:6443"], capsys)
    assert message == "error: --server: the cluster's server is not an http(s) URL"


def test_output_file_is_private(
    cluster: Fake, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    path = tmp_path / "kcp.kubeconfig"
    path.write_text("old, longer content " * 100)
    path.chmod(0o644)
    assert main(["kubeconfig", "root", "-n", "ns", "-o", str(path)]) == 0
    assert capsys.readouterr().out == ""
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert yaml.safe_load(path.read_text()) == yaml.safe_load(ISSUED)


def test_output_file_that_cannot_be_written(
    cluster: Fake, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    target = tmp_path / "missing" / "kubeconfig"
    message = error_of(["kubeconfig", "root", "-n", "ns", "-o", str(target)], capsys)
    assert message == f"error: cannot write {target}: No such file or directory"


def test_shard_missing(cluster: Fake, capsys: pytest.CaptureFixture[str]) -> None:
    message = error_of(["kubeconfig", "nope", "-n", "ns"], capsys)
    assert message == "error: Shard ns/nope not found"


@pytest.mark.parametrize(
    ("spec", "why"),
    [
        ({}, "the operator may not have issued it yet"),
        ({"pki": {"issue": False}}, "spec.pki.issue is false"),
        ({"tls": {"clientCASecretRef": {"name": "ca"}}}, "client CA is the user's own"),
    ],
)
def test_issued_secret_missing(
    cluster: Fake, capsys: pytest.CaptureFixture[str], spec: dict[str, Any], why: str
) -> None:
    cluster.shards[("ns", "root")] = shard_object(**spec)
    cluster.secrets.clear()
    message = error_of(["kubeconfig", "root", "-n", "ns"], capsys)
    assert message.startswith("error: Secret ns/root-kcp-admin-kubeconfig not found: ")
    assert why in message


def test_users_secret_missing(cluster: Fake, capsys: pytest.CaptureFixture[str]) -> None:
    cluster.shards[("ns", "root")] = shard_object(adminKubeconfigSecretRef={"name": "mine"})
    message = error_of(["kubeconfig", "root", "-n", "ns"], capsys)
    assert message == "error: Secret ns/mine not found: named by spec.adminKubeconfigSecretRef"


def test_key_missing(cluster: Fake, capsys: pytest.CaptureFixture[str]) -> None:
    cluster.secrets[("ns", "root-kcp-admin-kubeconfig")] = {"other": ISSUED}
    message = error_of(["kubeconfig", "root", "-n", "ns"], capsys)
    assert message.startswith(
        "error: Secret ns/root-kcp-admin-kubeconfig has no key 'kubeconfig': "
    )


@pytest.mark.parametrize(
    ("raw", "why"),
    [
        (b"- a list", "not a kubeconfig mapping"),
        (b"clusters: {}", "clusters is not a list of named clusters"),
        (b"clusters: [base]", "clusters is not a list of named clusters"),
        (b"{not: " + KEY.encode(), "neither JSON nor YAML"),
        (b"\xff" + KEY.encode(), "neither JSON nor YAML"),
    ],
)
def test_not_a_kubeconfig(
    cluster: Fake, capsys: pytest.CaptureFixture[str], raw: bytes, why: str
) -> None:
    cluster.secrets[("ns", "root-kcp-admin-kubeconfig")]["kubeconfig"] = raw
    message = error_of(["kubeconfig", "root", "-n", "ns"], capsys)
    assert message == f"error: Secret ns/root-kcp-admin-kubeconfig key 'kubeconfig': {why}"


def test_api_error(cluster: Fake, capsys: pytest.CaptureFixture[str]) -> None:
    cluster.error = refused(403, "Forbidden")
    message = error_of(["kubeconfig", "root", "-n", "ns"], capsys)
    assert message == "error: 403 Forbidden: refused by the fake API server"


def test_an_unreachable_api_server_is_one_line_naming_its_host(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = {
        "clusters": [{"name": "c", "cluster": {"server": "https://127.0.0.1:1"}}],
        "users": [{"name": "u", "user": {"token": "t"}}],
        "contexts": [{"name": "x", "context": {"cluster": "c", "user": "u"}}],
        "current-context": "x",
    }
    (tmp_path / "kc").write_text(yaml.safe_dump(config))
    argv = ["kubeconfig", "root", "--kubeconfig", str(tmp_path / "kc")]
    message = error_of(argv, capsys)
    assert message == "error: cannot reach 127.0.0.1:1: [Errno 111] Connection refused"


@pytest.mark.parametrize(("context_namespace", "namespace"), [("ns", "ns"), (None, "default")])
def test_without_n_the_context_s_namespace_else_default(
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    context_namespace: str | None,
    namespace: str,
) -> None:
    asked: list[tuple[str, str]] = []

    class Asked(Fake):
        def get(self, api_version: str, kind: str, namespace: str, name: str) -> Any:
            asked.append((namespace, name))
            return None

    found = Credentials(Configuration(host="https://k"), lambda: None, namespace=context_namespace)
    chosen: list[tuple[str | None, str | None]] = []

    def load(kubeconfig: str | None, context: str | None) -> Credentials:
        chosen.append((kubeconfig, context))
        return found

    monkeypatch.setattr(credentials, "load", load)
    monkeypatch.setattr(kubeconfig, "Kube", lambda _: Asked({}, {}))
    argv = ["kubeconfig", "root", "--kubeconfig", "/kc", "--context", "other"]
    assert error_of(argv, capsys) == f"error: Shard {namespace}/root not found"
    assert (asked, chosen) == ([(namespace, "root")], [("/kc", "other")])


def test_credentials_error(
    cluster: Fake, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    def no_credentials(*_: object) -> Credentials:
        raise CredentialsError("no credentials: not in a pod and no kubeconfig at /x")

    monkeypatch.setattr(credentials, "load", no_credentials)
    message = error_of(["kubeconfig", "root", "-n", "ns"], capsys)
    assert message == "error: no credentials: not in a pod and no kubeconfig at /x"


def test_invalid_shard_spec(cluster: Fake, capsys: pytest.CaptureFixture[str]) -> None:
    cluster.shards[("ns", "root")] = shard_object(replicas="two")
    message = error_of(["kubeconfig", "root", "-n", "ns"], capsys)
    assert message.startswith("error: Shard ns/root: spec.replicas: ")


def front_proxy(**spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "kcpshard.dev/v1alpha1",
        "kind": "FrontProxy",
        "metadata": {"name": "kcp", "namespace": "ns"},
        "spec": {"version": "0.34.0", "rootShardRef": {"name": "root"}, **spec},
    }


def test_the_front_proxys_admin_kubeconfig_is_printed_with_front_proxy(
    cluster: Fake, capsys: pytest.CaptureFixture[str]
) -> None:
    cluster.shards[("ns", "kcp")] = front_proxy()
    cluster.secrets[("ns", "kcp-front-proxy-admin-kubeconfig")] = {"kubeconfig": ISSUED}
    argv = ["kubeconfig", "kcp", "--front-proxy", "-n", "ns", "--server", "https://localhost:1"]
    assert main(argv) == 0
    printed = yaml.safe_load(capsys.readouterr().out)
    assert {c["cluster"]["server"] for c in printed["clusters"]} == {"https://localhost:1"}
    assert "FrontProxy ns/root not found" in error_of(
        ["kubeconfig", "root", "--front-proxy", "-n", "ns"], capsys
    ), "a Shard is not a FrontProxy"


@pytest.mark.parametrize(
    ("spec", "secret", "words"),
    [
        ({}, None, "Secret ns/kcp-front-proxy-admin-kubeconfig not found: the operator issues it"),
        ({"version": "v1"}, None, "FrontProxy ns/kcp: spec.version"),
        (
            {
                "pki": {"issue": False},
                "kubeconfigSecretRef": {"name": "k"},
                "tls": {
                    name: {"name": "x"}
                    for name in (
                        "servingCertSecretRef",
                        "clientCASecretRef",
                        "requestHeaderClientCertSecretRef",
                        "shardsCASecretRef",
                    )
                },
            },
            {"kubeconfig": ISSUED},
            "spec.pki.issue is false, so the operator issues no kubeconfig",
        ),
    ],
)
def test_a_front_proxy_without_an_issued_kubeconfig_is_one_line(
    cluster: Fake,
    capsys: pytest.CaptureFixture[str],
    spec: dict[str, Any],
    secret: dict[str, bytes] | None,
    words: str,
) -> None:
    cluster.shards[("ns", "kcp")] = front_proxy(**spec)
    if secret is not None:
        cluster.secrets[("ns", "kcp-front-proxy-admin-kubeconfig")] = secret
    assert words in error_of(["kubeconfig", "kcp", "--front-proxy", "-n", "ns"], capsys)
