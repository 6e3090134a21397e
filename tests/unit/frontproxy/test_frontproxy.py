"""FrontProxy: its spec, what it renders and issues, what it waits for, its passes, and the
Shards behind it."""

from __future__ import annotations

import base64
import copy
import json
import logging
from pathlib import Path
from typing import Any

import pytest
import yaml
from cryptography import x509
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from kcp_shard_operator.cli.crd import crd_yaml
from kcp_shard_operator.cli.main import main
from kcp_shard_operator.controller.frontproxy import reconcile_front_proxy
from kcp_shard_operator.core.api.meta import VERSION_ANNOTATION
from kcp_shard_operator.core.api.model import JSON, SpecError
from kcp_shard_operator.core.api.refs import CASecretKeyRef, SecretKeyRef
from kcp_shard_operator.core.frontproxy import pki as frontproxypki
from kcp_shard_operator.core.frontproxy.names import serving
from kcp_shard_operator.core.frontproxy.plan import plan_front_proxy
from kcp_shard_operator.core.frontproxy.render import render_front_proxy
from kcp_shard_operator.core.frontproxy.spec import FrontProxy, parse_front_proxy
from kcp_shard_operator.core.frontproxy.status import Route, interpret_route
from kcp_shard_operator.core.installation.steps import as_rolled_out, plan_upgrade
from kcp_shard_operator.core.kcp.versions import Version
from kcp_shard_operator.core.pki.issuance import Purpose
from kcp_shard_operator.core.shard import pki
from kcp_shard_operator.core.shard.plan import plan
from kcp_shard_operator.core.shard.render import render_shard
from kcp_shard_operator.core.shard.spec import Shard
from kcp_shard_operator.core.status.deployments import SETTLE_RETRY_SECONDS, SETTLE_SECONDS
from tests.conftest import RELEASE, make, non_root_object, shard_object
from tests.fake_kube import READY_STATUS, Effects, FakeKube, context, rolled_out, run, watched

LOGGER = logging.getLogger("test")
URL = "https://kcp-front-proxy.ns.svc:6443"


def proxy_object(name: str = "kcp", **spec: Any) -> JSON:
    base: JSON = {"version": "0.34.0", "rootShardRef": {"name": "root"}}
    base.update(spec)
    return {
        "apiVersion": "kcpshard.dev/v1alpha1",
        "kind": "FrontProxy",
        "metadata": {"name": name, "namespace": "ns", "uid": f"uid-{name}", "generation": 1},
        "spec": base,
    }


def proxy(**spec: Any) -> FrontProxy:
    return parse_front_proxy(proxy_object(**spec))


def ready(obj: JSON, version: str | None = None) -> JSON:
    """``obj`` rolled out (at ``version``, default its spec's) and Ready."""
    return {**obj, "status": {"version": version or obj["spec"]["version"], **READY_STATUS}}


def args_of(deployment: JSON) -> list[str]:
    return list(deployment["spec"]["template"]["spec"]["containers"][0]["args"])


def secrets_of(deployment: JSON) -> set[str]:
    volumes = deployment["spec"]["template"]["spec"]["volumes"]
    return {v["secret"]["secretName"] for v in volumes if "secret" in v}


@pytest.mark.parametrize(
    ("spec", "name", "message"),
    [
        ({"pki": {"issue": False}}, "kcp", "spec.pki.issue false needs spec.kubeconfigSecretRef"),
        ({}, "x" * 52, "at most 51 characters"),
        ({"externalURL": "http://kcp.example.com"}, "kcp", "spec.externalURL"),
        ({"version": "0.34.0+dev"}, "kcp", "needs spec.image.tag"),
        ({"version": "0.26.0"}, "kcp", "older than the oldest supported"),
        ({"replicas": 11}, "kcp", "at most 10"),
        ({"serviceType": "Ingress"}, "kcp", "must be one of ClusterIP, NodePort, LoadBalancer"),
        ({"rootShardRef": None}, "kcp", r"spec\.rootShardRef: is required"),
        ({"extraArgs": ["-" * 1025]}, "kcp", "at most 1024"),
    ],
)
def test_bad_specs_are_refused_in_one_line(spec: JSON, name: str, message: str) -> None:
    with pytest.raises(SpecError, match=message) as err:
        parse_front_proxy(proxy_object(name, **spec))
    assert "\n" not in str(err.value)


def test_the_crd_carries_the_rules_the_columns_and_an_immutable_root() -> None:
    crds = {doc["spec"]["names"]["kind"]: doc for doc in yaml.safe_load_all(crd_yaml())}
    crd = crds["FrontProxy"]
    assert crd["metadata"]["name"] == "frontproxies.kcpshard.dev"
    version = crd["spec"]["versions"][0]
    spec = version["schema"]["openAPIV3Schema"]["properties"]["spec"]
    rules = [r["rule"] for r in spec["x-kubernetes-validations"]]
    assert "self.rootShardRef.name == oldSelf.rootShardRef.name" in rules
    assert spec["required"] == ["version", "rootShardRef"]
    assert spec["properties"]["replicas"]["default"] == 2
    assert [c["name"] for c in version["additionalPrinterColumns"]] == [
        "Root",
        "Desired",
        "Running",
        "Ready",
        "Routing",
        "Phase",
        "URL",
        "Age",
    ]


def test_a_front_proxy_renders_two_surging_replicas_a_budget_and_its_mapping() -> None:
    rendered = render_front_proxy(proxy(), make(shard_object()), RELEASE, {})
    assert [o["kind"] for o in rendered.objects] == [
        "Service",
        "ConfigMap",
        "Deployment",
        "PodDisruptionBudget",
    ]
    deployment = rendered.deployment
    assert deployment["metadata"]["name"] == "kcp-front-proxy"
    assert deployment["spec"]["replicas"] == 2
    assert deployment["spec"]["strategy"] == {
        "type": "RollingUpdate",
        "rollingUpdate": {"maxUnavailable": 0, "maxSurge": 1},
    }
    pod = deployment["spec"]["template"]["spec"]
    container = pod["containers"][0]
    assert container["command"] == ["/kcp-front-proxy"]
    assert container["image"] == "ghcr.io/kcp-dev/kcp:v0.34.0"
    assert container["securityContext"]["readOnlyRootFilesystem"] is True
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert container["readinessProbe"]["httpGet"]["path"] == "/readyz"
    args = args_of(deployment)
    assert "--mapping-file=/etc/kcp-front-proxy/mapping/mapping.yaml" in args
    assert "--root-kubeconfig=/etc/kcp-front-proxy/kubeconfig/kubeconfig" in args
    assert "--shards-kubeconfig=/etc/kcp-front-proxy/kubeconfig/kubeconfig" in args
    assert "--client-ca-file=/etc/kcp-front-proxy/client-ca/ca.crt" in args
    assert secrets_of(deployment) == {
        "kcp-front-proxy-serving",
        "kcp-front-proxy-requestheader",
        "kcp-front-proxy-kubeconfig",
        "root-kcp-client-ca",
    }
    mapping = yaml.safe_load(rendered.config_map["data"]["mapping.yaml"])
    assert [(m["path"], m["backend"]) for m in mapping] == [
        ("/clusters/", "https://root-kcp.ns.svc:6443"),
        ("/services/", "https://root-kcp.ns.svc:6443"),
    ]
    assert mapping[0]["proxy_client_cert"] == "/etc/kcp-front-proxy/requestheader/tls.crt"
    assert mapping[0]["backend_server_ca"] == "/etc/kcp-front-proxy/shards-ca/ca.crt"
    assert rendered.pdb is not None
    assert rendered.pdb["spec"]["maxUnavailable"] == 1
    assert render_front_proxy(proxy(replicas=1), make(shard_object()), RELEASE).pdb is None
    owners = rendered.config_map["metadata"]["ownerReferences"]
    assert [(o["kind"], o["name"]) for o in owners] == [("FrontProxy", "kcp")]


def test_a_new_mapping_or_a_rotated_secret_rolls_the_pods() -> None:
    template = render_front_proxy(proxy(), make(shard_object()), RELEASE, {})
    moved = make(shard_object(baseURL="https://root.internal:6443"))
    for changed in (
        render_front_proxy(proxy(), moved, RELEASE, {}),
        render_front_proxy(
            proxy(), make(shard_object()), RELEASE, {"kcp-front-proxy-serving": "9"}
        ),
    ):
        assert changed.deployment["spec"]["template"] != template.deployment["spec"]["template"]


@pytest.mark.parametrize(
    ("version", "release", "peer"),
    [
        ("0.33.0", "0.34.0", False),
        ("0.34.0-rc.1", "0.34.0", True),
        ("0.34.0", "0.34.0", True),
        ("0.28.0", "0.28.0", True),
        ("0.28.0", "0.34.0", False),
    ],
)
def test_the_shard_peer_kubeconfig_comes_with_the_deprecating_release(
    version: str, release: str, peer: bool
) -> None:
    rendered = render_front_proxy(
        proxy(version=version), make(shard_object()), Version.parse(release)
    )
    args = args_of(rendered.deployment)
    assert ("--shard-peer-kubeconfig=/etc/kcp-front-proxy/kubeconfig/kubeconfig" in args) is peer
    assert "--root-kubeconfig=/etc/kcp-front-proxy/kubeconfig/kubeconfig" in args


def test_extra_args_never_override_a_rendered_flag() -> None:
    with pytest.raises(SpecError) as err:
        render_front_proxy(
            proxy(extraArgs=["--client_ca_file=/x", "--v=4", "--secure-port=1"]),
            make(shard_object()),
            RELEASE,
        )
    assert str(err.value) == (
        "spec.extraArgs: [0] --client-ca-file: the operator renders it from "
        "spec.tls.clientCASecretRef; set it there instead; [2] --secure-port: the operator "
        "sets this flag; remove it"
    )
    rendered = render_front_proxy(proxy(extraArgs=["--v=4"]), make(shard_object()), RELEASE)
    assert args_of(rendered.deployment)[-1] == "--v=4"


def test_with_issue_false_the_front_proxy_mounts_the_users_secrets_and_gets_nothing() -> None:
    own = proxy(
        pki={"issue": False},
        kubeconfigSecretRef={"name": "mine", "key": "config"},
        tls={
            "servingCertSecretRef": {"name": "serving"},
            "clientCASecretRef": {"name": "users-ca"},
            "requestHeaderClientCertSecretRef": {"name": "forwarding"},
            "shardsCASecretRef": {"name": "shards-ca", "key": "bundle.pem"},
        },
    )
    root = make(shard_object())
    deployment = render_front_proxy(own, root, RELEASE).deployment
    assert secrets_of(deployment) == {"serving", "users-ca", "forwarding", "shards-ca", "mine"}
    assert frontproxypki.requests(own, root) == frontproxypki.ProxyRequests()


def test_the_pki_is_signed_by_the_installations_ca_and_its_requestheader_ca() -> None:
    root = make(shard_object())
    found = frontproxypki.requests(proxy(externalURL="https://kcp.example.com"), root)
    assert [(r.secret, r.purpose) for r in found.by_installation_ca] == [
        ("kcp-front-proxy-serving", Purpose.SERVING),
        ("kcp-front-proxy-kubeconfig", Purpose.KUBECONFIG),
        ("kcp-front-proxy-admin-kubeconfig", Purpose.KUBECONFIG),
    ]
    serving_request, kubeconfig, admin = found.by_installation_ca
    assert {"kcp.example.com", "kcp-front-proxy.ns.svc", "localhost"} <= set(
        serving_request.dns_names
    )
    assert (kubeconfig.organization, kubeconfig.server) == (
        "system:masters",
        "https://root-kcp.ns.svc:6443",
    )
    assert (admin.common_name, admin.organization, admin.server) == (
        "kcp-admin",
        "system:kcp:admin",
        "https://kcp.example.com",
    )
    assert [(r.secret, r.purpose, r.owner.kind) for r in found.by_requestheader_ca] == [
        ("root-kcp-requestheader-ca", Purpose.CA, "Shard"),
        ("root-kcp-requestheader-client-ca", Purpose.CLIENT_CA, "Shard"),
        ("kcp-front-proxy-requestheader", Purpose.CLIENT, "FrontProxy"),
    ]
    users = make(shard_object(pki={"issue": False}))
    refused = frontproxypki.requests(proxy(), users)
    assert refused.by_installation_ca == []
    assert refused.by_requestheader_ca == []
    assert "the root Shard root sets spec.pki.issue false" in refused.not_issued[0]


def test_a_shard_behind_the_front_proxy_trusts_it_advertises_it_and_reaches_through_it() -> None:
    root = make(shard_object())
    shard = make(non_root_object())
    front = proxy()
    filled = pki.with_issued(shard, root, proxy=front)
    spec = filled.spec
    assert spec.tls.request_header_client_ca_secret_ref == CASecretKeyRef(
        "root-kcp-requestheader-client-ca"
    )
    assert spec.external_url == URL
    assert spec.external_logical_cluster_admin_kubeconfig_secret_ref == SecretKeyRef(
        "root-kcp-external-logical-cluster-admin-kubeconfig"
    )
    args = args_of(render_shard(filled, pki.with_issued(root, None), RELEASE).deployment)
    assert f"--shard-external-url={URL}" in args
    assert "--requestheader-client-ca-file=/etc/kcp/tls/requestheader-client-ca/ca.crt" in args
    assert "--requestheader-username-headers=X-Remote-User" in args
    assert (
        "--external-logical-cluster-admin-kubeconfig="
        "/etc/kcp/external-logical-cluster-admin/kubeconfig" in args
    )
    external = next(
        r
        for r in pki.requests(shard, root, RELEASE, proxy=front)
        if r.secret == "root-kcp-external-logical-cluster-admin-kubeconfig"
    )
    assert (external.organization, external.server) == (
        "system:kcp:external-logical-cluster-admin",
        URL,
    )
    assert [r.secret for r in pki.trust_requests(shard, root, front)] == [
        "root-kcp-requestheader-ca",
        "root-kcp-requestheader-client-ca",
    ]
    assert pki.trust_requests(shard, root, None) == []
    assert pki.with_issued(shard, root).spec.tls.request_header_client_ca_secret_ref is None


def test_what_a_shard_names_itself_is_kept_behind_the_front_proxy() -> None:
    root = make(shard_object())
    own = make(
        non_root_object(
            externalURL="https://shard-1.example.com",
            tls={"requestHeaderClientCASecretRef": {"name": "my-requestheader-ca"}},
        )
    )
    spec = pki.with_issued(own, root, proxy=proxy()).spec
    assert spec.external_url == "https://shard-1.example.com"
    assert spec.tls.request_header_client_ca_secret_ref == CASecretKeyRef("my-requestheader-ca")
    assert pki.trust_requests(own, root, proxy()) == []


def test_the_first_front_proxy_by_name_serves_an_installation() -> None:
    proxies = [proxy(), parse_front_proxy(proxy_object("a-proxy"))]
    other = parse_front_proxy(proxy_object("b", rootShardRef={"name": "other"}))
    assert serving([*proxies, other], "root") == proxies[1]
    assert serving([other], "root") is None


def installation(*shards: JSON) -> list[Shard]:
    return [make(obj) for obj in shards]


def test_the_front_proxy_starts_once_its_root_is_ready() -> None:
    root = make(shard_object())
    decision = plan_front_proxy(proxy(), root, [root], {}, RELEASE, {})
    assert (decision.waiting_reason, decision.waiting) == (
        "WaitingForRootShard",
        "root shard root is not Ready yet; the front-proxy starts once it is",
    )
    assert [o["kind"] for o in decision.apply] == ["Service", "ConfigMap"]
    ready_root = make(ready(shard_object()))
    decision = plan_front_proxy(proxy(), ready_root, [ready_root], {}, RELEASE, None)
    assert decision.waiting is None
    assert [o["kind"] for o in decision.apply] == [
        "Service",
        "ConfigMap",
        "Deployment",
        "PodDisruptionBudget",
    ]
    missing = plan_front_proxy(proxy(), ready_root, [ready_root], {}, RELEASE, {})
    assert "Deployment" not in [o["kind"] for o in missing.apply], "no certificate yet"
    assert missing.missing_secrets == [], "what the operator issues is not 'not found'"


def test_a_front_proxy_waiting_for_its_root_does_not_call_what_it_will_be_issued_missing() -> None:
    """The samples' first minutes: the FrontProxy comes with its root, whose CA does not exist
    until the root has rolled out. Its Secrets are not "not found": they are being issued."""
    kube = FakeKube(shard_object(), proxy_object())
    ctx = context(kube)
    run(ctx, "root")
    pass_over(ctx)
    status = proxy_status(kube)
    assert reason(status, "Degraded") == ("False", "AsExpected")
    assert reason(status, "Progressing")[1] == "WaitingForRootShard"
    theirs = proxy_object(
        pki={"issue": False},
        kubeconfigSecretRef={"name": "mine", "key": "config"},
        tls={
            "servingCertSecretRef": {"name": "gone"},
            "clientCASecretRef": {"name": "users-ca"},
            "requestHeaderClientCertSecretRef": {"name": "forwarding"},
            "shardsCASecretRef": {"name": "shards-ca", "key": "bundle.pem"},
        },
    )
    kube.put(theirs)
    watched(ctx, kube.objects[("FrontProxy", "ns", "kcp")])
    pass_over(ctx)
    degraded = next(c for c in proxy_status(kube)["conditions"] if c["type"] == "Degraded")
    assert degraded["reason"] == "SecretNotFound"
    assert "gone" in degraded["message"]


def test_a_front_proxy_naming_a_missing_root_says_so() -> None:
    decision = plan_front_proxy(proxy(), None, [], {}, RELEASE)
    assert decision.error_reason == "RootShardNotFound"
    assert decision.error == "root Shard 'root' (spec.rootShardRef) not found in ns"
    assert decision.apply == []


def running(version: str) -> JSON:
    """The front-proxy's Deployment as the operator rendered it at ``version``."""
    root = make(shard_object(version=version))
    return render_front_proxy(proxy(version=version), root, RELEASE).deployment


def test_the_front_proxy_rolls_only_once_every_shard_runs_its_version() -> None:
    root = make(ready(shard_object()))
    behind = make(ready(non_root_object(version="0.28.0")))
    live = running("0.28.0")
    observed = {"Deployment": live}
    decision = plan_front_proxy(proxy(replicas=3), root, [root, behind], observed, RELEASE)
    assert decision.waiting_reason == "WaitingForShards"
    assert decision.waiting == (
        "shard-1 runs kcp 0.28.0: the front-proxy rolls to kcp 0.34.0 once every shard of "
        "root runs kcp 0.34.0 or newer"
    )
    held = next(o for o in decision.apply if o["kind"] == "Deployment")
    assert held["spec"]["replicas"] == 3, "the rest of the spec applies while it waits"
    annotations = held["spec"]["template"]["metadata"]["annotations"]
    assert annotations[VERSION_ANNOTATION] == "0.28.0"
    caught_up = make(ready(non_root_object()))
    decision = plan_front_proxy(proxy(), root, [root, caught_up], observed, RELEASE)
    assert decision.waiting is None
    rolled = next(o for o in decision.apply if o["kind"] == "Deployment")
    assert rolled["spec"]["template"]["metadata"]["annotations"][VERSION_ANNOTATION] == "0.34.0"


def test_what_a_read_through_the_front_proxy_means() -> None:
    assert interpret_route(URL, 200, {"items": [{}, {}]}) == Route(
        True,
        "Routed",
        f"GET /clusters/root/apis/core.kcp.io/v1alpha1/shards through {URL}: 2 shard(s) listed",
    )
    assert interpret_route(URL, 403, {"message": "nope"}).reason == "Forbidden"
    failed = interpret_route(URL, 502, None)
    assert (failed.ok, failed.reason) == (False, "NotRouting")
    assert failed.message.endswith("answered 502: HTTP 502")


def pass_over(ctx: Any, name: str = "kcp") -> None:
    reconcile_front_proxy(ctx, "ns", name, LOGGER)


def proxy_status(kube: FakeKube, name: str = "kcp") -> JSON:
    found: JSON = kube.objects[("FrontProxy", "ns", name)].get("status") or {}
    return found


def reason(status: JSON, type_: str) -> tuple[str, str]:
    found = next(c for c in status["conditions"] if c["type"] == type_)
    return found["status"], found["reason"]


def certificate(kube: FakeKube, secret: str, key: str = "tls.crt") -> x509.Certificate:
    data = kube.objects[("Secret", "ns", secret)]["data"][key]
    return x509.load_pem_x509_certificate(base64.b64decode(data))


def kubeconfig_certificate(kube: FakeKube, secret: str) -> x509.Certificate:
    data = kube.objects[("Secret", "ns", secret)]["data"]["kubeconfig"]
    config = json.loads(base64.b64decode(data))
    pem = base64.b64decode(config["users"][0]["user"]["client-certificate-data"])
    return x509.load_pem_x509_certificate(pem)


def started() -> tuple[FakeKube, Effects, Any]:
    """A rolled-out root shard, and its FrontProxy before its first pass."""
    kube = FakeKube(rolled_out(shard_object()), proxy_object())
    effects = Effects()
    ctx = context(kube, effects)
    run(ctx, "root")
    watched(ctx, kube.roll_out("ns", "root-kcp"))
    run(ctx, "root")
    return kube, effects, ctx


def test_the_root_behind_a_front_proxy_issues_the_installations_trust_in_it() -> None:
    kube, _, _ = started()
    for secret in (
        "root-kcp-requestheader-ca",
        "root-kcp-requestheader-client-ca",
        "root-kcp-external-logical-cluster-admin-kubeconfig",
    ):
        assert ("Secret", "ns", secret) in kube.objects, secret
    args = args_of(kube.objects[("Deployment", "ns", "root-kcp")])
    assert f"--shard-external-url={URL}" in args
    bundle = certificate(kube, "root-kcp-requestheader-client-ca", "ca.crt")
    assert bundle == certificate(kube, "root-kcp-requestheader-ca")
    external = kubeconfig_certificate(kube, "root-kcp-external-logical-cluster-admin-kubeconfig")
    assert external.issuer == certificate(kube, "root-kcp-ca").subject


def test_a_new_front_proxy_is_issued_written_then_ready_once_a_read_through_it_works() -> None:
    kube, effects, ctx = started()
    kube.calls.clear()
    pass_over(ctx)
    assert kube.writes == [
        ("create", "Secret", "kcp-front-proxy-serving"),
        ("create", "Secret", "kcp-front-proxy-kubeconfig"),
        ("create", "Secret", "kcp-front-proxy-admin-kubeconfig"),
        ("create", "Secret", "kcp-front-proxy-requestheader"),
        ("apply", "Service", "kcp-front-proxy"),
        ("apply", "ConfigMap", "kcp-front-proxy-mapping"),
        ("apply", "Deployment", "kcp-front-proxy"),
        ("apply", "PodDisruptionBudget", "kcp-front-proxy"),
        ("status", "FrontProxy", "kcp"),
    ]
    status = proxy_status(kube)
    assert (status["phase"], status["url"], status["serviceURL"]) == ("Progressing", URL, URL)
    assert status["adminKubeconfigSecret"] == "kcp-front-proxy-admin-kubeconfig"
    assert reason(status, "Routing") == ("Unknown", "RollingOut")
    forwarding = certificate(kube, "kcp-front-proxy-requestheader")
    assert forwarding.issuer == certificate(kube, "root-kcp-requestheader-ca").subject
    usage = forwarding.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value
    assert list(usage) == [ExtendedKeyUsageOID.CLIENT_AUTH]
    admin = kubeconfig_certificate(kube, "kcp-front-proxy-admin-kubeconfig")
    organizations = admin.subject.get_attributes_for_oid(NameOID.ORGANIZATION_NAME)
    assert [o.value for o in organizations] == ["system:kcp:admin"]
    assert admin.issuer == certificate(kube, "root-kcp-ca").subject

    watched(ctx, kube.roll_out("ns", "kcp-front-proxy"))
    pass_over(ctx)
    status = proxy_status(kube)
    assert (status["phase"], status["version"]) == ("Ready", "0.34.0")
    assert reason(status, "Ready") == ("True", "RolledOut")
    assert reason(status, "Routing") == ("True", "Routed")
    assert [url for _, url in effects.routed] == [URL]
    assert all(c["observedGeneration"] == 1 for c in status["conditions"])
    count = "kcp_shard_operator_rollout_duration_seconds_count"
    assert ctx.metrics.registry.get_sample_value(count, {"role": "front-proxy"}) == 1
    kube.calls.clear()
    pass_over(ctx)
    assert kube.writes == [], "a settled front-proxy is written nothing"

    effects.route_answer = Route(False, "NotRouting", "answered 502")
    effects.now += 60
    pass_over(ctx)
    status = proxy_status(kube)
    assert reason(status, "Ready") == ("False", "NotRouting")
    assert reason(status, "Degraded") == ("True", "NotRouting")
    assert status["phase"] == "Degraded"


def test_a_front_proxy_added_later_rolls_the_shards_once_to_trust_it() -> None:
    kube = FakeKube(rolled_out(shard_object()))
    effects = Effects()
    ctx = context(kube, effects)
    run(ctx, "root")
    watched(ctx, kube.roll_out("ns", "root-kcp"))
    run(ctx, "root")
    before = args_of(kube.objects[("Deployment", "ns", "root-kcp")])
    assert not any(arg.startswith("--requestheader-client-ca-file") for arg in before)
    watched(ctx, kube.put(proxy_object()))
    run(ctx, "root")
    after = args_of(kube.objects[("Deployment", "ns", "root-kcp")])
    assert any(arg.startswith("--requestheader-client-ca-file") for arg in after)
    assert "Configured" in [e.reason for name, e in effects.events if name == "root"]


def test_an_invalid_front_proxy_is_degraded_and_gets_nothing() -> None:
    kube = FakeKube(proxy_object(version="0.1"))
    pass_over(context(kube))
    assert kube.writes == [("status", "FrontProxy", "kcp")]
    assert reason(proxy_status(kube), "Degraded") == ("True", "InvalidSpec")


def test_a_front_proxy_waits_for_its_shards_and_says_so_in_its_status() -> None:
    kube, effects, ctx = started()
    pass_over(ctx)
    watched(ctx, kube.roll_out("ns", "kcp-front-proxy"))
    obj = copy.deepcopy(kube.objects[("FrontProxy", "ns", "kcp")])
    obj["spec"]["version"] = "0.35.0"
    watched(ctx, kube.put(obj))
    pass_over(ctx)
    status = proxy_status(kube)
    assert status["phase"] == "WaitingForShards"
    assert reason(status, "Progressing") == ("False", "WaitingForShards")
    assert "WaitingForShards" in [e.reason for _, e in effects.events]
    template = kube.objects[("Deployment", "ns", "kcp-front-proxy")]["spec"]["template"]
    assert template["metadata"]["annotations"][VERSION_ANNOTATION] == "0.34.0"


def cache_server(ready_now: bool) -> JSON:
    obj: JSON = {
        "apiVersion": "kcpshard.dev/v1alpha1",
        "kind": "CacheServer",
        "metadata": {"name": "cache", "namespace": "ns", "uid": "uid-cache", "generation": 1},
        "spec": {"version": "0.34.0"},
    }
    return ready(obj) if ready_now else {**obj, "status": {"version": "0.34.0"}}


@pytest.mark.parametrize(("version", "held"), [("0.34.0", True), ("0.28.0", False)])
def test_a_shard_reading_identities_from_its_cache_is_not_restarted_while_it_is_down(
    version: str, held: bool
) -> None:
    on_cache: dict[str, Any] = {"cache": {"serverRef": {"name": "cache"}}}
    root = ready(shard_object(version=version, **on_cache))
    shard = rolled_out(non_root_object(version=version, **on_cache))
    kube = FakeKube(cache_server(True), root, shard, *_secrets())
    ctx = context(kube)
    run(ctx, "shard-1")
    watched(ctx, kube.roll_out("ns", "shard-1-kcp"))
    run(ctx, "shard-1")
    watched(ctx, kube.put(cache_server(False)))
    obj = copy.deepcopy(kube.objects[("Shard", "ns", "shard-1")])
    obj["spec"]["extraArgs"] = ["--v=4"]
    watched(ctx, kube.put(obj))
    kube.calls.clear()
    run(ctx, "shard-1")
    written = ("apply", "Deployment", "shard-1-kcp") in kube.writes
    assert written is not held
    progressing = reason(kube.objects[("Shard", "ns", "shard-1")]["status"], "Progressing")
    assert (progressing == ("False", "WaitingForCacheServer")) is held


def _secrets() -> list[JSON]:
    return [
        {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": n, "namespace": "ns"}}
        for n in ("root-admin",)
    ]


def test_render_prints_front_proxies_after_the_shards_and_reports_a_missing_root(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "all.yaml"
    docs = [proxy_object(), shard_object(), proxy_object("lost", rootShardRef={"name": "gone"})]
    path.write_text(yaml.safe_dump_all(docs), encoding="utf-8")
    assert main(["render", "-f", str(path)]) == 2
    out, err = capsys.readouterr()
    assert err.strip().splitlines() == ["error: FrontProxy ns/lost: root Shard 'gone' not found"]
    rendered = [(d["kind"], d["metadata"]["name"]) for d in yaml.safe_load_all(out)]
    assert rendered[-4:] == [
        ("Service", "kcp-front-proxy"),
        ("ConfigMap", "kcp-front-proxy-mapping"),
        ("Deployment", "kcp-front-proxy"),
        ("PodDisruptionBudget", "kcp-front-proxy"),
    ]
    root = next(
        d
        for d in yaml.safe_load_all(out)
        if d["metadata"]["name"] == "root-kcp" and d["kind"] == "Deployment"
    )
    assert f"--shard-external-url={URL}" in args_of(root)


def test_plan_renders_the_shards_behind_their_front_proxy(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "all.yaml"
    docs = [shard_object(), non_root_object(), proxy_object()]
    path.write_text(yaml.safe_dump_all(docs), encoding="utf-8")
    assert main(["plan", "-f", str(path), "--to", "0.35.0", "-o", "json"]) == 0
    steps = {s["name"]: s for s in json.loads(capsys.readouterr().out)["steps"]}
    assert {name: s["flagsDropped"] for name, s in steps.items()} == {
        "root": [],
        "shard-1": [],
        "kcp": [],
    }
    assert (steps["kcp"]["kind"], steps["kcp"]["order"]) == ("FrontProxy", 3)
    objects, deployments = as_rolled_out(docs[:2], RELEASE)
    live = {key: d for key, d in deployments.items() if d is not None}
    without = plan_upgrade(objects, live, "0.35.0", RELEASE, lambda _: "-")
    assert "--requestheader-client-ca-file" not in without[0].flags_dropped
    behind = plan_upgrade(objects, live, "0.35.0", RELEASE, lambda _: "-", proxies=[proxy()])
    assert "--requestheader-client-ca-file" in behind[0].flags_added, "the plan sees the proxy"


def test_a_pass_before_the_watch_lists_the_front_proxy_still_renders_behind_it() -> None:
    """An operator restarting mid-rollout: the Shard's watch delivers first. The pass must
    not render the shard without its FrontProxy (that write would restart its pods twice;
    found on kind, where the root's Deployment was written twice by the new operator pod)."""
    kube, _, _ = started()
    deployment = kube.objects[("Deployment", "ns", "root-kcp")]
    front = kube.objects.pop(("FrontProxy", "ns", "kcp"))
    restarted = context(kube)
    kube.objects[("FrontProxy", "ns", "kcp")] = front
    kube.calls.clear()
    run(restarted, "root")
    assert ("apply", "Deployment", "root-kcp") not in kube.writes
    assert kube.objects[("Deployment", "ns", "root-kcp")] == deployment
    assert ("list", "FrontProxy", "") in kube.calls, "the FrontProxies were listed once"
    kube.calls.clear()
    run(restarted, "root")
    assert ("list", "FrontProxy", "") not in kube.calls, "and not again"


def test_a_front_proxy_pass_before_the_watch_lists_every_shard_still_waits_for_them() -> None:
    """The front-proxy's order needs every shard of its installation: one the watch has not
    delivered yet is listed, not taken as absent."""
    kube, _, ctx = started()
    pass_over(ctx)
    watched(ctx, kube.roll_out("ns", "kcp-front-proxy"))
    kube.put(ready(shard_object(version="0.35.0")))
    proxy_obj = copy.deepcopy(kube.objects[("FrontProxy", "ns", "kcp")])
    proxy_obj["spec"]["version"] = "0.35.0"
    kube.put(proxy_obj)
    behind = ready(non_root_object())
    restarted = context(kube)
    kube.put(behind)
    pass_over(restarted)
    status = proxy_status(kube)
    assert status["phase"] == "WaitingForShards", status
    assert "shard-1 runs kcp 0.34.0" in next(
        c["message"] for c in status["conditions"] if c["type"] == "Progressing"
    )
    template = kube.objects[("Deployment", "ns", "kcp-front-proxy")]["spec"]["template"]
    assert template["metadata"]["annotations"][VERSION_ANNOTATION] == "0.34.0"


@pytest.mark.parametrize(
    ("root_status", "held"),
    [
        ({"version": "0.34.0", "readyReplicas": 0}, True),
        ({"version": "0.34.0", "readyReplicas": 1}, False),
        (
            {
                "version": "0.34.0",
                "readyReplicas": 1,
                "conditions": [{"type": "Ready", "status": "False", "reason": "ShardUnreachable"}],
            },
            False,
        ),
    ],
)
def test_on_the_roots_embedded_cache_a_shard_waits_for_a_ready_root_pod(
    root_status: JSON, held: bool
) -> None:
    """The root's cache serves while one of its pods is ready, whether or not the operator
    reaches it (ShardUnreachable is the operator's view, not the shard's)."""
    root = pki.with_issued(make({**shard_object(), "status": root_status}), None)
    running = pki.with_issued(make(rolled_out(non_root_object())), root)
    live = render_shard(running, root, RELEASE).deployment
    changed = pki.with_issued(make(non_root_object(extraArgs=["--v=4"])), root)
    decision = plan(changed, root, {"Deployment": live}, RELEASE)
    written = any(o["kind"] == "Deployment" for o in decision.apply)
    assert written is not held
    assert (decision.waiting_reason == "WaitingForCacheServer") is held


def test_right_after_its_rollout_an_unreachable_front_proxy_is_asked_again_not_reported() -> None:
    """The Service routes to the new front-proxy pods a moment after the Deployment says they
    are ready: Unreachable then is no news; still Unreachable once the window is over is."""
    kube, effects, ctx = started()
    pass_over(ctx)
    effects.route_answer = Route(False, "Unreachable", "cannot reach it: Connection refused")
    watched(ctx, kube.roll_out("ns", "kcp-front-proxy"))
    pass_over(ctx)
    for _ in range(2):
        assert reason(proxy_status(kube), "Degraded") == ("False", "AsExpected")
        effects.now += SETTLE_RETRY_SECONDS
        effects.run_delayed(SETTLE_RETRY_SECONDS)
    assert len(effects.routed) == 3, "asked again every few seconds, each in a pass of its own"
    effects.route_answer = Route(True, "Routed", "1 shard(s) listed")
    effects.now += SETTLE_RETRY_SECONDS
    effects.run_delayed(SETTLE_RETRY_SECONDS)
    assert reason(proxy_status(kube), "Ready") == ("True", "RolledOut")
    assert [e.type for _, e in effects.events if e.type == "Warning"] == []

    effects.route_answer = Route(False, "Unreachable", "cannot reach it: Connection refused")
    effects.now += SETTLE_SECONDS
    pass_over(ctx)
    assert reason(proxy_status(kube), "Degraded") == ("True", "Unreachable")
