"""spec.audit: the default policy the operator renders, the user's policy, where the log goes
(stdout or a rotated file on a volume), what extra arguments may not set, and a pass that
writes the policy's ConfigMap."""

from __future__ import annotations

import logging
from typing import Any

import pytest
import yaml

from kcp_shard_operator.controller.shard import reconcile
from kcp_shard_operator.core.api.model import JSON, SpecError
from kcp_shard_operator.core.kcp.audit import DEFAULT_POLICY
from kcp_shard_operator.core.shard.render import Rendered, render_shard
from tests.conftest import RELEASE, make, shard_object
from tests.fake_kube import FakeKube, context

VERSIONS = ("0.27.1", "0.28.0", "0.28.1", "0.30.0", "0.34.0")


def rendered(version: str = "0.34.0", **audit: Any) -> Rendered:
    return render_shard(make(shard_object(version=version, audit=audit)), None, RELEASE)


def pod_of(out: Rendered) -> JSON:
    pod: JSON = out.deployment["spec"]["template"]["spec"]
    return pod


def audit_args(out: Rendered) -> list[str]:
    args = pod_of(out)["containers"][0]["args"]
    return [arg for arg in args if arg.startswith("--audit-")]


@pytest.mark.parametrize("version", VERSIONS)
def test_the_default_policy_logs_to_stdout_on_every_kcp_version(version: str) -> None:
    out = rendered(version)
    assert audit_args(out) == [
        "--audit-policy-file=/etc/kcp/audit/policy.yaml",
        "--audit-log-path=-",
    ]
    assert out.audit_policy is not None
    assert out.audit_policy["metadata"]["name"] == "root-kcp-audit-policy"
    assert out.audit_policy["metadata"]["ownerReferences"][0]["kind"] == "Shard"
    assert yaml.safe_load(out.audit_policy["data"]["policy.yaml"]) == DEFAULT_POLICY
    volume = next(v for v in pod_of(out)["volumes"] if v["name"] == "audit-policy")
    assert volume["configMap"]["name"] == "root-kcp-audit-policy"
    assert out.objects.index(out.audit_policy) < out.objects.index(out.deployment)


def test_the_default_policy_records_writes_without_bodies_and_no_reads() -> None:
    rules = DEFAULT_POLICY["rules"]
    assert rules[-1] == {"level": "Metadata"}, "every write not excluded: who, what, when"
    assert {"level": "None", "verbs": ["get", "list", "watch"]} in rules
    assert all(rule["level"] in ("None", "Metadata") for rule in rules), "no request bodies"


def test_the_users_policy_is_mounted_and_nothing_is_rendered_for_it() -> None:
    out = rendered(policyConfigMapRef={"name": "mine", "key": "audit.yaml"})
    assert out.audit_policy is None
    volume = next(v for v in pod_of(out)["volumes"] if v["name"] == "audit-policy")
    assert volume["configMap"]["name"] == "mine"
    assert volume["configMap"]["items"] == [{"key": "audit.yaml", "path": "policy.yaml"}]


def test_a_log_file_is_rotated_on_its_volume() -> None:
    out = rendered(logFile={"maxAgeDays": 3, "maxBackups": 2, "maxSizeMB": 50, "compress": True})
    assert audit_args(out)[1:] == [
        "--audit-log-path=/var/log/kcp-audit/audit.log",
        "--audit-log-maxage=3",
        "--audit-log-maxbackup=2",
        "--audit-log-maxsize=50",
        "--audit-log-compress",
    ]
    volume = next(v for v in pod_of(out)["volumes"] if v["name"] == "audit-log")
    assert volume["emptyDir"] == {"sizeLimit": "1Gi"}
    mount = next(
        m for m in pod_of(out)["containers"][0]["volumeMounts"] if m["name"] == "audit-log"
    )
    assert mount["mountPath"] == "/var/log/kcp-audit"
    on_claim = rendered(logFile={"claimName": "audit-log"})
    volume = next(v for v in pod_of(on_claim)["volumes"] if v["name"] == "audit-log")
    assert volume == {"name": "audit-log", "persistentVolumeClaim": {"claimName": "audit-log"}}


def test_without_audit_nothing_is_audited() -> None:
    out = render_shard(make(shard_object()), None, RELEASE)
    assert out.audit_policy is None
    assert audit_args(out) == []


def test_extra_args_may_not_set_what_spec_audit_sets() -> None:
    shard = make(shard_object(audit={}, extraArgs=["--audit-log-path=/tmp/x"]))
    with pytest.raises(SpecError, match=r"spec\.audit"):
        render_shard(shard, None, RELEASE)


def test_a_bad_size_limit_names_the_field() -> None:
    with pytest.raises(SpecError) as err:
        make(shard_object(audit={"logFile": {"sizeLimit": "lots"}}))
    assert err.value.path == "spec.audit.logFile.sizeLimit"


def test_a_pass_writes_the_policy_before_the_pods_that_read_it() -> None:
    kube = FakeKube(shard_object(audit={}))
    ctx = context(kube)
    reconcile(ctx, "ns", "root", logging.getLogger("test"))
    applied = [(op, kind) for op, kind, _ in kube.writes if op == "apply"]
    assert applied.index(("apply", "ConfigMap")) < applied.index(("apply", "Deployment"))
    policy = kube.objects[("ConfigMap", "ns", "root-kcp-audit-policy")]
    assert yaml.safe_load(policy["data"]["policy.yaml"]) == DEFAULT_POLICY
    kube.calls.clear()
    reconcile(ctx, "ns", "root", logging.getLogger("test"))
    assert ("apply", "ConfigMap", "root-kcp-audit-policy") not in kube.writes
