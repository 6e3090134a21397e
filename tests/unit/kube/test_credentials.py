"""Credentials from $KUBECONFIG files or the pod's ServiceAccount, and the API paths and errors.

The kubeconfig reader itself is tested in test_kubeconfig.py; here: reading and merging files.
"""

from __future__ import annotations

import base64
from pathlib import Path
from typing import Any

import pytest
import yaml

from kcp_shard_operator.kube import credentials
from kcp_shard_operator.kube.client import RefusedError, error_message, path_of
from kcp_shard_operator.kube.credentials import CredentialsError, TokenSource
from kcp_shard_operator.kube.kubeconfig import Endpoint


def kubeconfig(user: dict[str, Any], cluster: dict[str, Any] | None = None) -> dict[str, Any]:
    return {
        "current-context": "ctx",
        "contexts": [{"name": "ctx", "context": {"cluster": "c", "user": "u"}}],
        "clusters": [{"name": "c", "cluster": cluster or {"server": "https://api:6443/"}}],
        "users": [{"name": "u", "user": user}],
    }


def write(path: Path, config: dict[str, Any]) -> str:
    path.write_text(yaml.safe_dump(config))
    return str(path)


def test_token_and_embedded_ca(tmp_path: Path) -> None:
    ca = base64.b64encode(b"PEM").decode()
    config = kubeconfig(
        {"token": "t0k"}, {"server": "https://api:6443/", "certificate-authority-data": ca}
    )
    found = credentials.from_kubeconfig([write(tmp_path / "kc", config)])
    assert (found.server, found.context, found.ca_pem, found.token) == (
        "https://api:6443",
        "ctx",
        b"PEM",
        "t0k",
    )


def test_relative_paths_are_relative_to_the_kubeconfig(tmp_path: Path) -> None:
    config = kubeconfig(
        {"client-certificate": "pki/admin.crt", "client-key": "/abs/admin.key"},
        {"server": "https://api", "certificate-authority": "pki/ca.crt"},
    )
    found = credentials.from_kubeconfig([write(tmp_path / "kc", config)])
    assert found.ca_file == str(tmp_path / "pki/ca.crt")
    assert found.client_cert_file == str(tmp_path / "pki/admin.crt")
    assert found.client_key_file == "/abs/admin.key"


def test_first_file_wins_and_missing_files_are_skipped(tmp_path: Path) -> None:
    first = write(tmp_path / "a", kubeconfig({"token": "first"}))
    second = write(tmp_path / "b", kubeconfig({"token": "second"}))
    found = credentials.from_kubeconfig([str(tmp_path / "absent"), first, second])
    assert found.token == "first"


def test_merged_files_resolve_paths_against_their_own_folder(tmp_path: Path) -> None:
    (tmp_path / "one").mkdir()
    (tmp_path / "two").mkdir()
    contexts_only = {"contexts": [{"name": "ctx", "context": {"cluster": "c", "user": "u"}}]}
    rest = kubeconfig({"client-certificate": "crt", "client-key": "~/key"})
    del rest["contexts"]
    rest["current-context"] = "ctx"
    rest["clusters"][0]["cluster"]["certificate-authority"] = "ca"
    found = credentials.from_kubeconfig(
        [write(tmp_path / "one" / "kc", contexts_only), write(tmp_path / "two" / "kc", rest)]
    )
    assert found.context == "ctx"
    assert found.ca_file == str(tmp_path / "two" / "ca")
    assert found.client_cert_file == str(tmp_path / "two" / "crt")
    assert found.client_key_file == str(Path.home() / "key")


@pytest.mark.parametrize(
    ("config", "words"),
    [
        (kubeconfig({"exec": {"command": "aws"}}), "exec plugin"),
        (kubeconfig({"auth-provider": {"name": "gcp"}}), "auth-provider plugin"),
        ({**kubeconfig({"token": "x"}), "current-context": ""}, "no current-context"),
        (
            kubeconfig({"token": "x"}, {"insecure-skip-tls-verify": True}),
            "the cluster has no server",
        ),
    ],
)
def test_unusable_kubeconfigs_are_refused(
    tmp_path: Path, config: dict[str, Any], words: str
) -> None:
    with pytest.raises(CredentialsError, match=words):
        credentials.from_kubeconfig([write(tmp_path / "kc", config)])


def test_no_kubeconfig_at_all(tmp_path: Path) -> None:
    env = {"KUBECONFIG": str(tmp_path / "absent")}
    with pytest.raises(CredentialsError, match="not in a pod and no kubeconfig"):
        credentials.load(env)


def test_in_cluster_when_the_service_account_is_mounted(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "token").write_text("sa-token\n")
    monkeypatch.setattr(credentials, "SERVICE_ACCOUNT_DIR", tmp_path)
    found = credentials.load(
        {"KUBERNETES_SERVICE_HOST": "fd00::1", "KUBERNETES_SERVICE_PORT": "443"}
    )
    assert found.server == "https://[fd00::1]:443"
    assert found.ca_file == str(tmp_path / "ca.crt")
    assert TokenSource(found).token() == "sa-token"
    # Without the Service's environment it is not a pod: the kubeconfig is used.
    with pytest.raises(CredentialsError):
        credentials.load({"KUBECONFIG": str(tmp_path / "absent")})


def test_a_rotated_token_file_is_read_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    token_file = tmp_path / "token"
    token_file.write_text("one")
    source = TokenSource(Endpoint(server="https://api", token_file=str(token_file)))
    assert source.token() == "one"
    token_file.write_text("two")
    assert source.token() == "one"
    monkeypatch.setattr(credentials, "TOKEN_REREAD_SECONDS", -1.0)
    assert source.token() == "two"


def test_a_certificate_without_its_key_is_refused(tmp_path: Path) -> None:
    config = kubeconfig({"client-certificate-data": base64.b64encode(b"PEM").decode()})
    with pytest.raises(CredentialsError, match="needs its key"):
        credentials.from_kubeconfig([write(tmp_path / "kc", config)])


@pytest.mark.parametrize(
    ("args", "path"),
    [
        (("v1", "Service", "ns", "root-kcp"), "/api/v1/namespaces/ns/services/root-kcp"),
        (("apps/v1", "Deployment", "ns", None), "/apis/apps/v1/namespaces/ns/deployments"),
        (
            ("kcpshard.dev/v1alpha1", "Shard", "n s", "a"),
            "/apis/kcpshard.dev/v1alpha1/namespaces/n%20s/shards/a",
        ),
    ],
)
def test_paths(args: tuple[str, str, str, str | None], path: str) -> None:
    assert path_of(*args) == path


@pytest.mark.parametrize(
    ("err", "message"),
    [
        (
            RefusedError(422, "Unprocessable Entity", "spec.x: Invalid"),
            "422 Unprocessable Entity: spec.x: Invalid",
        ),
        (RefusedError(403, "Forbidden"), "403 Forbidden"),
        (ConnectionRefusedError(), "API server unreachable: ConnectionRefusedError"),
    ],
)
def test_error_messages(err: BaseException, message: str) -> None:
    assert error_message(err) == message
