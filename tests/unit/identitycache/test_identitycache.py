"""Unit tests for the identity-cache cleanup decision, kubeconfig and URL handling."""

from __future__ import annotations

import base64
import json
from pathlib import Path
from typing import Any

import pytest

from kcp_shard_operator.cli.cleanup import report
from kcp_shard_operator.cli.main import main
from kcp_shard_operator.core.kcp.versions import Version
from kcp_shard_operator.core.status.conditions import IDENTITY_CACHE_CLEANED
from kcp_shard_operator.identitycache.client import ShardClient, clean_shard
from kcp_shard_operator.identitycache.policy import (
    ROOT_TYPE_ANNOTATION,
    Action,
    Found,
    Outcome,
    Response,
    Result,
    cleaned_condition,
    configmap_url,
    decide,
    delete_options,
    interpret_delete,
    interpret_get,
    interpret_root_probe,
    retry_delay,
    root_logicalcluster_url,
)
from kcp_shard_operator.identitycache.target import base_url, load_target
from kcp_shard_operator.kube.kubeconfig import CredentialsError
from tests.conftest import RELEASE, make, non_root_object, shard_object

ADMIN = {"adminKubeconfigSecretRef": {"name": "shard-1-admin"}}
CLEANED = {"type": IDENTITY_CACHE_CLEANED, "status": "True", "reason": "Deleted", "message": "m"}
NOT_CLEANED = {"type": IDENTITY_CACHE_CLEANED, "status": "False", "reason": "Forbidden"}


def non_root(spec_version: str, status: dict[str, Any] | None, **spec: Any) -> dict[str, Any]:
    obj = non_root_object(version=spec_version, **spec)
    if status is not None:
        obj["status"] = status
    return obj


@pytest.mark.parametrize(
    ("obj", "enabled", "action", "reason", "condition"),
    [
        pytest.param(
            non_root("0.34.0", {"version": "0.34.0"}, **ADMIN), True, Action.CLEAN, "Upgraded",
            None, id="upgraded-and-rolled-out",
        ),
        pytest.param(
            non_root("0.34.1", {"version": "0.34.1"}, **ADMIN), True, Action.CLEAN, "Upgraded",
            None, id="later-release",
        ),
        pytest.param(
            non_root("0.34.0", {"version": "0.34.0"}, **ADMIN), False, Action.SKIP, "Disabled",
            None, id="switched-off",
        ),
        pytest.param(
            shard_object("root", version="0.34.0", **ADMIN), True, Action.SKIP, "RootShard",
            None, id="root-shard",
        ),
        pytest.param(
            non_root("0.32.3", {"version": "0.32.3"}, **ADMIN), True, Action.SKIP,
            "OlderVersion", None, id="old-version",
        ),
        pytest.param(
            non_root("0.34.0", {"version": "0.32.3"}, **ADMIN), True, Action.SKIP,
            "OlderVersion", None, id="upgrade-in-progress",
        ),
        pytest.param(
            non_root("0.34.0", None, **ADMIN), True, Action.SKIP, "RolloutInProgress", None,
            id="never-rolled-out",
        ),
        pytest.param(
            non_root("0.34.1", {"version": "0.34.0"}, **ADMIN), True, Action.SKIP,
            "RolloutInProgress", None, id="patch-rollout-in-progress",
        ),
        pytest.param(
            non_root("0.34.0", {"version": "0.34.0", "conditions": [CLEANED]}, **ADMIN), True,
            Action.SKIP, "AlreadyCleaned", None, id="already-cleaned",
        ),
        pytest.param(
            non_root("0.34.0", {"version": "0.34.0", "conditions": [NOT_CLEANED]}, **ADMIN),
            True, Action.CLEAN, "Upgraded", None, id="retry-after-failure",
        ),
        pytest.param(
            non_root("0.34.0", {"version": "0.34.0"}), True, Action.SKIP, "NoAdminKubeconfig",
            "NoAdminKubeconfig", id="no-credentials",
        ),
        pytest.param(
            non_root("0.32.3", {"version": "0.34.0", "conditions": [CLEANED]}, **ADMIN), True,
            Action.SKIP, "OlderVersion", "OlderVersion", id="rollback-started-resets",
        ),
        pytest.param(
            non_root("0.32.3", {"version": "0.32.3", "conditions": [CLEANED]}, **ADMIN), True,
            Action.SKIP, "OlderVersion", "OlderVersion", id="rollback-done-resets",
        ),
        pytest.param(
            non_root("0.32.3", {"version": "0.32.3", "conditions": [NOT_CLEANED]}, **ADMIN),
            True, Action.SKIP, "OlderVersion", "OlderVersion", id="old-version-failure-reset",
        ),
    ],
)  # fmt: skip
def test_decide(
    obj: dict[str, Any], enabled: bool, action: Action, reason: str, condition: str | None
) -> None:
    decision = decide(make(obj), RELEASE, enabled=enabled)
    assert (decision.action, decision.reason) == (action, reason)
    if condition is None:
        assert decision.condition is None
    else:
        assert decision.condition is not None
        assert decision.condition.type == IDENTITY_CACHE_CLEANED
        assert decision.condition.status is False
        assert decision.condition.reason == condition


def test_decide_uses_the_configured_release() -> None:
    shard = make(non_root("0.34.0", {"version": "0.34.0"}, **ADMIN))
    assert decide(shard, Version.parse("0.35.0")).action is Action.SKIP
    assert decide(shard, Version.parse("0.34.0")).action is Action.CLEAN


@pytest.mark.parametrize(
    ("server", "expected"),
    [
        ("https://10.0.0.1:6443", "https://10.0.0.1:6443"),
        ("https://10.0.0.1:6443/", "https://10.0.0.1:6443"),
        ("https://shard-1.example:6443/clusters/root", "https://shard-1.example:6443"),
        ("https://shard-1.example:6443/clusters/root:org:team/", "https://shard-1.example:6443"),
        ("https://h:6443/clusters/system:admin", "https://h:6443"),
        ("https://h:6443/clusters", "https://h:6443"),
        ("https://h/prefix/clusters/root", "https://h/prefix"),
        ("https://h/prefix", "https://h/prefix"),
        ("  https://h:6443/clusters/root?x=1  ", "https://h:6443"),
        ("http://127.0.0.1:8080/clusters/*", "http://127.0.0.1:8080"),
        ("https://admin:MARKER-pw@h:6443/clusters/root", "https://h:6443"),
    ],
)
def test_base_url(server: str, expected: str) -> None:
    assert base_url(server) == expected


@pytest.mark.parametrize(
    "server", ["h:6443", "ftp://h/x", "", "https://", "ftp://u:MARKER-pw@h", "https://u:MARKER@"]
)
def test_base_url_rejects(server: str) -> None:
    with pytest.raises(CredentialsError) as refused:
        base_url(server)
    assert "MARKER" not in str(refused.value)


def test_urls() -> None:
    assert configmap_url("https://h:6443") == (
        "https://h:6443/clusters/system:shard/api/v1/namespaces/default"
        "/configmaps/apiexport-identity-cache"
    )
    assert root_logicalcluster_url("https://h:6443") == (
        "https://h:6443/clusters/root/apis/core.kcp.io/v1alpha1/logicalclusters/cluster"
    )


USER = "shard-admin"


def kubeconfig(current: str | None, *contexts: str) -> dict[str, Any]:
    config: dict[str, Any] = {
        "clusters": [
            {"name": "base", "cluster": {"server": "https://h:6443"}},
            {"name": "root", "cluster": {"server": "https://h:6443/clusters/root"}},
        ],
        "users": [{"name": "shard-admin", "user": {"token": "secret-token"}}],
        "contexts": [
            {"name": c, "context": {"cluster": "root" if c == "root" else "base", "user": USER}}
            for c in contexts
        ],
    }  # fmt: skip
    if current is not None:
        config["current-context"] = current
    return config


def raw(config: dict[str, Any]) -> bytes:
    return json.dumps(config).encode()


@pytest.mark.parametrize(
    ("config", "requested", "expected"),
    [
        (kubeconfig("root", "root", "base", "shard-base"), None, "shard-base"),
        (kubeconfig("root", "root", "base"), None, "root"),
        (kubeconfig("base", "root", "base", "shard-base"), "root", "root"),
        (kubeconfig(None, "shard-base"), None, "shard-base"),
    ],
)
def test_the_context_given_else_shard_base_else_the_current_one(
    config: dict[str, Any], requested: str | None, expected: str
) -> None:
    assert load_target(raw(config), requested).context == expected


@pytest.mark.parametrize(
    ("config", "requested", "words"),
    [
        (kubeconfig("root", "root"), "shard-base", "context 'shard-base' not found (have: root)"),
        (kubeconfig(None, "root"), None, "no current-context"),
        (kubeconfig("gone", "root"), None, "context 'gone' not found"),
    ],
)
def test_a_context_that_is_not_there(
    config: dict[str, Any], requested: str | None, words: str
) -> None:
    with pytest.raises(CredentialsError) as refused:
        load_target(raw(config), requested)
    assert words in str(refused.value)


def b64(text: str) -> str:
    return base64.b64encode(text.encode()).decode()


def test_target_inline_material_and_base_url() -> None:
    config = kubeconfig("root", "root", "shard-base")
    config["clusters"][0]["cluster"].update(
        {"certificate-authority-data": b64("CA"), "tls-server-name": "shard-1"}
    )
    config["users"][0]["user"] = {
        "client-certificate-data": b64("CERT"),
        "client-key-data": b64("KEY"),
    }
    target = load_target(raw(config), inline_only=True)
    found = target.configuration
    assert target.context == "shard-base"
    assert ShardClient(target).server == "https://h:6443"
    assert [
        Path(str(path)).read_bytes()
        for path in (found.ssl_ca_cert, found.cert_file, found.key_file)
    ] == [b"CA", b"CERT", b"KEY"]
    assert target.tls_server_name == "shard-1"
    assert target.authorization() is None


def test_target_current_context_server_reduced_and_secrets_not_in_repr() -> None:
    target = load_target(raw(kubeconfig("root", "root")))
    assert ShardClient(target).server == "https://h:6443"
    assert target.authorization() == "Bearer secret-token"
    assert "secret-token" not in repr(target)


def test_target_relative_paths_resolve_against_the_kubeconfig_folder(tmp_path: Path) -> None:
    for name in ("ca.crt", "k.key"):
        (tmp_path / name).write_text("PEM")
    (tmp_path / "abs.crt").write_text("PEM")
    config = kubeconfig("base", "base")
    config["clusters"][0]["cluster"]["certificate-authority"] = "ca.crt"
    config["users"][0]["user"] = {
        "client-certificate": str(tmp_path / "abs.crt"),
        "client-key": "k.key",
    }
    found = load_target(raw(config), base_dir=tmp_path).configuration
    assert (found.ssl_ca_cert, found.cert_file, found.key_file) == (
        str(tmp_path / "ca.crt"),
        str(tmp_path / "abs.crt"),
        str(tmp_path / "k.key"),
    )


@pytest.mark.parametrize(
    ("user", "words"),
    [
        ({"exec": {"command": "x"}}, "the user needs an exec plugin"),
        ({"client-certificate-data": b64("C")}, "needs its key"),
        ({"client-key-data": "***not base64***"}, "not valid base64"),
        ({"client-certificate": "c.crt", "client-key": "k.key"}, "names a file"),
    ],
)
def test_target_errors(user: dict[str, Any], words: str) -> None:
    config = kubeconfig("base", "base")
    config["users"][0]["user"] = user
    with pytest.raises(CredentialsError, match=words):
        load_target(raw(config), inline_only=True)


def test_target_without_server() -> None:
    config = kubeconfig("base", "base")
    del config["clusters"][0]["cluster"]["server"]
    with pytest.raises(CredentialsError, match="no server"):
        load_target(raw(config))


BASE = "https://h:6443"


def not_found(name: str) -> dict[str, Any]:
    """The Status body of an API server's 404 about ``name``."""
    return {"kind": "Status", "reason": "NotFound", "details": {"name": name}}


FOUND = Found(uid="u-1", resource_version="42", keys=("shards.core.kcp.io", "tenancy.kcp.io"))
CONFIGMAP = {
    "kind": "ConfigMap",
    "metadata": {"name": "apiexport-identity-cache", "uid": "u-1", "resourceVersion": "42"},
    "data": {"tenancy.kcp.io": "abc", "shards.core.kcp.io": "def"},
}


@pytest.mark.parametrize(
    ("response", "result"),
    [
        (Response(404, not_found("cluster")), None),
        (Response(404, {"reason": "NotFound"}), Result.FAILED),
        (Response(404, None), Result.FAILED),
        (Response(404, not_found("other")), Result.FAILED),
        (Response(302, None), Result.FAILED),
        (Response(200, {"metadata": {"annotations": {ROOT_TYPE_ANNOTATION: "root:root"}}}),
         Result.ROOT_SHARD),
        (Response(403, {"message": "forbidden"}), Result.FORBIDDEN),
        (Response(401, None), Result.UNAUTHORIZED),
        (Response(500, {"message": "boom"}), Result.FAILED),
    ],
)  # fmt: skip
def test_interpret_root_probe(response: Response, result: Result | None) -> None:
    outcome = interpret_root_probe(BASE, response)
    assert (outcome.result if outcome else None) == result


def test_interpret_get() -> None:
    assert interpret_get(BASE, Response(200, CONFIGMAP)) == FOUND
    absent = interpret_get(BASE, Response(404, not_found("apiexport-identity-cache")))
    assert not isinstance(absent, Found)
    assert absent.result is Result.NOT_PRESENT
    assert absent.ok
    # Any server answers 404 to anything: that is no evidence that the ConfigMap is gone.
    for body in ({}, None, {"kind": "Status", "reason": "NotFound"}):
        unproven = interpret_get(BASE, Response(404, body))
        assert not isinstance(unproven, Found)
        assert unproven.result is Result.FAILED
    wrong = interpret_get(BASE, Response(200, {"kind": "Status", "metadata": {}}))
    assert not isinstance(wrong, Found)
    assert wrong.result is Result.FAILED
    denied = interpret_get(BASE, Response(403, {"message": 'User "kcp-admin" cannot get'}))
    assert not isinstance(denied, Found)
    assert denied.result is Result.FORBIDDEN
    assert "system:masters" in denied.message
    assert 'User "kcp-admin" cannot get' in denied.message
    assert not denied.ok
    assert not denied.retry
    rejected = interpret_get(BASE, Response(401, {"message": "Unauthorized"}))
    assert not isinstance(rejected, Found)
    assert rejected.result is Result.UNAUTHORIZED
    assert "check its token or client certificate" in rejected.message
    assert "system:masters" not in rejected.message
    assert not rejected.ok


def test_delete_options_pin_uid_and_resource_version() -> None:
    assert delete_options(FOUND)["preconditions"] == {"uid": "u-1", "resourceVersion": "42"}


@pytest.mark.parametrize(
    ("status", "result", "ok", "retry"),
    [
        (200, Result.DELETED, True, False),
        (202, Result.DELETED, True, False),
        (404, Result.NOT_PRESENT, True, False),
        (409, Result.CONFLICT, False, True),
        (403, Result.FORBIDDEN, False, False),
        (503, Result.FAILED, False, True),
    ],
)
def test_interpret_delete(status: int, result: Result, ok: bool, retry: bool) -> None:
    body = not_found("apiexport-identity-cache") if status == 404 else {"message": "x"}
    outcome = interpret_delete(BASE, FOUND, Response(status, body))
    assert (outcome.result, outcome.ok, outcome.retry) == (result, ok, retry)
    assert outcome.found == FOUND


@pytest.mark.parametrize(
    ("status", "result", "truth"),
    [
        (200, "Deleted", True),
        (404, "NotPresent", True),
        (403, "Forbidden", False),
        (409, "Conflict", False),
    ],
)
def test_cleaned_condition(status: int, result: str, truth: bool) -> None:
    body = not_found("apiexport-identity-cache") if status == 404 else {}
    cond = cleaned_condition(interpret_delete(BASE, FOUND, Response(status, body)), "Secret 's'")
    assert (cond.type, cond.status, cond.reason) == (IDENTITY_CACHE_CLEANED, truth, result)
    assert cond.message.startswith("Secret 's': ") is not truth


@pytest.mark.parametrize(
    ("outcome", "out", "err"),
    [
        (
            interpret_delete(BASE, FOUND, Response(200, {})),
            [f"found {FOUND.describe()}", f"deleted {FOUND.describe()} on {BASE}"],
            [],
        ),
        (
            interpret_get(BASE, Response(404, not_found("apiexport-identity-cache"))),
            [f"no apiexport-identity-cache in system:shard on {BASE}"],
            [],
        ),
        (
            interpret_delete(BASE, FOUND, Response(403, {"message": "no"})),
            [f"found {FOUND.describe()}"],
            ["error (Forbidden): "],
        ),
        (
            interpret_root_probe(BASE, Response(200, {})),
            [],
            [f"error (RootShard): {BASE} is a root shard"],
        ),
    ],
)
def test_report(outcome: Outcome | Found | None, out: list[str], err: list[str]) -> None:
    assert isinstance(outcome, Outcome)
    lines, errors = report(outcome)
    assert lines == out
    assert len(errors) == len(err)
    for line, start in zip(errors, err, strict=True):
        assert line.startswith(start)


@pytest.mark.parametrize(
    ("kubeconfig", "words"),
    [
        (b"clusters: [unclosed", "not valid YAML"),
        (b"- a list", "not a kubeconfig mapping"),
        (b"{}", "no current-context"),
    ],
)
def test_clean_shard_reports_unusable_kubeconfigs(kubeconfig: bytes, words: str) -> None:
    outcome = clean_shard(kubeconfig)
    assert outcome.result is Result.FAILED
    assert words in outcome.message
    assert not outcome.ok


@pytest.mark.parametrize(
    "kubeconfig",
    [
        b"users:\n- name: u\n  user: {token: MARKER-tok: x}\n",
        b"users:\n- name: u\n  user:\n    token: 'MARKER-tok\n",
        b"clusters:\n- name: c\n  cluster: {server: 'https://a:MARKER-pw@h:6443'}\n"
        b"contexts:\n- name: x\n  context: {cluster: c}\ncurrent-context: x\n",
        b"clusters:\n- name: c\n  cluster: {server: 'ftp://a:MARKER-pw@h'}\n"
        b"contexts:\n- name: x\n  context: {cluster: c}\ncurrent-context: x\n",
    ],
)
def test_kubeconfig_content_never_reaches_the_outcome(kubeconfig: bytes) -> None:
    outcome = clean_shard(kubeconfig, timeout=0.5)
    assert not outcome.ok
    assert "MARKER" not in outcome.message
    assert "MARKER" not in cleaned_condition(outcome, "Secret 'a'").message


def test_command_exit_codes(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["cleanup-identitycache", "--kubeconfig", str(tmp_path / "missing")]) == 1
    assert "cannot read" in capsys.readouterr().err
    broken = tmp_path / "kubeconfig"
    broken.write_text("current-context: gone\ncontexts: []\n")
    assert main(["cleanup-identitycache", "--kubeconfig", str(broken), "--dry-run"]) == 1
    assert "error (Failed): unusable kubeconfig: context 'gone' not found" in (
        capsys.readouterr().err
    )


@pytest.mark.parametrize(
    ("failures", "delay"),
    [(0, 0.0), (1, 30.0), (2, 60.0), (3, 120.0), (5, 480.0), (6, 600.0), (40, 600.0)],
)
def test_retry_delay_backs_off_and_caps(failures: int, delay: float) -> None:
    assert retry_delay(failures) == delay
