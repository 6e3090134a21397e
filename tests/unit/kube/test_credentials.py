"""Credentials as kubectl finds them (--kubeconfig, $KUBECONFIG's files merged, the pod's
ServiceAccount), loaded by the kubernetes library; what it does not do is added or refused in
one line. The requests these credentials make are in test_client.py."""

from __future__ import annotations

import base64
import datetime
import json
import stat
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from kcp_shard_operator.kube import credentials
from kcp_shard_operator.kube.client import RefusedError, UnreachableError, error_message, path_of
from kcp_shard_operator.kube.kubeconfig import CredentialsError

PEM = b"-----BEGIN CERTIFICATE-----\nMARKER\n-----END CERTIFICATE-----\n"


def kubeconfig(
    user: dict[str, Any],
    cluster: dict[str, Any] | None = None,
    context: dict[str, Any] | None = None,
) -> dict[str, Any]:
    return {
        "current-context": "ctx",
        "contexts": [{"name": "ctx", "context": {"cluster": "c", "user": "u", **(context or {})}}],
        "clusters": [{"name": "c", "cluster": cluster or {"server": "https://api:6443/"}}],
        "users": [{"name": "u", "user": user}],
    }


def write(path: Path, config: dict[str, Any]) -> str:
    path.write_text(yaml.safe_dump(config))
    return str(path)


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def test_token_and_inline_ca(tmp_path: Path) -> None:
    config = kubeconfig(
        {"token": "t0k"}, {"server": "https://api:6443/", "certificate-authority-data": b64(PEM)}
    )
    found = credentials.from_files([write(tmp_path / "kc", config)])
    assert (found.server, found.context, found.authorization()) == (
        "https://api:6443",
        "ctx",
        "Bearer t0k",
    )
    assert Path(str(found.configuration.ssl_ca_cert)).read_bytes() == PEM


def test_relative_paths_are_relative_to_the_kubeconfig(tmp_path: Path) -> None:
    (tmp_path / "pki").mkdir()
    for name in ("ca.crt", "admin.crt", "admin.key"):
        (tmp_path / "pki" / name).write_bytes(PEM)
    config = kubeconfig(
        {"client-certificate": "pki/admin.crt", "client-key": str(tmp_path / "pki/admin.key")},
        {"server": "https://api", "certificate-authority": "pki/ca.crt"},
    )
    found = credentials.from_files([write(tmp_path / "kc", config)]).configuration
    assert found.ssl_ca_cert == str(tmp_path / "pki/ca.crt")
    assert found.cert_file == str(tmp_path / "pki/admin.crt")
    assert found.key_file == str(tmp_path / "pki/admin.key")


def test_several_files_merge_as_kubectl_merges_them(tmp_path: Path) -> None:
    first = kubeconfig({"token": "first"})
    second = kubeconfig({"token": "second"})
    second["current-context"] = "other"
    second["contexts"].append({"name": "other", "context": {"cluster": "c", "user": "u"}})
    paths = [str(tmp_path / "absent"), write(tmp_path / "a", first), write(tmp_path / "b", second)]
    found = credentials.load(environ={"KUBECONFIG": ":".join(paths)})
    # The first current-context and the first user named u win; a missing file is skipped.
    assert (found.context, found.authorization()) == ("ctx", "Bearer first")
    chosen = credentials.load(context="other", environ={"KUBECONFIG": ":".join(paths)})
    assert (chosen.context, chosen.authorization()) == ("other", "Bearer first")


def test_merged_files_resolve_paths_against_their_own_folder(tmp_path: Path) -> None:
    (tmp_path / "one").mkdir()
    (tmp_path / "two").mkdir()
    for name in ("ca", "crt", "key"):
        (tmp_path / "two" / name).write_bytes(PEM)
    contexts_only = {"contexts": [{"name": "ctx", "context": {"cluster": "c", "user": "u"}}]}
    rest = kubeconfig({"client-certificate": "crt", "client-key": "key"})
    del rest["contexts"]
    rest["clusters"][0]["cluster"]["certificate-authority"] = "ca"
    found = credentials.from_files(
        [write(tmp_path / "one" / "kc", contexts_only), write(tmp_path / "two" / "kc", rest)]
    )
    assert found.context == "ctx"
    assert found.configuration.ssl_ca_cert == str(tmp_path / "two" / "ca")
    assert found.configuration.cert_file == str(tmp_path / "two" / "crt")
    assert found.configuration.key_file == str(tmp_path / "two" / "key")


def test_the_context_s_namespace_impersonation_server_name_and_proxy(tmp_path: Path) -> None:
    user = {
        "token": "t",
        "as": "alice",
        "as-groups": ["ops", "audit"],
        "as-uid": "42",
        "as-user-extra": {"reason/why": ["debug"]},
    }
    cluster = {
        "server": "https://10.0.0.1:6443",
        "tls-server-name": "api.internal",
        "proxy-url": "http://127.0.0.1:3128",
    }
    config = kubeconfig(user, cluster, {"namespace": "team-a"})
    found = credentials.from_files([write(tmp_path / "kc", config)])
    assert found.namespace == "team-a"
    assert found.impersonation == (
        ("Impersonate-User", "alice"),
        ("Impersonate-Uid", "42"),
        ("Impersonate-Group", "ops"),
        ("Impersonate-Group", "audit"),
        ("Impersonate-Extra-reason%2Fwhy", "debug"),
    )
    assert found.tls_server_name == "api.internal"
    assert found.proxy == "http://127.0.0.1:3128"


def plugin(tmp_path: Path, body: str) -> Path:
    """An exec plugin: a Python script that counts its runs in ``runs`` and runs ``body``."""
    script = tmp_path / "plugin.py"
    script.write_text(
        "import json, pathlib, sys\n"
        f"runs = pathlib.Path({str(tmp_path / 'runs')!r})\n"
        "count = int(runs.read_text()) + 1 if runs.exists() else 1\n"
        "runs.write_text(str(count))\n" + body
    )
    return script


def exec_user(script: Path) -> dict[str, Any]:
    return {
        "exec": {
            "apiVersion": "client.authentication.k8s.io/v1",
            "command": sys.executable,
            "args": [str(script)],
            "interactiveMode": "Never",
        }
    }


def credential(token: str, expiry: datetime.datetime | None = None) -> str:
    status: dict[str, Any] = {"token": token}
    if expiry is not None:
        status["expirationTimestamp"] = expiry.strftime("%Y-%m-%dT%H:%M:%SZ")
    return json.dumps(
        {
            "apiVersion": "client.authentication.k8s.io/v1",
            "kind": "ExecCredential",
            "status": status,
        }
    )


@pytest.mark.parametrize(("valid", "runs"), [(60, [1, 1, 1]), (1, [1, 2, 3])])
def test_an_exec_plugin_runs_again_when_its_credential_expires(
    tmp_path: Path, valid: int, runs: list[int]
) -> None:
    expiry = datetime.datetime.now(datetime.UTC) + datetime.timedelta(minutes=valid)
    answer = credential("TOKEN-N", expiry)
    script = plugin(tmp_path, f"print({answer!r}.replace('TOKEN-N', f'tok-{{count}}'))\n")
    found = credentials.from_files([write(tmp_path / "kc", kubeconfig(exec_user(script)))])
    assert found.expiry() is not None
    seen = [int(str(found.authorization()).rpartition("-")[2]) for _ in range(2)]
    # The library renews a credential within five minutes of its expiry.
    assert [1, *seen] == runs
    assert (tmp_path / "runs").read_text() == str(runs[-1])


def test_a_failing_exec_plugin_is_one_line_with_its_message(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    script = plugin(tmp_path, "print('token expired, run: login', file=sys.stderr)\nsys.exit(3)\n")
    with pytest.raises(CredentialsError) as refused:
        credentials.from_files([write(tmp_path / "kc", kubeconfig(exec_user(script)))])
    message = str(refused.value)
    assert message.startswith(f"kubeconfig: context 'ctx': exec plugin {sys.executable!r}: ")
    assert "process returned 3. token expired, run: login" in message
    assert "\n" not in message
    assert capsys.readouterr().err == ""


@pytest.mark.parametrize(
    ("config", "words"),
    [
        (
            kubeconfig({"auth-provider": {"name": "gcp"}}),
            "the auth-provider 'gcp' is not supported (kubectl dropped it too); use its exec",
        ),
        (kubeconfig({"auth-provider": {"name": "azure"}}), "auth-provider 'azure'"),
        ({**kubeconfig({"token": "x"}), "current-context": ""}, "no current-context"),
        (kubeconfig({"token": "x"}, {"insecure-skip-tls-verify": True}), "has no server"),
        (kubeconfig({"client-certificate-data": b64(PEM)}), "a client certificate needs its key"),
        (
            kubeconfig({"token": "x"}, {"server": "https://a", "proxy-url": "socks5://p:1080"}),
            "a socks5 proxy is not supported; use an http(s) proxy",
        ),
        (kubeconfig({"token": "x", "as-groups": ["g"]}), "need a user to impersonate (as)"),
        (kubeconfig({"token": "MARKER\r\nX-Injected: 1"}), "token cannot form an HTTP header"),
        (kubeconfig({"token": "x"}, {"server": "ftp://api"}), "not an http(s) URL"),
    ],
)
def test_unusable_kubeconfigs_are_refused_in_one_line(
    tmp_path: Path, config: dict[str, Any], words: str
) -> None:
    with pytest.raises(CredentialsError, match=r"^kubeconfig: ") as refused:
        credentials.from_files([write(tmp_path / "kc", config)])
    assert words in str(refused.value)
    assert "\n" not in str(refused.value)
    assert "MARKER" not in str(refused.value)


def test_an_unknown_context_names_the_ones_there_are(tmp_path: Path) -> None:
    path = write(tmp_path / "kc", kubeconfig({"token": "x"}))
    with pytest.raises(CredentialsError, match=r"context 'nope' not found \(have: ctx\)"):
        credentials.load(path, "nope")


@pytest.mark.parametrize(
    ("text", "words"),
    [
        ("token: [MARKER", "kubeconfig: not valid YAML (line 1, column 15)"),
        ("- a list", "kubeconfig: not a kubeconfig"),
    ],
)
def test_a_file_that_is_no_kubeconfig(tmp_path: Path, text: str, words: str) -> None:
    (tmp_path / "kc").write_text(text)
    with pytest.raises(CredentialsError) as refused:
        credentials.from_files([str(tmp_path / "kc")])
    assert str(refused.value).startswith(words)
    assert "MARKER" not in str(refused.value)


def test_no_kubeconfig_at_all(tmp_path: Path) -> None:
    env = {"KUBECONFIG": str(tmp_path / "absent")}
    with pytest.raises(CredentialsError, match="not in a pod and no kubeconfig"):
        credentials.load(environ=env)
    with pytest.raises(CredentialsError, match=r"^--kubeconfig /nowhere/kc: no such file$"):
        credentials.load("/nowhere/kc", environ={})


@pytest.fixture
def service_account(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    folder = tmp_path / "sa"
    folder.mkdir()
    (folder / "token").write_text("sa-token")
    (folder / "ca.crt").write_bytes(PEM)
    (folder / "namespace").write_text("operators")
    monkeypatch.setattr(credentials, "SERVICE_ACCOUNT_DIR", folder)
    return folder


POD = {"KUBERNETES_SERVICE_HOST": "fd00::1", "KUBERNETES_SERVICE_PORT": "443"}


def test_in_a_pod_the_service_account(service_account: Path) -> None:
    found = credentials.load(environ=POD)
    assert (found.server, found.namespace) == ("https://[fd00::1]:443", "operators")
    assert found.configuration.ssl_ca_cert == str(service_account / "ca.crt")
    assert found.authorization() == "bearer sa-token"
    with pytest.raises(CredentialsError, match="the ServiceAccount is used, which has no contexts"):
        credentials.load(context="other", environ=POD)


def test_an_explicit_kubeconfig_wins_over_the_service_account(
    tmp_path: Path, service_account: Path
) -> None:
    path = write(tmp_path / "kc", kubeconfig({"token": "mine"}))
    assert credentials.load(environ={**POD, "KUBECONFIG": path}).authorization() == "Bearer mine"
    assert credentials.load(path, environ=POD).authorization() == "Bearer mine"


def test_a_rotated_service_account_token_is_read_again_after_a_401(
    service_account: Path,
) -> None:
    found = credentials.load(environ=POD)
    (service_account / "token").write_text("rotated")
    found.renew(found.generation)
    assert found.authorization() == "bearer rotated"
    # A second caller that saw the same 401 does not read it a third time.
    (service_account / "token").write_text("third")
    found.renew(0)
    assert found.authorization() == "bearer rotated"


def test_a_shard_kubeconfig_s_key_is_a_private_file_removed_with_its_client(
    tmp_path: Path,
) -> None:
    raw = yaml.safe_dump(
        kubeconfig(
            {"client-certificate-data": b64(PEM), "client-key-data": b64(b"MARKER-KEY")},
            {"server": "https://shard:6443", "certificate-authority-data": b64(PEM)},
        )
    ).encode()
    found = credentials.from_kubeconfig(raw, inline_only=True)
    key = Path(str(found.configuration.key_file))
    assert key.read_bytes() == b"MARKER-KEY"
    assert stat.S_IMODE(key.stat().st_mode) == 0o600
    assert stat.S_IMODE(key.parent.stat().st_mode) == 0o700
    found.close()
    assert not key.parent.exists()


@pytest.mark.parametrize(
    ("user", "cluster", "words"),
    [
        ({"exec": {"command": "sh"}}, {}, "the user needs an exec plugin, which a kubeconfig"),
        ({"tokenFile": "/var/run/token"}, {}, "tokenFile names a file, which a kubeconfig"),
        ({"token": "t"}, {"certificate-authority": "/etc/ca"}, "use certificate-authority-data"),
    ],
)
def test_a_kubeconfig_from_a_secret_may_not_name_files_or_plugins(
    user: dict[str, Any], cluster: dict[str, Any], words: str
) -> None:
    raw = json.dumps(kubeconfig(user, {"server": "https://s", **cluster})).encode()
    with pytest.raises(CredentialsError, match=words):
        credentials.from_kubeconfig(raw, inline_only=True)


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
        (
            UnreachableError("https://user:pw@api:6443/x", "timed out"),
            "cannot reach api:6443: timed out",
        ),
    ],
)
def test_error_messages(err: BaseException, message: str) -> None:
    assert error_message(err) == message


@pytest.mark.parametrize(
    "config",
    [
        {"contexts": ["ctx"], "current-context": "ctx"},
        {**kubeconfig({"token": "x"}), "users": "u"},
        kubeconfig({"exec": "aws eks get-token"}),
        kubeconfig({"token": "x"}, context={"user": "nobody"}),
    ],
)
def test_a_malformed_kubeconfig_is_one_line_not_a_traceback(config: dict[str, Any]) -> None:
    with pytest.raises(CredentialsError) as refused:
        credentials.from_kubeconfig(json.dumps(config).encode())
    assert "\n" not in str(refused.value)
