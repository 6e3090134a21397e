"""CacheServer: its spec, what it renders and issues, its passes, the Shards that wait for it."""

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
from cryptography.x509.oid import NameOID

from kcp_shard_operator.cli.crd import crd_yaml
from kcp_shard_operator.cli.main import main
from kcp_shard_operator.controller.cacheserver import reconcile_cache_server
from kcp_shard_operator.core.api.model import JSON, SpecError
from kcp_shard_operator.core.cacheserver import pki as cachepki
from kcp_shard_operator.core.cacheserver.names import service_url
from kcp_shard_operator.core.cacheserver.render import render_cache_server
from kcp_shard_operator.core.cacheserver.spec import parse_cache_server
from kcp_shard_operator.core.installation.plan import cache_step
from kcp_shard_operator.core.pki.issuance import Purpose
from tests.conftest import make, shard_object
from tests.fake_kube import Effects, FakeKube, context, run, watched

LOGGER = logging.getLogger("test")


def cache_object(name: str = "cache", **spec: Any) -> dict[str, Any]:
    base: dict[str, Any] = {"version": "0.28.0"}
    base.update(spec)
    return {
        "apiVersion": "kcpshard.dev/v1alpha1",
        "kind": "CacheServer",
        "metadata": {"name": name, "namespace": "ns", "uid": f"uid-{name}", "generation": 1},
        "spec": base,
    }


def pass_over(ctx: Any, name: str = "cache") -> None:
    reconcile_cache_server(ctx, "ns", name, LOGGER)


def cache_status(kube: FakeKube, name: str = "cache") -> JSON:
    found: JSON = kube.objects[("CacheServer", "ns", name)].get("status") or {}
    return found


def reason(status: JSON, type_: str) -> tuple[str, str]:
    found = next(c for c in status["conditions"] if c["type"] == type_)
    return found["status"], found["reason"]


@pytest.mark.parametrize(
    ("spec", "name", "message"),
    [
        ({"version": "v0.28.0"}, "cache", "spec.version"),
        ({"version": "0.26.0"}, "cache", "older than the oldest supported"),
        ({"pki": {"issue": False}}, "cache", "spec.pki.issue false needs"),
        ({}, "x" * 58, "at most 57 characters"),
        ({"storage": {"size": "0"}}, "cache", "spec.storage.size"),
        ({"version": "0.28.0+dev"}, "cache", "needs spec.image.tag"),
    ],
)
def test_bad_specs_are_refused_in_one_line(spec: JSON, name: str, message: str) -> None:
    with pytest.raises(SpecError, match=message) as err:
        parse_cache_server(cache_object(name, **spec))
    assert "\n" not in str(err.value)


def test_the_crd_carries_the_offline_rules_and_the_columns() -> None:
    crds = {doc["spec"]["names"]["kind"]: doc for doc in yaml.safe_load_all(crd_yaml())}
    version = crds["CacheServer"]["spec"]["versions"][0]
    spec = version["schema"]["openAPIV3Schema"]["properties"]["spec"]
    assert [r["message"] for r in spec["x-kubernetes-validations"]] == [
        "spec.pki.issue false needs spec.servingCertSecretRef: the cache server serves TLS only",
        "spec.version with build metadata (+...) needs spec.image.tag: an image tag cannot "
        "contain '+'",
    ]
    assert [c["name"] for c in version["additionalPrinterColumns"]] == [
        "Desired",
        "Running",
        "Ready",
        "Phase",
        "Age",
    ]
    shard_spec = crds["Shard"]["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    cache = shard_spec["properties"]["spec"]["properties"]["cache"]["properties"]
    assert set(cache) == {"kubeconfigSecretRef", "serverRef"}


def test_a_shard_names_one_cache_server_not_both() -> None:
    with pytest.raises(SpecError, match=r"serverRef and spec\.cache\.kubeconfigSecretRef"):
        make(
            shard_object(
                cache={"serverRef": {"name": "cache"}, "kubeconfigSecretRef": {"name": "k"}}
            )
        )


def test_the_cache_server_renders_one_recreated_non_root_pod_on_its_claim() -> None:
    cache = parse_cache_server(cache_object())
    rendered = render_cache_server(cache, {"cache-cache-serving": "7"})
    assert [o["kind"] for o in rendered.objects] == [
        "NetworkPolicy",
        "Service",
        "PersistentVolumeClaim",
        "Deployment",
    ]
    deployment = rendered.deployment
    assert deployment["spec"]["replicas"] == 1
    assert deployment["spec"]["strategy"] == {"type": "Recreate"}
    pod = deployment["spec"]["template"]["spec"]
    container = pod["containers"][0]
    assert container["command"] == ["/cache-server"]
    assert container["image"] == "ghcr.io/kcp-dev/kcp:v0.28.0"
    assert "--root-directory=/data" in container["args"]
    assert container["securityContext"]["readOnlyRootFilesystem"] is True
    assert pod["securityContext"]["runAsNonRoot"] is True
    volumes = {v["name"]: v for v in pod["volumes"]}
    assert volumes["data"]["persistentVolumeClaim"]["claimName"] == "cache-cache-data"
    assert volumes["serving"]["secret"]["secretName"] == "cache-cache-serving"
    owners = deployment["metadata"]["ownerReferences"]
    assert [(o["kind"], o["name"]) for o in owners] == [("CacheServer", "cache")]
    assert rendered.claim is not None
    assert "ownerReferences" not in rendered.claim["metadata"], "a retained claim outlives it"
    rotated = render_cache_server(cache, {"cache-cache-serving": "8"}).deployment
    assert rotated["spec"]["template"] != deployment["spec"]["template"]


def test_an_ephemeral_cache_server_has_no_claim() -> None:
    cache = parse_cache_server(cache_object(storage={"ephemeral": True}))
    rendered = render_cache_server(cache)
    assert rendered.claim is None
    pod = rendered.deployment["spec"]["template"]["spec"]
    assert {"name": "data", "emptyDir": {}} in pod["volumes"]


def test_the_pki_is_a_ca_a_serving_certificate_and_the_shards_kubeconfig() -> None:
    cache = parse_cache_server(cache_object())
    found = cachepki.requests(cache)
    assert [(r.secret, r.purpose) for r in found] == [
        ("cache-cache-ca", Purpose.CA),
        ("cache-cache-serving", Purpose.SERVING),
        ("cache-cache-kubeconfig", Purpose.KUBECONFIG),
    ]
    assert "cache-cache.ns.svc" in found[1].dns_names
    assert found[2].server == "https://cache-cache.ns.svc:6443"
    assert {r.owner.kind for r in found} == {"CacheServer"}
    users = parse_cache_server(cache_object(servingCertSecretRef={"name": "mine"}))
    assert cachepki.requests(users) == []


def test_a_new_cache_server_is_issued_and_written_then_ready_once_rolled_out() -> None:
    kube = FakeKube(cache_object())
    effects = Effects()
    ctx = context(kube, effects)
    pass_over(ctx)
    assert kube.writes == [
        ("create", "Secret", "cache-cache-ca"),
        ("create", "Secret", "cache-cache-serving"),
        ("create", "Secret", "cache-cache-kubeconfig"),
        ("apply", "NetworkPolicy", "cache-cache"),
        ("apply", "Service", "cache-cache"),
        ("apply", "PersistentVolumeClaim", "cache-cache-data"),
        ("apply", "Deployment", "cache-cache"),
        ("status", "CacheServer", "cache"),
    ]
    status = cache_status(kube)
    assert status["phase"] == "Progressing"
    assert reason(status, "Ready") == ("False", "RollingOut")
    assert status["kubeconfigSecret"] == "cache-cache-kubeconfig"
    assert status["url"] == "https://cache-cache.ns.svc:6443"
    assert all(c["observedGeneration"] == 1 for c in status["conditions"])
    kubeconfig = kube.objects[("Secret", "ns", "cache-cache-kubeconfig")]["data"]["kubeconfig"]
    document = json.loads(base64.b64decode(kubeconfig))
    assert document["clusters"][0]["cluster"]["server"] == service_url(
        parse_cache_server(cache_object())
    )
    owners = kube.objects[("Secret", "ns", "cache-cache-ca")]["metadata"]["ownerReferences"]
    assert owners[0]["kind"] == "CacheServer"

    watched(ctx, kube.roll_out("ns", "cache-cache"))
    kube.calls.clear()
    pass_over(ctx)
    status = cache_status(kube)
    assert (status["phase"], status["version"]) == ("Ready", "0.28.0")
    assert reason(status, "Ready") == ("True", "RolledOut")
    assert [w for w in kube.writes if w[0] != "status"] == []
    assert ("RolledOut", "Normal") in [(e.reason, e.type) for _, e in effects.events]
    count = "kcp_shard_operator_rollout_duration_seconds_count"
    assert ctx.metrics.registry.get_sample_value(count, {"role": "cache-server"}) == 1
    kube.calls.clear()
    pass_over(ctx)
    assert kube.writes == [], "a settled cache server is written nothing"


def test_an_invalid_cache_server_is_degraded_and_gets_nothing() -> None:
    kube = FakeKube(cache_object(version="0.1"))
    pass_over(context(kube))
    assert kube.writes == [("status", "CacheServer", "cache")]
    assert reason(cache_status(kube), "Degraded") == ("True", "InvalidSpec")


def shard_on_cache(name: str = "root", version: str = "0.28.0", **spec: Any) -> JSON:
    return shard_object(name, version=version, cache={"serverRef": {"name": "cache"}}, **spec)


def shard_reason(kube: FakeKube, name: str, type_: str) -> tuple[str, str]:
    return reason(kube.objects[("Shard", "ns", name)]["status"], type_)


def test_a_shard_naming_a_missing_cache_server_says_so_and_starts_nothing() -> None:
    kube = FakeKube(shard_on_cache())
    run(context(kube), "root")
    assert not [w for w in kube.writes if w[1] in ("Deployment", "Service")]
    assert shard_reason(kube, "root", "Progressing") == ("False", "CacheServerNotFound")


def test_a_shard_starts_only_once_its_cache_server_is_ready() -> None:
    kube = FakeKube(cache_object(), shard_on_cache())
    effects = Effects()
    ctx = context(kube, effects)
    pass_over(ctx)
    run(ctx, "root")
    assert ("Deployment", "ns", "root-kcp") not in kube.objects
    shard = kube.objects[("Shard", "ns", "root")]["status"]
    assert (shard["phase"], shard_reason(kube, "root", "Progressing")) == (
        "WaitingForCacheServer",
        ("False", "WaitingForCacheServer"),
    )
    assert "WaitingForCacheServer" in [e.reason for _, e in effects.events]

    watched(ctx, kube.roll_out("ns", "cache-cache"))
    pass_over(ctx)
    run(ctx, "root")
    args = kube.objects[("Deployment", "ns", "root-kcp")]["spec"]["template"]["spec"]
    container = args["containers"][0]
    assert any(a.startswith("--cache-kubeconfig=") for a in container["args"])
    secrets = {v["secret"]["secretName"] for v in args["volumes"] if "secret" in v}
    assert "cache-cache-kubeconfig" in secrets


def test_the_cache_server_rolls_first_and_the_shards_after_it() -> None:
    kube = FakeKube(cache_object(), shard_on_cache())
    ctx = context(kube)
    pass_over(ctx)
    watched(ctx, kube.roll_out("ns", "cache-cache"))
    pass_over(ctx)
    run(ctx, "root")
    watched(ctx, kube.roll_out("ns", "root-kcp"))
    run(ctx, "root")
    for kind, name in (("CacheServer", "cache"), ("Shard", "root")):
        obj = copy.deepcopy(kube.objects[(kind, "ns", name)])
        obj["spec"]["version"] = "0.34.0"
        watched(ctx, kube.put(obj))
    run(ctx, "root")
    template = kube.objects[("Deployment", "ns", "root-kcp")]["spec"]["template"]
    assert template["metadata"]["annotations"]["kcpshard.dev/kcp-version"] == "0.28.0"
    assert shard_reason(kube, "root", "Progressing") == ("False", "WaitingForCacheServer")
    pass_over(ctx)
    watched(ctx, kube.roll_out("ns", "cache-cache"))
    pass_over(ctx)
    assert cache_status(kube)["version"] == "0.34.0"
    run(ctx, "root")
    template = kube.objects[("Deployment", "ns", "root-kcp")]["spec"]["template"]
    assert template["metadata"]["annotations"]["kcpshard.dev/kcp-version"] == "0.34.0"


def cache_template(kube: FakeKube) -> JSON:
    template: JSON = kube.objects[("Deployment", "ns", "cache-cache")]["spec"]["template"]
    return template


def test_an_older_minor_is_refused_and_the_cache_server_keeps_serving_its_version() -> None:
    kube = FakeKube(cache_object(version="0.28.0"))
    effects = Effects()
    ctx = context(kube, effects)
    pass_over(ctx)
    watched(ctx, kube.roll_out("ns", "cache-cache"))
    pass_over(ctx)
    obj = copy.deepcopy(kube.objects[("CacheServer", "ns", "cache")])
    obj["spec"].update(version="0.27.1", resources={"requests": {"cpu": "300m"}})
    obj["metadata"]["generation"] = 2
    watched(ctx, kube.put(obj))
    kube.calls.clear()
    pass_over(ctx)

    template = cache_template(kube)
    container = template["spec"]["containers"][0]
    assert template["metadata"]["annotations"]["kcpshard.dev/kcp-version"] == "0.28.0"
    assert container["image"] == "ghcr.io/kcp-dev/kcp:v0.28.0"
    assert container["resources"] == {"requests": {"cpu": "300m"}}, "the rest still applies"
    watched(ctx, kube.roll_out("ns", "cache-cache"))
    pass_over(ctx)
    status = cache_status(kube)
    assert (status["phase"], status["version"]) == ("Degraded", "0.28.0")
    assert reason(status, "Ready") == ("True", "RolledOut")
    assert reason(status, "Progressing") == ("False", "DowngradeRefused")
    degraded = next(c for c in status["conditions"] if c["type"] == "Degraded")
    assert degraded["reason"] == "DowngradeRefused"
    assert "the cache server stays at kcp 0.28.0" in degraded["message"]
    assert "delete Deployment cache-cache" in degraded["message"]
    assert all(c["observedGeneration"] == 2 for c in status["conditions"])
    assert ("DowngradeRefused", "Warning") in [(e.reason, e.type) for _, e in effects.events]

    obj = copy.deepcopy(kube.objects[("CacheServer", "ns", "cache")])
    obj["spec"]["version"] = "0.28.1"
    watched(ctx, kube.put(obj))
    pass_over(ctx)
    watched(ctx, kube.roll_out("ns", "cache-cache"))
    obj = copy.deepcopy(kube.objects[("CacheServer", "ns", "cache")])
    obj["spec"]["version"] = "0.28.0"
    watched(ctx, kube.put(obj))
    pass_over(ctx)
    assert cache_template(kube)["metadata"]["annotations"]["kcpshard.dev/kcp-version"] == (
        "0.28.0"
    ), "a patch downgrade rolls like an upgrade"
    assert reason(cache_status(kube), "Degraded") == ("False", "AsExpected")


def test_render_prints_the_cache_server_first_and_reports_a_bad_one(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "all.yaml"
    docs = [shard_on_cache(), cache_object(), cache_object("bad", version="0.1")]
    path.write_text(yaml.safe_dump_all(docs), encoding="utf-8")
    assert main(["render", "-f", str(path)]) == 2
    out, err = capsys.readouterr()
    assert err.strip().splitlines() == [
        "error: CacheServer ns/bad: spec.version: '0.1' does not match "
        + err.split("does not match ", 1)[1].strip()
    ]
    rendered = [(d["kind"], d["metadata"]["name"]) for d in yaml.safe_load_all(out)]
    assert rendered[:4] == [
        ("NetworkPolicy", "cache-cache"),
        ("Service", "cache-cache"),
        ("PersistentVolumeClaim", "cache-cache-data"),
        ("Deployment", "cache-cache"),
    ]
    shard = next(
        d
        for d in yaml.safe_load_all(out)
        if d["metadata"]["name"] == "root-kcp" and d["kind"] == "Deployment"
    )
    volumes = shard["spec"]["template"]["spec"]["volumes"]
    assert "cache-cache-kubeconfig" in {v.get("secret", {}).get("secretName") for v in volumes}


def test_plan_rolls_shards_on_a_cache_server_and_refuses_one_naming_a_missing_one(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "all.yaml"
    docs = [
        cache_object(),
        shard_on_cache(),
        shard_object("other", version="0.28.0", cache={"serverRef": {"name": "gone"}}),
    ]
    path.write_text(yaml.safe_dump_all(docs), encoding="utf-8")
    assert main(["plan", "-f", str(path), "--to", "0.34.0", "-o", "json"]) == 0
    steps = {s["name"]: s for s in json.loads(capsys.readouterr().out)["steps"]}
    assert (steps["cache"]["outcome"], steps["cache"]["order"]) == ("Rolls", 1)
    assert (steps["root"]["outcome"], steps["root"]["order"]) == ("Rolls", 2)
    assert steps["other"]["outcome"] == "Refused"
    assert steps["other"]["reason"] == "CacheServerNotFound"


def cache_args(cache: JSON) -> list[str]:
    deployment = render_cache_server(parse_cache_server(cache)).deployment
    args: list[str] = deployment["spec"]["template"]["spec"]["containers"][0]["args"]
    return args


@pytest.mark.parametrize(
    ("version", "authenticates"),
    [
        ("0.27.1", False),
        ("0.28.1", False),
        ("0.29.1", False),
        ("0.29.2", True),
        ("0.29.5", True),
        ("0.30.0", False),
        ("0.30.1", False),
        ("0.30.2", True),
        ("0.31.0-rc.1", True),
        ("0.31.0", True),
        ("0.34.0", True),
    ],
)
def test_the_client_ca_is_rendered_exactly_where_kcps_cache_server_takes_it(
    version: str, authenticates: bool
) -> None:
    cache = cache_object(version=version)
    flags = [a for a in cache_args(cache) if a.startswith("--client-ca-file")]
    assert flags == (["--client-ca-file=/etc/kcp-cache/client-ca/ca.crt"] if authenticates else [])
    pod = render_cache_server(parse_cache_server(cache)).deployment["spec"]["template"]["spec"]
    volumes = {v["name"]: v for v in pod["volumes"]}
    if authenticates:
        assert volumes["client-ca"]["secret"]["secretName"] == "cache-cache-ca"
        assert volumes["client-ca"]["secret"]["items"] == [{"key": "ca.crt", "path": "ca.crt"}], (
            "the CA's certificate only, never its key"
        )
    else:
        assert "client-ca" not in volumes


def test_a_users_client_ca_is_required_where_the_operator_issues_none() -> None:
    mine: dict[str, Any] = {"servingCertSecretRef": {"name": "mine"}}
    with pytest.raises(SpecError, match=r"spec\.clientCASecretRef: kcp 0\.31\.0's cache server"):
        parse_cache_server(cache_object(version="0.31.0", **mine))
    assert "--client-ca-file" not in " ".join(cache_args(cache_object(version="0.30.0", **mine)))
    args = cache_args(
        cache_object(version="0.31.0", clientCASecretRef={"name": "cas", "key": "b.pem"}, **mine)
    )
    assert "--client-ca-file=/etc/kcp-cache/client-ca/ca.crt" in args


def test_the_shards_client_certificate_is_in_the_group_the_cache_server_authorizes() -> None:
    kube = FakeKube(cache_object(version="0.31.0"))
    pass_over(context(kube))
    kubeconfig = kube.objects[("Secret", "ns", "cache-cache-kubeconfig")]["data"]["kubeconfig"]
    user = json.loads(base64.b64decode(kubeconfig))["users"][0]["user"]
    pem = base64.b64decode(user["client-certificate-data"])
    subject = x509.load_pem_x509_certificate(pem).subject
    organizations = subject.get_attributes_for_oid(NameOID.ORGANIZATION_NAME)
    assert [o.value for o in organizations] == ["system:masters"]
    ca = kube.objects[("Secret", "ns", "cache-cache-ca")]["data"]["ca.crt"]
    issuer = x509.load_pem_x509_certificate(base64.b64decode(ca)).subject
    assert x509.load_pem_x509_certificate(pem).issuer == issuer, "signed by the client CA"


def test_a_rotated_client_ca_restarts_the_cache_server() -> None:
    cache = parse_cache_server(cache_object(version="0.31.0"))
    before = render_cache_server(cache, {"cache-cache-serving": "1", "cache-cache-ca": "1"})
    after = render_cache_server(cache, {"cache-cache-serving": "1", "cache-cache-ca": "2"})
    assert before.deployment["spec"]["template"] != after.deployment["spec"]["template"]


def test_the_network_policy_admits_only_the_cache_servers_clients_to_its_port() -> None:
    policy = render_cache_server(parse_cache_server(cache_object())).network_policy
    assert policy is not None
    assert policy["metadata"]["ownerReferences"][0]["kind"] == "CacheServer"
    assert policy["metadata"]["labels"]["app.kubernetes.io/managed-by"] == "kcp-shard-operator"
    assert policy["spec"] == {
        "podSelector": {
            "matchLabels": {
                "app.kubernetes.io/name": "kcp-cache-server",
                "app.kubernetes.io/instance": "cache",
            }
        },
        "policyTypes": ["Ingress"],
        "ingress": [
            {
                "from": [{"podSelector": {"matchLabels": {"kcpshard.dev/cache-server": "cache"}}}],
                "ports": [{"protocol": "TCP", "port": 6443}],
            }
        ],
    }


def test_the_pods_of_a_shard_naming_the_cache_server_carry_its_client_label() -> None:
    kube = FakeKube(cache_object(), shard_on_cache(), shard_object("other", version="0.28.0"))
    ctx = context(kube)
    pass_over(ctx)
    watched(ctx, kube.roll_out("ns", "cache-cache"))
    pass_over(ctx)
    run(ctx, "root")
    run(ctx, "other")
    labels = kube.objects[("Deployment", "ns", "root-kcp")]["spec"]["template"]["metadata"]
    assert labels["labels"]["kcpshard.dev/cache-server"] == "cache"
    other = kube.objects[("Deployment", "ns", "other-kcp")]["spec"]["template"]["metadata"]
    assert "kcpshard.dev/cache-server" not in other["labels"]


def test_turning_the_network_policy_off_deletes_the_one_the_operator_made() -> None:
    kube = FakeKube(cache_object())
    ctx = context(kube)
    pass_over(ctx)
    assert ("NetworkPolicy", "ns", "cache-cache") in kube.objects
    obj = copy.deepcopy(kube.objects[("CacheServer", "ns", "cache")])
    obj["spec"]["networkPolicy"] = {"enabled": False}
    watched(ctx, kube.put(obj))
    kube.calls.clear()
    pass_over(ctx)
    assert ("delete", "NetworkPolicy", "cache-cache") in kube.writes
    assert ("NetworkPolicy", "ns", "cache-cache") not in kube.objects
    kube.calls.clear()
    pass_over(ctx)
    assert [w for w in kube.writes if w[0] != "status"] == []


def test_plan_shows_the_client_ca_added_where_the_cache_server_starts_taking_it() -> None:
    live = render_cache_server(parse_cache_server(cache_object(version="0.30.0"))).deployment
    live["status"] = {"observedGeneration": 1, "replicas": 1, "updatedReplicas": 1}
    cache = parse_cache_server(cache_object(version="0.30.0"))
    step = cache_step(cache, live, "0.31.0")
    assert step.flags_added == ["--client-ca-file"]
    assert cache_step(cache, live, "0.30.1").flags_added == []
