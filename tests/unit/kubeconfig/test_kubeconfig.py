"""Kubeconfig: the spec's refusals, the CRD, and passes over one against a fake API server
and a recording stand-in for kcp (the real kcp answers in tests/kind/test_user_access.py)."""

from __future__ import annotations

import base64
import copy
import datetime
import json
import logging
from dataclasses import dataclass, field
from typing import Any

import pytest
from cryptography import x509
from cryptography.x509.oid import NameOID

from kcp_shard_operator.controller.context import Context
from kcp_shard_operator.controller.frontproxy import reconcile_front_proxy
from kcp_shard_operator.controller.kubeconfig import reconcile_kubeconfig, release
from kcp_shard_operator.core.api.model import JSON, SpecError
from kcp_shard_operator.core.installation.crds import kubeconfig_crd
from kcp_shard_operator.core.kubeconfig.access import (
    Problem,
    Target,
    bindings,
    stale,
    workspace_lookup,
    workspace_problem,
)
from kcp_shard_operator.core.kubeconfig.spec import parse_kubeconfig
from kcp_shard_operator.useraccess.workspace import Bound
from tests.conftest import shard_object
from tests.fake_kube import Effects, FakeKube, context, rolled_out, run, watched

LOGGER = logging.getLogger("test")
PROXY_URL = "https://kcp-front-proxy.ns.svc:6443"


def kubeconfig_object(name: str = "alice", **spec: Any) -> JSON:
    base: JSON = {
        "username": "alice",
        "groups": ["team-a"],
        "target": {"frontProxyRef": {"name": "kcp"}},
        "workspace": "root:team-a",
        "clusterRoles": ["cluster-admin"],
    }
    base.update(spec)
    return {
        "apiVersion": "kcpshard.dev/v1alpha1",
        "kind": "Kubeconfig",
        "metadata": {"name": name, "namespace": "ns", "uid": f"uid-{name}", "generation": 1},
        "spec": base,
    }


@pytest.mark.parametrize(
    ("spec", "where", "words"),
    [
        ({"target": {}}, "spec.target", "exactly one of frontProxyRef and shardRef"),
        (
            {"target": {"frontProxyRef": {"name": "kcp"}, "shardRef": {"name": "root"}}},
            "spec.target",
            "exactly one",
        ),
        ({"groups": ["team-a", "system:masters"]}, "spec.groups", "allowSystemMasters"),
        ({"workspace": "team-a"}, "spec.workspace", "does not match"),
        ({"validity": "1m"}, "spec.validity", "at least 2m"),
        ({"validity": "1h", "renewBefore": "1h"}, "spec.renewBefore", "shorter than"),
        ({"clusterRoles": ["a/b"]}, "spec.clusterRoles[0]", "not a ClusterRole name"),
        ({"secretName": "Alice"}, "spec.secretName", "not a Secret name"),
    ],
)
def test_bad_specs_are_refused_naming_the_field(spec: JSON, where: str, words: str) -> None:
    with pytest.raises(SpecError) as err:
        parse_kubeconfig(kubeconfig_object(**spec))
    assert err.value.path == where
    assert words in str(err.value)


def test_system_masters_is_taken_when_explicitly_allowed() -> None:
    obj = kubeconfig_object(groups=["system:masters"], allowSystemMasters=True)
    assert parse_kubeconfig(obj).spec.groups == ["system:masters"]


def test_the_crd_shows_the_user_the_workspace_and_the_expiry() -> None:
    crd = kubeconfig_crd()
    version = crd["spec"]["versions"][0]
    columns = [column["name"] for column in version["additionalPrinterColumns"]]
    assert columns == ["User", "Workspace", "Secret", "Expires", "Ready", "Phase", "Age"]
    spec = version["schema"]["openAPIV3Schema"]["properties"]["spec"]
    assert spec["required"] == ["username", "target"]
    rules = [rule["rule"] for rule in spec["x-kubernetes-validations"]]
    assert "duration(self.renewBefore) < duration(self.validity)" in rules


@dataclass
class FakeWorkspaces:
    """kcp as a pass sees it through a target: workspaces that exist, bindings made."""

    existing: set[str] = field(default_factory=lambda: {"root", "root:team-a"})
    made: dict[tuple[str, str], JSON] = field(default_factory=dict)
    asked: list[tuple[bytes, Target]] = field(default_factory=list)

    def __call__(self, admin: bytes, to: Target) -> FakeWorkspaces:
        self.asked.append((admin, to))
        return self

    def check(self, path: str) -> Problem | None:
        if path in self.existing:
            return None
        return workspace_problem(path, 404, {"message": "not found"})

    def bind(self, kubeconfig: Any, recorded: list[JSON]) -> Bound:
        done = self.unbind(kubeconfig, stale(kubeconfig, recorded))
        for binding in bindings(kubeconfig):
            name = binding["metadata"]["name"]
            self.made[(kubeconfig.spec.workspace, name)] = binding
            done.made.append(
                {
                    "workspace": kubeconfig.spec.workspace,
                    "name": name,
                    "clusterRole": binding["roleRef"]["name"],
                }
            )
        return done

    def unbind(self, kubeconfig: Any, entries: list[JSON]) -> Bound:
        for entry in entries:
            self.made.pop((entry["workspace"], entry["name"]), None)
        return Bound()


def installation(**kubeconfig: Any) -> tuple[FakeKube, Effects, Context, FakeWorkspaces]:
    """A rolled-out root shard and its FrontProxy, issued; a Kubeconfig before its first pass."""
    proxy = {
        "apiVersion": "kcpshard.dev/v1alpha1",
        "kind": "FrontProxy",
        "metadata": {"name": "kcp", "namespace": "ns", "uid": "uid-kcp", "generation": 1},
        "spec": {"version": "0.34.0", "rootShardRef": {"name": "root"}},
    }
    kube = FakeKube(rolled_out(shard_object()), proxy, kubeconfig_object(**kubeconfig))
    effects = Effects()
    ctx = context(kube, effects)
    run(ctx, "root")
    watched(ctx, kube.roll_out("ns", "root-kcp"))
    run(ctx, "root")
    reconcile_front_proxy(ctx, "ns", "kcp", LOGGER)
    fake = FakeWorkspaces()
    ctx.workspaces = fake
    effects.events.clear()
    return kube, effects, ctx, fake


def pass_over(ctx: Context, name: str = "alice") -> JSON:
    reconcile_kubeconfig(ctx, "ns", name, LOGGER)
    found = ctx.kube.get("kcpshard.dev/v1alpha1", "Kubeconfig", "ns", name)
    assert found is not None
    status: JSON = found["status"]
    return status


def respec(ctx: Context, kube: FakeKube, name: str = "alice", **spec: Any) -> None:
    obj = copy.deepcopy(kube.objects[("Kubeconfig", "ns", name)])
    obj["spec"].update(spec)
    obj["metadata"]["generation"] += 1
    watched(ctx, kube.put(obj))


def condition(status: JSON, type_: str) -> tuple[str, str, str]:
    found = next(c for c in status["conditions"] if c["type"] == type_)
    return found["status"], found["reason"], found["message"]


def issued(kube: FakeKube, secret: str = "alice-kubeconfig") -> tuple[JSON, x509.Certificate]:
    data = kube.objects[("Secret", "ns", secret)]["data"]["kubeconfig"]
    config = json.loads(base64.b64decode(data))
    pem = base64.b64decode(config["users"][0]["user"]["client-certificate-data"])
    return config, x509.load_pem_x509_certificate(pem)


def ca_subject(kube: FakeKube) -> x509.Name:
    pem = base64.b64decode(kube.objects[("Secret", "ns", "root-kcp-ca")]["data"]["tls.crt"])
    return x509.load_pem_x509_certificate(pem).subject


def test_a_users_kubeconfig_is_signed_for_the_workspace_and_its_role_bound() -> None:
    kube, effects, ctx, fake = installation(groups=["team-a", "team-b"])
    status = pass_over(ctx)
    config, cert = issued(kube)
    assert config["current-context"] == "root:team-a"
    assert config["clusters"][0]["cluster"]["server"] == f"{PROXY_URL}/clusters/root:team-a"
    assert cert.subject.get_attributes_for_oid(NameOID.COMMON_NAME)[0].value == "alice"
    groups = cert.subject.get_attributes_for_oid(NameOID.ORGANIZATION_NAME)
    assert [group.value for group in groups] == ["team-a", "team-b"]
    assert cert.issuer == ca_subject(kube), "the CA the front-proxy trusts for client certs"
    lifetime = cert.not_valid_after_utc - cert.not_valid_before_utc
    assert datetime.timedelta(hours=8760) < lifetime <= datetime.timedelta(hours=8761)
    assert status["secret"] == "alice-kubeconfig"
    assert status["notAfter"] == cert.not_valid_after_utc.strftime("%Y-%m-%dT%H:%M:%SZ")
    assert status["bindings"] == [
        {
            "workspace": "root:team-a",
            "name": "kcpshard.dev:ns:alice:cluster-admin",
            "clusterRole": "cluster-admin",
        }
    ]
    binding = fake.made[("root:team-a", "kcpshard.dev:ns:alice:cluster-admin")]
    assert binding["subjects"] == [
        {"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": "alice"}
    ]
    assert binding["metadata"]["labels"]["kcpshard.dev/kubeconfig"] == "uid-alice"
    assert fake.asked[0][1].operator_url == PROXY_URL
    admin = kube.secret_value("ns", "kcp-front-proxy-admin-kubeconfig", "kubeconfig")
    assert fake.asked[0][0] == admin, "kcp is asked with the front-proxy's admin kubeconfig"
    assert (status["phase"], condition(status, "Ready")[:2]) == ("Ready", ("True", "Ready"))
    assert all(c["observedGeneration"] == 1 for c in status["conditions"])
    reasons = [event.reason for _, event in effects.events]
    assert reasons[:2] == ["CertificateIssued", "BindingMade"]
    secret_meta = kube.objects[("Secret", "ns", "alice-kubeconfig")]["metadata"]
    assert secret_meta["ownerReferences"][0]["kind"] == "Kubeconfig"

    kube.calls.clear()
    pass_over(ctx)
    assert kube.writes == [], "a settled Kubeconfig is written nothing"


def test_shortening_the_validity_renews_at_once_and_expiry_renews_again() -> None:
    kube, effects, ctx, _ = installation(validity="4m", renewBefore="1m")
    first = pass_over(ctx)["notAfter"]
    respec(ctx, kube, validity="2m")
    effects.events.clear()
    second = pass_over(ctx)["notAfter"]
    assert second < first
    (event,) = [event for _, event in effects.events if event.reason == "CertificateRenewed"]
    assert "the lifetime the spec asks for is now shorter" in event.message
    effects.events.clear()
    later = ctx.wall_clock() + datetime.timedelta(seconds=70)
    ctx.wall_clock = lambda: later
    third = pass_over(ctx)["notAfter"]
    assert third > second
    assert [event.reason for _, event in effects.events] == ["CertificateRenewed"]


@pytest.mark.parametrize(
    ("spec", "reason", "words"),
    [
        (
            {"target": {"frontProxyRef": {"name": "nope"}}},
            "TargetNotFound",
            "spec.target.frontProxyRef: FrontProxy nope not found",
        ),
        (
            {"target": {"shardRef": {"name": "nope"}}},
            "TargetNotFound",
            "spec.target.shardRef: Shard nope not found",
        ),
        (
            {"workspace": "root:team-b"},
            "WorkspaceNotFound",
            "spec.workspace: workspace root:team-b does not exist",
        ),
    ],
)
def test_what_cannot_be_reached_is_a_condition_and_nothing_is_issued(
    spec: JSON, reason: str, words: str
) -> None:
    kube, _, ctx, fake = installation(**spec)
    status = pass_over(ctx)
    assert ("Secret", "ns", "alice-kubeconfig") not in kube.objects
    assert condition(status, "Issued") == ("False", reason, words)
    assert condition(status, "Degraded")[:2] == ("True", reason)
    assert status["phase"] == "Degraded"
    assert fake.made == {}


def test_a_secret_the_operator_did_not_make_is_never_written_over() -> None:
    kube, _, ctx, _ = installation()
    mine = {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": "alice-kubeconfig", "namespace": "ns"},
        "data": {"kubeconfig": "bWluZQ=="},
    }
    watched(ctx, kube.put(mine))
    status = pass_over(ctx)
    assert kube.objects[("Secret", "ns", "alice-kubeconfig")]["data"] == {"kubeconfig": "bWluZQ=="}
    state, reason, message = condition(status, "Issued")
    assert (state, reason) == ("False", "CertificateConflict")
    assert message.startswith("spec.secretName: Secret alice-kubeconfig exists")


def test_a_dropped_role_is_unbound_and_deletion_releases_the_rest() -> None:
    kube, effects, ctx, fake = installation(clusterRoles=["cluster-admin", "view"])
    pass_over(ctx)
    assert len(fake.made) == 2
    respec(ctx, kube, clusterRoles=["view"])
    effects.events.clear()
    status = pass_over(ctx)
    assert [b["clusterRole"] for b in status["bindings"]] == ["view"]
    assert list(fake.made) == [("root:team-a", "kcpshard.dev:ns:alice:view")]
    assert [event.message for _, event in effects.events] == [
        "removed ClusterRoleBinding kcpshard.dev:ns:alice:cluster-admin in root:team-a"
    ]
    gone = kube.objects[("Kubeconfig", "ns", "alice")]
    assert release(ctx, gone, LOGGER) == []
    assert fake.made == {}


def test_a_shard_target_points_at_the_shard_and_is_asked_with_its_admin_kubeconfig() -> None:
    kube, _, ctx, fake = installation(
        target={"shardRef": {"name": "root"}},
        groups=["system:masters"],
        allowSystemMasters=True,
        workspace="root",
    )
    status = pass_over(ctx)
    config, _ = issued(kube)
    assert (
        config["clusters"][0]["cluster"]["server"] == "https://root-kcp.ns.svc:6443/clusters/root"
    )
    assert fake.asked[0][0] == kube.secret_value("ns", "root-kcp-admin-kubeconfig", "kubeconfig")
    assert condition(status, "Ready")[0] == "True"


def test_without_kcp_checks_it_is_issued_and_the_bindings_are_not_verified() -> None:
    kube, _, ctx, fake = installation()
    ctx.settings.kcp_checks = False
    status = pass_over(ctx)
    assert ("Secret", "ns", "alice-kubeconfig") in kube.objects
    assert condition(status, "Bound")[:2] == ("Unknown", "NotVerified")
    assert condition(status, "Ready")[0] == "True"
    assert fake.asked == []


def test_what_kcp_answers_about_a_workspace_means() -> None:
    kubeconfig = parse_kubeconfig(kubeconfig_object(workspace="root:org:team"))
    to = Target("FrontProxy", "kcp", None, PROXY_URL, PROXY_URL, "admin")  # type: ignore[arg-type]
    assert workspace_lookup(to, "root") is None
    assert workspace_lookup(to, kubeconfig.spec.workspace) == (
        f"{PROXY_URL}/clusters/root:org/apis/tenancy.kcp.io/v1alpha1/workspaces/team"
    )
    ready = {"status": {"phase": "Ready"}}
    assert workspace_problem("root:a", 200, ready) is None
    assert workspace_problem("root:a", 200, {"status": {"phase": "Initializing"}}) == Problem(
        "spec.workspace", "WorkspaceNotReady", "workspace root:a is Initializing"
    )
    forbidden = workspace_problem("root:a", 403, {"message": "denied"})
    assert forbidden is not None
    assert forbidden.reason == "WorkspaceNotChecked"
    recorded = [
        {"workspace": "root:org:team", "name": "kcpshard.dev:ns:alice:cluster-admin"},
        {"workspace": "root:old", "name": "kcpshard.dev:ns:alice:cluster-admin"},
    ]
    assert stale(kubeconfig, recorded) == recorded[1:]
