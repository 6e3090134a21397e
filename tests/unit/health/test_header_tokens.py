"""Tokens that cannot form an HTTP header (a line break, a header line smuggled after one):
refused as kubeconfig errors naming where they came from, never quoted, never a stopped pass."""

from __future__ import annotations

import base64
import json
import logging
from pathlib import Path
from typing import Any

import pytest

from kcp_shard_operator.core.api.model import JSON
from kcp_shard_operator.core.shard.health import ProbeTarget
from kcp_shard_operator.health.probe import INVALID_KUBECONFIG, probe_shard
from kcp_shard_operator.identitycache.client import clean_shard
from kcp_shard_operator.identitycache.policy import Outcome, Result
from kcp_shard_operator.identitycache.target import load_target
from kcp_shard_operator.kube import credentials
from kcp_shard_operator.kube.client import no_answer_reason
from kcp_shard_operator.kube.kubeconfig import CredentialsError
from tests.conftest import non_root_object, shard_object
from tests.fake_kube import SECRETS, Effects, FakeKube, context, rolled_out, secret, settle
from tests.unit.controller.test_pass import condition, conditions, status

BAD_TOKENS = {
    "newline": "MARKER-tok\n",
    "inner newline": "MARKER-tok\nrest",
    "CR/LF and a header": "MARKER-tok\r\nX-Injected: MARKER-2",
    "bare CR": "MARKER-tok\rAuthorization: Bearer MARKER-3",
    "control character": "MARKER-tok\x00",
    "non-ASCII": "MARKER-tök",
}


def kubeconfig(token: str, server: str = "https://127.0.0.1:1") -> bytes:
    config = {
        "clusters": [{"name": "c", "cluster": {"server": server}}],
        "users": [{"name": "u", "user": {"token": token}}],
        "contexts": [{"name": "shard-base", "context": {"cluster": "c", "user": "u"}}],
        "current-context": "shard-base",
    }
    return json.dumps(config).encode()


@pytest.mark.parametrize("token", BAD_TOKENS.values(), ids=BAD_TOKENS.keys())
def test_a_token_that_cannot_form_a_header_is_a_kubeconfig_error(token: str) -> None:
    with pytest.raises(CredentialsError) as refused:
        load_target(kubeconfig(token))
    message = str(refused.value)
    assert "context 'shard-base': the user's token cannot form an HTTP header" in message
    assert "MARKER" not in message


@pytest.mark.parametrize("token", ["abc.def-ghi_jkl~mno+p/q=", "user:secret", "with space\ttab"])
def test_a_token_that_forms_a_header_is_kept_as_it_is(token: str) -> None:
    assert load_target(kubeconfig(token)).authorization() == f"Bearer {token}"


@pytest.mark.parametrize(
    ("token", "problem"),
    [("a\nb", "a line break"), ("a\r\nb", "a line break"), ("a\x7fb", "a control or non-ASCII")],
)
def test_the_refusal_says_what_is_wrong(token: str, problem: str) -> None:
    with pytest.raises(CredentialsError, match=f"token cannot form an HTTP header: .*{problem}"):
        load_target(kubeconfig(token))


@pytest.mark.parametrize("token", BAD_TOKENS.values(), ids=BAD_TOKENS.keys())
def test_the_cleanup_reports_the_kubeconfig_and_sends_nothing(token: str) -> None:
    outcome = clean_shard(kubeconfig(token), timeout=0.5)
    assert outcome.result is Result.FAILED
    assert outcome.message.startswith("unusable kubeconfig: context 'shard-base': the user's token")
    assert "MARKER" not in outcome.message


def test_a_token_file_with_a_line_break_is_refused_for_the_shard_and_the_operator(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    token_file = tmp_path / "token"
    token_file.write_text("MARKER-tok\r\nX-Injected: 1\n")
    config = json.loads(kubeconfig("unused"))
    config["users"][0]["user"] = {"tokenFile": str(token_file)}
    with pytest.raises(CredentialsError, match="cannot form an HTTP header") as shard:
        load_target(json.dumps(config).encode(), base_dir=tmp_path)
    monkeypatch.setattr(credentials, "SERVICE_ACCOUNT_DIR", tmp_path)
    (tmp_path / "ca.crt").write_text("PEM")
    pod = {"KUBERNETES_SERVICE_HOST": "h", "KUBERNETES_SERVICE_PORT": "443"}
    with pytest.raises(CredentialsError, match="cannot form an HTTP header") as operator:
        credentials.load(environ=pod)
    assert "MARKER" not in str(shard.value) + str(operator.value)


def test_the_probe_calls_it_an_invalid_kubeconfig_not_an_unreachable_shard() -> None:
    probe = probe_shard(ProbeTarget(kubeconfig(BAD_TOKENS["CR/LF and a header"]), "root"))
    assert probe.failure is not None
    assert probe.failure.reason == INVALID_KUBECONFIG
    assert "MARKER" not in probe.failure.message


def test_an_error_that_is_not_a_socket_error_is_named_by_its_type_only() -> None:
    quoting = ValueError("Invalid header value b'Bearer MARKER-tok\\r\\n'")
    assert no_answer_reason(quoting) == "ValueError"
    assert no_answer_reason(ConnectionRefusedError(111, "refused")) == (
        "ConnectionRefusedError: [Errno 111] refused"
    )


ADMIN: dict[str, Any] = {"adminKubeconfigSecretRef": {"name": "admin"}}


def admin_secret(raw: bytes) -> JSON:
    return secret("admin", kubeconfig=base64.b64encode(raw).decode())


@pytest.mark.parametrize("token", BAD_TOKENS.values(), ids=BAD_TOKENS.keys())
def test_a_pass_with_such_a_token_writes_its_status_and_one_log_line(
    token: str, caplog: pytest.LogCaptureFixture
) -> None:
    kube = FakeKube(
        rolled_out(shard_object()),
        non_root_object(**ADMIN),
        *SECRETS,
        admin_secret(kubeconfig(token)),
    )
    effects = Effects()
    ctx = context(kube, effects)
    ctx.clean = clean_shard
    ctx.probe = probe_shard
    with caplog.at_level(logging.INFO):
        settle(ctx, kube, "shard-1")
    assert condition(kube, "shard-1", "Ready") == ("True", "RolledOut")
    assert status(kube, "shard-1")["readyReplicas"] == 1
    cleaned = conditions(kube, "shard-1")["IdentityCacheCleaned"]
    assert (cleaned["status"], cleaned["reason"]) == ("False", "Failed")
    assert cleaned["message"].startswith(
        "kubeconfig in key 'kubeconfig' of Secret 'admin': unusable kubeconfig: "
    )
    assert condition(kube, "shard-1", "DataVerified") == ("Unknown", INVALID_KUBECONFIG)
    assert condition(kube, "shard-1", "Degraded") == ("True", INVALID_KUBECONFIG)
    assert status(kube, "shard-1")["phase"] == "Degraded"
    lines = [r for r in caplog.records if "identity-cache" in r.getMessage()]
    # One info line: kopf would post a warning as an Event as well.
    assert [r.levelno for r in lines] == [logging.INFO]
    assert "Secret 'admin'" in lines[0].getMessage()
    assert "\n" not in lines[0].getMessage()
    assert all(record.exc_info is None for record in caplog.records)
    for shown in (str(status(kube, "shard-1")), str(effects.events), caplog.text):
        assert "MARKER" not in shown


def test_a_failing_cleanup_never_stops_the_status_write(caplog: pytest.LogCaptureFixture) -> None:
    kube = FakeKube(
        rolled_out(shard_object()),
        non_root_object(**ADMIN),
        *SECRETS,
        admin_secret(kubeconfig("tok")),
    )
    ctx = context(kube)

    def broken(raw: bytes) -> Outcome:
        raise RuntimeError("MARKER-tok in the text")

    ctx.clean = broken
    settle(ctx, kube, "shard-1")
    assert condition(kube, "shard-1", "IdentityCacheCleaned") == ("False", "Failed")
    assert condition(kube, "shard-1", "Ready") == ("True", "RolledOut")
    assert "RuntimeError" in conditions(kube, "shard-1")["IdentityCacheCleaned"]["message"]
    assert "MARKER" not in str(status(kube, "shard-1")) + caplog.text
