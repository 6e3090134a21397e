"""VirtualWorkspaceServer: its spec, the flags each kcp version takes, what it renders and
issues, what it waits for, its pass, and what it changes on its Shard and the front-proxy."""

from __future__ import annotations

import copy
import logging
from typing import Any

import pytest
import yaml

from kcp_shard_operator.controller.fanout import (
    referencing,
    virtual_workspaces_serving,
    virtual_workspaces_using,
)
from kcp_shard_operator.controller.reads import virtual_workspace_servers
from kcp_shard_operator.controller.virtualworkspaces import (
    reconcile_virtual_workspaces,
    still_sent_to_deleted,
)
from kcp_shard_operator.core.api.model import JSON, SpecError
from kcp_shard_operator.core.frontproxy.plan import plan_front_proxy, services_server
from kcp_shard_operator.core.frontproxy.render import render_front_proxy
from kcp_shard_operator.core.frontproxy.spec import FrontProxy, parse_front_proxy
from kcp_shard_operator.core.kcp.versions import (
    CACHE_KUBECONFIG_FLAG,
    Role,
    Version,
    explain,
    flag_applies,
    flag_required,
)
from kcp_shard_operator.core.pki.issuance import Purpose
from kcp_shard_operator.core.shard import pki
from kcp_shard_operator.core.shard.render import render_shard
from kcp_shard_operator.core.shard.spec import Shard
from kcp_shard_operator.core.virtualworkspaces import pki as vwpki
from kcp_shard_operator.core.virtualworkspaces.names import serves, service_url, serving
from kcp_shard_operator.core.virtualworkspaces.plan import plan_virtual_workspaces
from kcp_shard_operator.core.virtualworkspaces.release import still_sent_to
from kcp_shard_operator.core.virtualworkspaces.render import render_virtual_workspaces
from kcp_shard_operator.core.virtualworkspaces.spec import (
    VirtualWorkspaceServer,
    parse_virtual_workspace_server,
)
from kcp_shard_operator.core.virtualworkspaces.status import (
    ServerObservation,
    virtual_workspaces_status,
)
from tests.conftest import RELEASE, make, non_root_object, shard_object
from tests.fake_kube import READY_STATUS, SECRETS, FakeKube, context, rolled_out, run, watched

LOGGER = logging.getLogger("test")
ROLE = Role.VIRTUAL_WORKSPACES
STANDALONE = "--run-virtual-workspaces=false"


def server_object(name: str = "shard-1", **spec: Any) -> JSON:
    base: JSON = {"version": "0.34.0", "shardRef": {"name": name}}
    base.update(spec)
    return {
        "apiVersion": "kcpshard.dev/v1alpha1",
        "kind": "VirtualWorkspaceServer",
        "metadata": {"name": name, "namespace": "ns", "uid": f"uid-{name}", "generation": 1},
        "spec": base,
    }


def server(name: str = "shard-1", **spec: Any) -> VirtualWorkspaceServer:
    return parse_virtual_workspace_server(server_object(name, **spec))


def args_of(deployment: JSON) -> list[str]:
    return list(deployment["spec"]["template"]["spec"]["containers"][0]["args"])


def filled(shard: Shard, root: Shard | None, vws: VirtualWorkspaceServer | None) -> Shard:
    return pki.with_issued(shard, root, virtual_workspaces=vws)


def served_shard(version: str, **spec: Any) -> tuple[Shard, Shard]:
    """shard-1 at ``version`` on an issuing root, filled in as its pass fills it."""
    root = make(shard_object(version=version))
    shard = make(non_root_object(version=version, **spec))
    return filled(shard, root, server(version=version)), root


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ({"pki": {"issue": False}}, "spec.pki.issue false is not supported"),
        ({"version": "0.26.0"}, "older than the oldest supported"),
        ({"version": "0.34.0+dev"}, "needs spec.image.tag"),
    ],
)
def test_invalid_specs_name_the_field(spec: JSON, message: str) -> None:
    with pytest.raises(SpecError, match=message):
        server(**spec)


def test_defaults_two_replicas_and_kcps_image() -> None:
    found = server()
    assert found.spec.replicas == 2
    assert found.spec.image_ref == "ghcr.io/kcp-dev/kcp:v0.34.0"


@pytest.mark.parametrize(
    ("version", "external_url", "cache_required"),
    [
        # cmd/virtual-workspaces/options: --shard-external-url required up to 0.30, hidden
        # and ignored from 0.31; the cache kubeconfig required from the deprecating release.
        ("0.27.1", True, False),
        ("0.28.0", True, False),
        ("0.30.0", True, False),
        ("0.31.0", False, False),
        ("0.33.0", False, False),
        ("0.34.0", False, True),
        ("0.34.0-rc.1", False, True),
    ],
)
def test_the_flag_table_rows_of_the_virtual_workspace_server(
    version: str, external_url: bool, cache_required: bool
) -> None:
    parsed = Version.parse(version)
    assert flag_applies("--shard-external-url", parsed, ROLE, RELEASE) is external_url
    assert flag_applies(CACHE_KUBECONFIG_FLAG, parsed, ROLE, RELEASE)
    assert flag_required(CACHE_KUBECONFIG_FLAG, parsed, ROLE, RELEASE) is cache_required
    # The rows of the virtual-workspace server leave the shards' rows alone.
    assert flag_applies("--shard-external-url", parsed, Role.NON_ROOT, RELEASE) is False
    assert flag_required(CACHE_KUBECONFIG_FLAG, parsed, Role.NON_ROOT, RELEASE) is False


def test_the_deprecating_release_moves_the_cache_requirement() -> None:
    later = Version.parse("0.35.0")
    parsed = Version.parse("0.34.0")
    assert not flag_required(CACHE_KUBECONFIG_FLAG, parsed, ROLE, later)
    assert flag_required(CACHE_KUBECONFIG_FLAG, later, ROLE, later)
    assert "--shard-external-url" in explain(RELEASE)


@pytest.mark.parametrize("version", ["0.27.1", "0.30.0", "0.31.0", "0.34.0"])
def test_flags_per_version(version: str) -> None:
    shard, _ = served_shard(version)
    rendered = render_virtual_workspaces(server(version=version), shard, RELEASE)
    args = args_of(rendered.deployment)
    assert args[:7] == [
        "--secure-port=6443",
        "--tls-cert-file=/etc/kcp-virtual-workspaces/serving/tls.crt",
        "--tls-private-key-file=/etc/kcp-virtual-workspaces/serving/tls.key",
        "--kubeconfig=/etc/kcp-virtual-workspaces/kubeconfig/kubeconfig",
        "--authentication-kubeconfig=/etc/kcp-virtual-workspaces/kubeconfig/kubeconfig",
        "--authentication-skip-lookup",
        "--client-ca-file=/etc/kcp-virtual-workspaces/client-ca/ca.crt",
    ]
    assert "--cache-kubeconfig=/etc/kcp-virtual-workspaces/cache/kubeconfig" in args
    external = "--shard-external-url=https://shard-1-kcp.ns.svc:6443"
    assert (external in args) is (Version.parse(version) < Version(0, 31, 0))


def test_a_shard_without_a_cache_server_is_refused_from_the_deprecating_release() -> None:
    root = make(shard_object(version="0.34.0", pki={"issue": True}))
    vws = server("root", version="0.34.0")
    with pytest.raises(SpecError, match="reads the core APIExport identities from the cache"):
        render_virtual_workspaces(vws, filled(root, None, vws), RELEASE)
    older = server("root", version="0.33.0")
    root33 = make(shard_object(version="0.33.0"))
    args = args_of(
        render_virtual_workspaces(older, filled(root33, None, older), RELEASE).deployment
    )
    assert not any(arg.startswith("--cache-kubeconfig") for arg in args)


def test_a_retired_flag_leaves_extra_args_and_an_owned_one_is_refused() -> None:
    shard, _ = served_shard("0.31.0")
    retired = server(version="0.31.0", extraArgs=["--shard-external-url=https://x", "--v=4"])
    args = args_of(render_virtual_workspaces(retired, shard, RELEASE).deployment)
    assert args[-1] == "--v=4"
    assert not any(arg.startswith("--shard-external-url") for arg in args)
    owned = server(version="0.31.0", extraArgs=["--client-ca-file=/x"])
    with pytest.raises(SpecError, match=r"Shard spec\.tls\.clientCASecretRef"):
        render_virtual_workspaces(owned, shard, RELEASE)


def test_two_replicas_surge_under_a_budget_non_root_read_only() -> None:
    shard, _ = served_shard("0.34.0")
    rendered = render_virtual_workspaces(server(), shard, RELEASE)
    spec = rendered.deployment["spec"]
    assert spec["replicas"] == 2
    assert spec["strategy"]["rollingUpdate"] == {"maxUnavailable": 0, "maxSurge": 1}
    assert rendered.pdb is not None
    assert rendered.pdb["spec"]["maxUnavailable"] == 1
    container = spec["template"]["spec"]["containers"][0]
    assert container["command"] == ["/virtual-workspaces"]
    assert container["securityContext"]["readOnlyRootFilesystem"] is True
    assert rendered.service["metadata"]["name"] == "shard-1-vw"
    assert rendered.deployment["metadata"]["ownerReferences"][0]["kind"] == (
        "VirtualWorkspaceServer"
    )
    single = render_virtual_workspaces(server(replicas=1), shard, RELEASE)
    assert single.pdb is None


@pytest.mark.parametrize(("version", "hostname"), [("0.30.0", True), ("0.31.0", False)])
def test_the_shard_it_serves_turns_its_virtual_workspaces_off(version: str, hostname: bool) -> None:
    shard, root = served_shard(version)
    args = args_of(render_shard(shard, root, RELEASE).deployment)
    assert "--run-virtual-workspaces=false" in args
    assert "--shard-virtual-workspace-url=https://shard-1-vw.ns.svc:6443" in args
    assert "--shard-virtual-workspace-ca-file=/etc/kcp/tls/virtual-workspace-ca/ca.crt" in args
    assert "--shard-client-cert-file=/etc/kcp/tls/shard-client/tls.crt" in args
    assert ("--external-hostname=shard-1-kcp.ns.svc" in args) is hostname
    alone = filled(make(non_root_object(version=version)), root, None)
    plain = args_of(render_shard(alone, root, RELEASE).deployment)
    assert not any("virtual-workspace" in arg for arg in plain)


def test_the_shard_issues_its_client_certificate_for_the_server() -> None:
    root = make(shard_object())
    shard = make(non_root_object())
    found = pki.requests(shard, root, RELEASE, virtual_workspaces=server())
    client = next(r for r in found if r.secret == "shard-1-kcp-shard-client")
    assert (client.purpose, client.organization) == (Purpose.CLIENT, "system:masters")
    assert "shard-1-kcp-shard-client" not in {r.secret for r in pki.requests(shard, root, RELEASE)}


def test_the_server_issues_its_serving_certificate_and_kubeconfig() -> None:
    root = make(shard_object())
    shard = make(non_root_object())
    found = vwpki.requests(server(), shard, root)
    serving_cert, kubeconfig = found.by_installation_ca
    assert serving_cert.secret == "shard-1-vw-serving"
    assert "shard-1-vw.ns.svc" in serving_cert.dns_names
    assert kubeconfig.secret == "shard-1-vw-kubeconfig"
    assert kubeconfig.server == "https://shard-1-kcp.ns.svc:6443/clusters/root"
    assert kubeconfig.organization == "system:masters"
    user_ca = make(shard_object(tls={"clientCASecretRef": {"name": "mine"}}))
    assert vwpki.requests(server(), shard, user_ca).not_issued


def test_the_front_proxy_sends_services_to_the_roots_server() -> None:
    root = make(shard_object())
    proxy = parse_front_proxy(
        {
            "apiVersion": "kcpshard.dev/v1alpha1",
            "kind": "FrontProxy",
            "metadata": {"name": "kcp", "namespace": "ns"},
            "spec": {"version": "0.34.0", "rootShardRef": {"name": "root"}},
        }
    )

    def backends(vws: VirtualWorkspaceServer | None) -> dict[str, str]:
        rendered = render_front_proxy(proxy, root, RELEASE, virtual_workspaces=vws)
        entries = yaml.safe_load(rendered.config_map["data"]["mapping.yaml"])
        return {entry["path"]: entry["backend"] for entry in entries}

    assert backends(server("root")) == {
        "/clusters/": "https://root-kcp.ns.svc:6443",
        "/services/": "https://root-vw.ns.svc:6443",
    }
    assert backends(None)["/services/"] == "https://root-kcp.ns.svc:6443"


def test_the_front_proxy_rolls_after_the_servers_of_its_shards() -> None:
    root = make({**shard_object(), "status": {"version": "0.34.0", **READY_STATUS}})
    shard = make({**non_root_object(), "status": {"version": "0.34.0", **READY_STATUS}})

    def front_proxy(version: str) -> FrontProxy:
        return parse_front_proxy(
            {
                "apiVersion": "kcpshard.dev/v1alpha1",
                "kind": "FrontProxy",
                "metadata": {"name": "kcp", "namespace": "ns"},
                "spec": {"version": version, "rootShardRef": {"name": "root"}},
            }
        )

    proxy = front_proxy("0.34.0")
    older = render_front_proxy(front_proxy("0.30.0"), root, RELEASE).deployment
    behind = parse_virtual_workspace_server({**server_object(), "status": {"version": "0.30.0"}})
    decision = plan_front_proxy(
        proxy, root, [root, shard], {"Deployment": older}, RELEASE, servers=[behind]
    )
    assert decision.waiting_reason == "WaitingForShards"
    assert decision.waiting == (
        "VirtualWorkspaceServer shard-1 runs kcp 0.30.0: the front-proxy rolls to kcp 0.34.0 "
        "once every shard of root and their virtual-workspace servers run kcp 0.34.0 or newer"
    )
    caught_up = parse_virtual_workspace_server(
        {**server_object(), "status": {"version": "0.34.0", **READY_STATUS}}
    )
    decision = plan_front_proxy(
        proxy, root, [root, shard], {"Deployment": older}, RELEASE, servers=[caught_up]
    )
    assert decision.waiting is None


def test_one_server_per_shard_the_first_by_name_and_only_once_ready() -> None:
    servers = [server("b", shardRef={"name": "shard-1"}), server("a", shardRef={"name": "shard-1"})]
    found = serving(servers, "ns", "shard-1")
    assert found is not None
    assert found.name == "a"
    assert service_url(found) == "https://a-vw.ns.svc:6443"
    assert serving(servers, "other", "shard-1") is None
    assert serves(found) is None
    ready = parse_virtual_workspace_server({**server_object("a"), "status": READY_STATUS})
    assert serves(ready) is ready


def test_it_starts_once_its_shard_is_ready_and_rolls_after_it() -> None:
    shard, _ = served_shard("0.34.0")
    waiting = plan_virtual_workspaces(server(), shard, {}, RELEASE)
    assert waiting.waiting is not None
    assert "not Ready" in waiting.waiting
    assert [obj["kind"] for obj in waiting.apply] == ["Service"]
    ready = Shard(**{**shard.__dict__, "status": {"version": "0.34.0", **READY_STATUS}})
    going = plan_virtual_workspaces(server(), ready, {}, RELEASE)
    assert going.waiting is None
    assert [obj["kind"] for obj in going.apply] == [
        "Service",
        "Deployment",
        "PodDisruptionBudget",
    ]
    live = going.apply[1]
    newer = plan_virtual_workspaces(server(version="0.35.0"), ready, {"Deployment": live}, RELEASE)
    assert newer.waiting is not None
    assert "rolls to kcp 0.35.0 once its shard" in newer.waiting
    held = [obj for obj in newer.apply if obj["kind"] == "Deployment"]
    assert not held, "held at the version it runs: nothing changed"
    missing = plan_virtual_workspaces(server("nope", shardRef={"name": "nope"}), None, {}, RELEASE)
    assert missing.error_reason == "ShardNotFound"


def test_status_ready_once_rolled_out() -> None:
    shard, _ = served_shard("0.34.0")
    deployment = render_virtual_workspaces(server(), shard, RELEASE).deployment
    live = copy.deepcopy(deployment)
    live["metadata"]["generation"] = 1
    live["status"] = {
        "observedGeneration": 1,
        "replicas": 2,
        "updatedReplicas": 2,
        "readyReplicas": 2,
        "availableReplicas": 2,
    }
    status = virtual_workspaces_status(server(), ServerObservation(live), "now")
    ready = next(c for c in status["conditions"] if c["type"] == "Ready")
    assert (ready["status"], ready["reason"]) == ("True", "RolledOut")
    assert status["url"] == "https://shard-1-vw.ns.svc:6443"
    assert status["version"] == "0.34.0"
    waiting = virtual_workspaces_status(server(), ServerObservation(None, waiting="w"), "now")
    assert next(c for c in waiting["conditions"] if c["type"] == "Ready")["status"] == "False"


def test_a_pass_issues_its_secrets_and_writes_its_children() -> None:
    root = rolled_out(shard_object())
    shard = rolled_out(non_root_object())
    kube = FakeKube(root, shard, server_object(), *SECRETS)
    ctx = context(kube)
    run(ctx, "root")  # the installation's CA
    reconcile_virtual_workspaces(ctx, "ns", "shard-1", LOGGER)
    status = kube.objects[("VirtualWorkspaceServer", "ns", "shard-1")]["status"]
    for secret in ("shard-1-vw-serving", "shard-1-vw-kubeconfig"):
        assert ("Secret", "ns", secret) in kube.objects, secret
    deployment = kube.objects[("Deployment", "ns", "shard-1-vw")]
    assert "--cache-kubeconfig=/etc/kcp-virtual-workspaces/cache/kubeconfig" in args_of(deployment)
    assert status["url"] == "https://shard-1-vw.ns.svc:6443"
    assert status["certificates"]
    assert ("PodDisruptionBudget", "ns", "shard-1-vw") in kube.objects
    watched(ctx, kube.roll_out("ns", "shard-1-vw"))
    reconcile_virtual_workspaces(ctx, "ns", "shard-1", LOGGER)
    status = kube.objects[("VirtualWorkspaceServer", "ns", "shard-1")]["status"]
    assert status["phase"] == "Ready"
    count = "kcp_shard_operator_rollout_duration_seconds_count"
    observed = ctx.metrics.registry.get_sample_value(count, {"role": "virtual-workspaces"})
    assert observed == 1, "its rollout is counted as a virtual-workspace server's"
    assert ctx.metrics.registry.get_sample_value(count, {"role": "root"}) in (None, 0)


def test_a_secret_event_reaches_the_servers_and_shards_that_use_it() -> None:
    kube = FakeKube(rolled_out(shard_object()), rolled_out(non_root_object()), server_object())
    ctx = context(kube)
    assert virtual_workspaces_using(ctx, "ns", "root-kcp-ca") == ["shard-1"]
    assert virtual_workspaces_using(ctx, "ns", "shard-1-vw-kubeconfig") == ["shard-1"]
    assert virtual_workspaces_using(ctx, "ns", "cache") == []
    assert "shard-1" in referencing(ctx, "ns", "shard-1-kcp-shard-client")
    assert virtual_workspaces_serving(ctx, "ns", "shard-1") == ["shard-1"]
    assert virtual_workspaces_serving(ctx, "ns", "root") == []


def test_the_pods_of_a_shard_on_a_cache_server_may_reach_it() -> None:
    """The CacheServer's NetworkPolicy admits the pods carrying its client label."""
    on_cache, _ = served_shard("0.34.0", cache={"serverRef": {"name": "cache"}})
    rendered = render_virtual_workspaces(server(), on_cache, RELEASE)
    template = rendered.deployment["spec"]["template"]["metadata"]
    assert template["labels"]["kcpshard.dev/cache-server"] == "cache"
    assert "kcpshard.dev/cache-server" not in rendered.deployment["spec"]["selector"]["matchLabels"]
    embedded, _ = served_shard("0.30.0")
    rendered = render_virtual_workspaces(server(version="0.30.0"), embedded, RELEASE)
    assert (
        "kcpshard.dev/cache-server"
        not in rendered.deployment["spec"]["template"]["metadata"]["labels"]
    )


def deployment(name: str, args: list[str], complete: bool = True) -> JSON:
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name, "namespace": "ns", "generation": 2},
        "spec": {
            "replicas": 2,
            "template": {"spec": {"containers": [{"name": "kcp", "args": args}]}},
        },
        "status": {
            "observedGeneration": 2,
            "replicas": 2,
            "updatedReplicas": 2 if complete else 1,
            "availableReplicas": 2,
        },
    }


def mapping(backend: str) -> JSON:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": "kcp-front-proxy-mapping", "namespace": "ns"},
        "data": {"mapping.yaml": f"- path: /services/\n  backend: {backend}\n"},
    }


def test_a_deleted_server_is_kept_until_its_shard_and_front_proxies_roll_off_it() -> None:
    deleted = server()
    url = "--shard-virtual-workspace-url=https://shard-1-vw.ns.svc:6443"
    on_server = deployment("shard-1-kcp", [STANDALONE, url])
    in_process = deployment("shard-1-kcp", [])
    rolling = deployment("shard-1-kcp", [], complete=False)
    proxy = deployment("kcp-front-proxy", [])
    to_server = mapping("https://shard-1-vw.ns.svc:6443")
    to_shard = mapping("https://root-kcp.ns.svc:6443")
    assert still_sent_to(deleted, on_server, {}) == [
        "Shard shard-1 has not rolled out with its virtual workspaces in-process yet"
    ]
    assert len(still_sent_to(deleted, rolling, {})) == 1, "old pods may still send it requests"
    assert still_sent_to(deleted, in_process, {}) == []
    assert still_sent_to(deleted, None, {}) == [], "its shard is gone"
    assert still_sent_to(deleted, in_process, {"kcp": (to_server, proxy)}) == [
        "FrontProxy kcp has not rolled out with /services/ off https://shard-1-vw.ns.svc:6443 yet"
    ]
    assert len(still_sent_to(deleted, in_process, {"kcp": (to_shard, rolling)})) == 1
    assert still_sent_to(deleted, in_process, {"kcp": (to_shard, proxy)}) == []


def test_a_server_being_deleted_serves_its_shard_no_more() -> None:
    body = server_object()
    body["metadata"]["deletionTimestamp"] = "2026-12-07T11:00:00Z"
    body["status"] = READY_STATUS
    url = "--shard-virtual-workspace-url=https://shard-1-vw.ns.svc:6443"
    kube = FakeKube(
        rolled_out(shard_object()),
        rolled_out(non_root_object()),
        body,
        deployment("shard-1-kcp", [STANDALONE, url]),
    )
    ctx = context(kube)
    assert virtual_workspace_servers(ctx, "ns") == []
    assert still_sent_to_deleted(ctx, body) == [
        "Shard shard-1 has not rolled out with its virtual workspaces in-process yet"
    ]


def test_the_front_proxy_stays_on_the_roots_server_while_it_rolls() -> None:
    ready = parse_virtual_workspace_server({**server_object("root"), "status": READY_STATUS})
    rolling = server("root")
    assert services_server(ready, None) is ready
    assert services_server(rolling, None) is None, "not before it was Ready once"
    assert services_server(rolling, mapping("https://root-vw.ns.svc:6443")) is rolling, (
        "a server that rolls (Ready False) keeps /services/ where it already is"
    )
    assert services_server(rolling, mapping("https://root-kcp.ns.svc:6443")) is None
    assert services_server(None, mapping("https://root-vw.ns.svc:6443")) is None
