"""The Helm chart rendered by the pinned helm: sync with the CRD and install.yaml, values schema,
security settings, RBAC scope, peering, PodDisruptionBudget and Shards from values.

End-to-end (marker ``e2e``) although no cluster is involved: the pinned helm is built from its
Go module when the tools directory lacks it, and the unit tests build nothing."""

from __future__ import annotations

import json
import subprocess
import tomllib
from pathlib import Path
from typing import Any

import pytest
import yaml

from testkit.tools import REPO, helm, helm_env
from tests.chart import (
    CHART,
    CI_VALUES,
    CRD_COPY,
    CRD_SOURCE,
    INSTALL_YAML,
    RENDER_INSTALL,
    Obj,
    of_kind,
    one,
    render,
    template,
)

pytestmark = pytest.mark.e2e

SCHEMA = json.loads((CHART / "values.schema.json").read_text())
CHART_META = yaml.safe_load((CHART / "Chart.yaml").read_text())
SHARD_METADATA_FIELDS = ("name", "namespace", "labels", "annotations")


def container(objects: list[Obj]) -> Obj:
    containers = one(objects, "Deployment")["spec"]["template"]["spec"]["containers"]
    assert len(containers) == 1
    result: Obj = containers[0]
    return result


def env_of(objects: list[Obj]) -> dict[str, Any]:
    return {item["name"]: item.get("value") for item in container(objects)["env"]}


def rules_for(role: Obj, resource: str) -> list[Obj]:
    return [rule for rule in role["rules"] if resource in rule["resources"]]


def test_install_yaml_is_rendered_from_the_chart() -> None:
    fresh = subprocess.run(
        [str(RENDER_INSTALL)], env=helm_env(), check=True, capture_output=True, text=True
    ).stdout
    assert INSTALL_YAML.read_text() == fresh, (
        "manifests/install.yaml is stale: run `make manifests`"
    )


def test_install_yaml_holds_namespace_crds_rbac_and_operator() -> None:
    docs = [doc for doc in yaml.safe_load_all(INSTALL_YAML.read_text()) if doc]
    kinds = [doc["kind"] for doc in docs]
    assert kinds[0] == "Namespace"
    crds = {doc["metadata"]["name"] for doc in docs if doc["kind"] == "CustomResourceDefinition"}
    assert crds == {
        "shards.kcpshard.dev",
        "cacheservers.kcpshard.dev",
        "frontproxies.kcpshard.dev",
        "virtualworkspaceservers.kcpshard.dev",
        "kubeconfigs.kcpshard.dev",
        "clusterkopfpeerings.kopf.dev",
        "kopfpeerings.kopf.dev",
    }
    for kind in ("ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Deployment"):
        assert kinds.count(kind) == 1, kind
    namespace = docs[0]["metadata"]["name"]
    assert namespace == "kcp-shard-operator"
    namespaced = [d for d in docs if d["kind"] in ("ServiceAccount", "Deployment")]
    assert {d["metadata"]["namespace"] for d in namespaced} == {namespace}


def test_chart_crd_is_the_generated_crd() -> None:
    assert CRD_COPY.read_bytes() == CRD_SOURCE.read_bytes(), "run `make manifests`"


def test_chart_versions() -> None:
    pyproject = tomllib.loads((REPO / "pyproject.toml").read_text())
    assert CHART_META["appVersion"] == pyproject["project"]["version"] == "0.1.0"
    assert CHART_META["kubeVersion"]
    image = container(render())["image"]
    assert image == f"kcp-shard-operator:{CHART_META['appVersion']}"


@pytest.mark.parametrize("values", [None, *CI_VALUES], ids=lambda v: v.name if v else "default")
def test_helm_lint_strict(values: Any) -> None:
    args = ["lint", "--strict", str(CHART)] + (["-f", str(values)] if values else [])
    proc = helm(helm_env(), *args, check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "1 chart(s) linted, 0 chart(s) failed" in proc.stdout


BAD_VALUES = [
    (["--set", "replicaCount=0"], "/replicaCount"),
    (["--set", "replicaCount=two"], "/replicaCount"),
    (["--set", "image.pullPolicy=Sometimes"], "/image/pullPolicy"),
    (["--set", "image.repository="], "/image/repository"),
    (["--set", "operator.logLevel=verbose"], "/operator/logLevel"),
    (["--set", "operator.logFormat=xml"], "/operator/logFormat"),
    (["--set", "operator.rootShardFlagRemovedIn=v0.33"], "/operator/rootShardFlagRemovedIn"),
    (["--set-string", "operator.identityCacheCleanup=yes"], "/operator/identityCacheCleanup"),
    (["--set", "operator.livenessPort=70000"], "/operator/livenessPort"),
    (["--set", "metrics.port=70000"], "/metrics/port"),
    (["--set", "metrics.serviceMonitor.interval=often"], "/metrics/serviceMonitor/interval"),
    (["--set", "watchNamespaces[0]=Bad_Namespace"], "/watchNamespaces/0"),
    (["--set-json", 'watchNamespaces=["a","a"]'], "/watchNamespaces"),
    (["--set", "runAsUser=0"], "/runAsUser"),
    (
        ["--set-string", "podDisruptionBudget.minAvailable=half"],
        "/podDisruptionBudget/minAvailable",
    ),
    (["--set", "replicas=2"], "additional properties 'replicas'"),
    (["--set", "operator.namespace=x"], "additional properties 'namespace'"),
    (["--set-json", 'shards=[{"name":"root"}]'], "missing property 'version'"),
    (
        ["--set-json", 'shards=[{"name":"root","version":"v0.34.0","replicas":1}]'],
        "/shards/0/version",
    ),
    (["--set-json", 'shards=[{"name":"Root","version":"0.34.0","replicas":1}]'], "/shards/0/name"),
    (["--set-json", 'shards=[{"name":"r","version":"0.34.0","replicas":0}]'], "/shards/0/replicas"),
    (["--set-json", 'shards=[{"name":"r","verison":"0.34.0"}]'], "additional properties 'verison'"),
    (
        ["--set-json", 'shards=[{"name":"r","version":"0.34.0","replicas":1,"rootShardRef":{}}]'],
        "/shards/0/rootShardRef",
    ),
    (
        [
            "--set-json",
            'shards=[{"name":"s","version":"0.34.0","replicas":1,"rootShardRef":{"name":"r"},'
            '"pki":{"issue":false}}]',
        ],
        "missing property 'cache'",
    ),
    (
        [
            "--set-json",
            'shards=[{"name":"s","version":"0.34.0","replicas":1,"rootShardRef":{"name":"r"},'
            '"cache":{},"pki":{"issue":false}}]',
        ],
        "missing property 'kubeconfigSecretRef'",
    ),
    (["--set-json", 'shards=[{"name":"r","version":"0.34.0"}]'], "missing property 'etcd'"),
    (
        [
            "--set-json",
            'shards=[{"name":"r","version":"0.34.0","replicas":3,"etcd":{"endpoints":[]}}]',
        ],
        "/shards/0/etcd/endpoints",
    ),
    (
        ["--set-json", 'shards=[{"name":"r","version":"0.34.0","image":{"pullPolicy":"x"}}]'],
        "/shards/0/image/pullPolicy",
    ),
]


@pytest.mark.parametrize(("args", "error"), BAD_VALUES, ids=[" ".join(a) for a, _ in BAD_VALUES])
def test_schema_rejects_bad_values(args: list[str], error: str) -> None:
    proc = template(*args)
    assert proc.returncode != 0, f"accepted {args}"
    assert "values don't meet the specifications of the schema" in proc.stderr, proc.stderr
    assert error in proc.stderr, proc.stderr


def test_lint_rejects_bad_values_too() -> None:
    proc = helm(
        helm_env(),
        "lint",
        "--strict",
        str(CHART),
        "--set",
        "operator.logLevel=verbose",
        check=False,
    )
    assert proc.returncode != 0
    assert "/operator/logLevel" in proc.stdout + proc.stderr


def _structure(schema: Obj) -> Obj:
    """The validating part of a schema: types, enums, patterns, bounds, required, nesting."""
    out: Obj = {
        k: schema[k] for k in ("type", "enum", "pattern", "minimum", "required") if k in schema
    }
    if "properties" in schema:
        out["properties"] = {k: _structure(v) for k, v in schema["properties"].items()}
    for key in ("items", "additionalProperties"):
        if isinstance(schema.get(key), dict):
            out[key] = _structure(schema[key])
    return out


def test_schema_of_shard_items_follows_the_crd() -> None:
    crd = next(yaml.safe_load_all(CRD_SOURCE.read_text()))
    spec = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]
    item = _structure(SCHEMA["properties"]["shards"]["items"])
    assert item["required"] == ["name", "version"]
    for field in SHARD_METADATA_FIELDS:
        item["properties"].pop(field)
    item["required"] = ["version"]
    assert item == _structure(spec), "run `make generate` (hack/chart-schema.py)"


FREE_FORM_VALUES = ("resources",)


def test_every_value_has_a_schema_and_a_comment() -> None:
    values_text = (CHART / "values.yaml").read_text()
    assert set(yaml.safe_load(values_text)) <= set(SCHEMA["properties"])
    lines = values_text.splitlines()
    parent = ""
    for index, line in enumerate(lines):
        indent = len(line) - len(line.lstrip())
        if not line.strip() or line.lstrip().startswith("#") or indent > 2:
            continue
        key = line.split(":")[0].strip()
        if indent == 0:
            parent = key
        elif parent in FREE_FORM_VALUES:
            continue
        value_schema = SCHEMA["properties"][parent]
        if indent == 2:
            assert key in value_schema["properties"], f"{parent}.{key} has no schema"
        has_comment = lines[index - 1].lstrip().startswith("#")
        assert has_comment or line.rstrip().endswith(":"), f"{parent}.{key} has no comment"


SETTINGS = [
    [],
    ["-f", str(CI_VALUES[0])],
    ["--set", "replicaCount=3", "--set", "runAsUser=1000", "--set", "runAsGroup=1000"],
]


@pytest.mark.parametrize("args", SETTINGS, ids=["default", "ci", "three-replicas-uid-1000"])
def test_operator_pod_is_locked_down(args: list[str]) -> None:
    objects = render(*args)
    pod = one(objects, "Deployment")["spec"]["template"]["spec"]
    ctr = container(objects)
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["securityContext"]["runAsUser"] > 0
    assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    sc = ctr["securityContext"]
    assert sc["runAsNonRoot"] is True
    assert isinstance(sc["runAsUser"], int)
    assert sc["runAsUser"] > 0
    assert sc["readOnlyRootFilesystem"] is True
    assert sc["allowPrivilegeEscalation"] is False
    assert sc["capabilities"] == {"drop": ["ALL"]}
    assert sc["seccompProfile"] == {"type": "RuntimeDefault"}
    assert set(ctr["resources"]) == {"requests", "limits"}
    assert ctr["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "healthz"}
    port = ctr["ports"][0]["containerPort"]
    assert f"--liveness-port={port}" in ctr["args"]
    assert {"name": "tmp", "mountPath": "/tmp"} in ctr["volumeMounts"]
    # The keys of the admin kubeconfigs that reach kcp are written here: never to a node's disk.
    assert {"name": "tmp", "emptyDir": {"medium": "Memory", "sizeLimit": "64Mi"}} in pod["volumes"]
    assert pod["serviceAccountName"] == one(objects, "ServiceAccount")["metadata"]["name"]


SECRET_VERBS = ["get", "list", "watch", "create", "update"]
"""Read what Shards mount; create and replace what the operator issues (never patch or delete)."""


def test_image_and_settings_from_values() -> None:
    objects = render(
        "--set", "image.repository=registry.example.com/op",
        "--set", "image.tag=1.2.3",
        "--set", "image.pullPolicy=Always",
        "--set", "operator.rootShardFlagRemovedIn=0.34.0",
        "--set", "operator.identityCacheCleanup=false",
        "--set", "operator.kcpChecks=false",
        "--set", "operator.logLevel=warning",
        "--set", "operator.logFormat=full",
        "--set", "operator.extraArgs[0]=--foo",
    )  # fmt: skip
    ctr = container(objects)
    assert ctr["image"] == "registry.example.com/op:1.2.3"
    assert ctr["imagePullPolicy"] == "Always"
    assert ctr["args"][-1] == "--foo"
    assert env_of(objects) | {"POD_ID": None} == {
        "POD_ID": None,
        "KCP_SHARD_ROOT_SHARD_FLAG_REMOVED_IN": "0.34.0",
        "KCP_SHARD_IDENTITY_CACHE_CLEANUP": "false",
        "KCP_SHARD_KCP_CHECKS": "false",
        "KCP_SHARD_LOG_LEVEL": "warning",
        "KCP_SHARD_LOG_FORMAT": "full",
        "TMPDIR": "/tmp",
        "PYTHONDONTWRITEBYTECODE": "1",
    }


def test_default_deprecating_release_is_the_operators() -> None:
    assert "KCP_SHARD_ROOT_SHARD_FLAG_REMOVED_IN" not in env_of(render())


def test_default_install_watches_the_release_namespace_and_is_standalone() -> None:
    objects = render()
    assert sorted(obj["kind"] for obj in objects) == [
        "ClusterRole",
        "ClusterRoleBinding",
        "Deployment",
        "Role",
        "RoleBinding",
        "Service",
        "ServiceAccount",
    ]
    deployment = one(objects, "Deployment")
    assert deployment["spec"]["replicas"] == 1
    assert deployment["spec"]["strategy"] == {"type": "Recreate"}
    assert container(objects)["args"][:3] == ["run", "--namespace=ops", "--standalone"]
    assert rules_for(one(objects, "ClusterRole"), "secrets") == []
    role = one(objects, "Role")
    assert role["metadata"]["namespace"] == "ops"
    assert rules_for(role, "secrets") == [
        {"apiGroups": [""], "resources": ["secrets"], "verbs": SECRET_VERBS}
    ]


def test_cluster_wide_is_an_opt_in() -> None:
    objects = render("--set", "clusterWide=true")
    assert container(objects)["args"][:3] == ["run", "--all-namespaces", "--standalone"]
    assert of_kind(objects, "Role") == []
    role = one(objects, "ClusterRole")
    assert rules_for(role, "secrets") == [
        {"apiGroups": [""], "resources": ["secrets"], "verbs": SECRET_VERBS}
    ]
    assert rules_for(role, "clusterkopfpeerings") == []
    refused = template("--set", "clusterWide=true", "--set-json", 'watchNamespaces=["a"]')
    assert refused.returncode != 0
    assert "either watchNamespaces or clusterWide" in refused.stderr


@pytest.mark.parametrize(
    ("resource", "verbs"),
    [
        ("customresourcedefinitions", ["list", "watch"]),
        ("shards", ["get", "list", "watch", "patch"]),
        ("shards/status", ["patch"]),
        ("deployments", ["get", "list", "watch", "create", "patch", "update"]),
        ("services", ["get", "list", "watch", "create", "patch", "update", "delete"]),
        ("poddisruptionbudgets", ["get", "list", "watch", "create", "patch", "update", "delete"]),
        ("networkpolicies", ["get", "list", "watch", "create", "patch", "delete"]),
        ("persistentvolumeclaims", ["get", "list", "watch", "create", "patch"]),
        ("storageclasses", ["list"]),
        ("pods", ["list", "watch"]),
        ("jobs", ["get", "list", "watch", "create", "patch"]),
        ("secrets", SECRET_VERBS),
        ("events", ["create"]),
    ],
)
def test_cluster_role_grants_only_what_the_operator_uses(resource: str, verbs: list[str]) -> None:
    rules = rules_for(one(render("--set", "clusterWide=true"), "ClusterRole"), resource)
    assert [rule["verbs"] for rule in rules] == [verbs]


def test_no_wildcards_in_any_rbac() -> None:
    for args in SETTINGS:
        objects = render(*args)
        for role in of_kind(objects, "ClusterRole") + of_kind(objects, "Role"):
            for rule in role["rules"]:
                for key in ("apiGroups", "resources", "verbs"):
                    assert "*" not in rule[key], (args, rule)


def test_watch_namespaces_switch_to_roles() -> None:
    objects = render("--set-json", 'watchNamespaces=["kcp-a","kcp-b"]')
    cluster_role = one(objects, "ClusterRole")
    assert cluster_role["rules"] == [
        {
            "apiGroups": ["apiextensions.k8s.io"],
            "resources": ["customresourcedefinitions"],
            "verbs": ["list", "watch"],
        },
        {"apiGroups": ["storage.k8s.io"], "resources": ["storageclasses"], "verbs": ["list"]},
        {"apiGroups": [""], "resources": ["namespaces"], "verbs": ["list", "watch"]},
    ]
    roles = of_kind(objects, "Role")
    bindings = of_kind(objects, "RoleBinding")
    assert sorted(r["metadata"]["namespace"] for r in roles) == ["kcp-a", "kcp-b"]
    assert sorted(b["metadata"]["namespace"] for b in bindings) == ["kcp-a", "kcp-b"]
    default_rules = one(render("--set", "clusterWide=true"), "ClusterRole")["rules"][2:]
    for role in roles:
        assert role["rules"] == default_rules
    for binding in [*bindings, one(objects, "ClusterRoleBinding")]:
        assert binding["subjects"] == [
            {"kind": "ServiceAccount", "name": "t-kcp-shard-operator", "namespace": "ops"}
        ]
    args = container(objects)["args"]
    assert "--namespace=kcp-a" in args
    assert "--namespace=kcp-b" in args
    assert "--all-namespaces" not in args


@pytest.mark.parametrize(
    ("args", "peering_kind", "peering_namespaces"),
    [
        (["--set", "replicaCount=2", "--set", "clusterWide=true"], "ClusterKopfPeering", [None]),
        (["--set", "replicaCount=2"], "KopfPeering", ["ops"]),
        (
            ["--set", "replicaCount=2", "--set-json", 'watchNamespaces=["a","b"]'],
            "KopfPeering",
            ["a", "b"],
        ),
    ],
    ids=["cluster-wide", "release-namespace", "namespaced"],
)
def test_several_replicas_peer_and_have_a_pdb(
    args: list[str], peering_kind: str, peering_namespaces: list[str | None]
) -> None:
    objects = render(*args)
    deployment = one(objects, "Deployment")
    assert deployment["spec"]["replicas"] == 2
    assert deployment["spec"]["strategy"]["rollingUpdate"] == {"maxUnavailable": 0, "maxSurge": 1}
    assert "--peering=kcp-shard-operator" in container(objects)["args"]
    assert "--standalone" not in container(objects)["args"]
    peerings = of_kind(objects, peering_kind)
    assert [p["metadata"].get("namespace") for p in peerings] == peering_namespaces
    assert {p["metadata"]["name"] for p in peerings} == {"kcp-shard-operator"}
    plural = peering_kind.lower() + "s"
    roles = of_kind(objects, "Role") or of_kind(objects, "ClusterRole")
    for role in roles:
        assert [r["verbs"] for r in rules_for(role, plural)] == [["get", "list", "watch", "patch"]]
    pdb = one(objects, "PodDisruptionBudget")
    assert pdb["spec"]["minAvailable"] == 1
    assert pdb["spec"]["selector"] == deployment["spec"]["selector"]


def test_peering_objects_can_be_left_out() -> None:
    objects = render("--set", "replicaCount=2", "--set", "peering.create=false")
    assert of_kind(objects, "ClusterKopfPeering") == []
    assert of_kind(objects, "KopfPeering") == []


@pytest.mark.parametrize(
    ("args", "kinds_absent"),
    [
        (["--set", "rbac.create=false"], ["ClusterRole", "ClusterRoleBinding", "Role"]),
        (["--set", "serviceAccount.create=false"], ["ServiceAccount"]),
    ],
)
def test_rbac_and_service_account_are_optional(args: list[str], kinds_absent: list[str]) -> None:
    objects = render(*args)
    for kind in kinds_absent:
        assert of_kind(objects, kind) == []


def test_existing_service_account_is_bound() -> None:
    objects = render("--set", "serviceAccount.create=false", "--set", "serviceAccount.name=mine")
    pod = one(objects, "Deployment")["spec"]["template"]["spec"]
    assert pod["serviceAccountName"] == "mine"
    assert one(objects, "ClusterRoleBinding")["subjects"][0]["name"] == "mine"


def test_shards_from_values() -> None:
    shards: list[Obj] = [
        {
            "name": "root",
            "version": "0.34.0",
            "replicas": 2,
            "etcd": {"endpoints": ["https://etcd:2379"], "prefix": "/kcp/root"},
        },
        {
            "name": "shard-1",
            "namespace": "elsewhere",
            "labels": {"tier": "gold"},
            "annotations": {"note": "x"},
            "version": "0.32.3",
            "replicas": 1,
            "rootShardRef": {"name": "root"},
            "cache": {"kubeconfigSecretRef": {"name": "cache", "key": "kubeconfig"}},
            "extraArgs": ["--v=2"],
        },
    ]
    objects = of_kind(render("--set-json", f"shards={json.dumps(shards)}"), "Shard")
    assert [(s["metadata"]["namespace"], s["metadata"]["name"]) for s in objects] == [
        ("ops", "root"),
        ("elsewhere", "shard-1"),
    ]
    for shard, item in zip(objects, shards, strict=True):
        assert shard["apiVersion"] == "kcpshard.dev/v1alpha1"
        assert shard["spec"] == {k: v for k, v in item.items() if k not in SHARD_METADATA_FIELDS}
        assert shard["metadata"]["annotations"]["helm.sh/resource-policy"] == "keep"
        assert shard["metadata"]["labels"]["app.kubernetes.io/managed-by"] == "Helm"
    assert objects[1]["metadata"]["labels"]["tier"] == "gold"
    assert objects[1]["metadata"]["annotations"]["note"] == "x"


def test_shards_can_be_deleted_with_the_release() -> None:
    shard = one(
        render(
            "--set", "keepShardsOnUninstall=false",
            "--set-json", 'shards=[{"name":"r","version":"0.34.0","replicas":1}]',
        ),
        "Shard",
    )  # fmt: skip
    assert "annotations" not in shard["metadata"]


def test_labels_follow_kubernetes_conventions() -> None:
    for obj in render("-f", str(CI_VALUES[0])):
        labels = obj["metadata"]["labels"]
        assert labels["app.kubernetes.io/managed-by"] == "Helm"
        assert labels["helm.sh/chart"] == f"kcp-shard-operator-{CHART_META['version']}"
        if obj["kind"] != "Shard":
            assert labels["app.kubernetes.io/name"] == "kcp-shard-operator"
            assert labels["app.kubernetes.io/instance"] == "t"
            assert labels["app.kubernetes.io/version"] == CHART_META["appVersion"]


def test_release_named_after_the_chart_keeps_short_names() -> None:
    objects = render(release="kcp-shard-operator")
    assert one(objects, "Deployment")["metadata"]["name"] == "kcp-shard-operator"
    assert one(objects, "ServiceAccount")["metadata"]["name"] == "kcp-shard-operator"


def _dockerfile_stages() -> list[list[str]]:
    """The Dockerfile's instructions (continuations joined), split into build stages."""
    text = (REPO / "Dockerfile").read_text().replace("\\\n", " ")
    lines = [line.strip() for line in text.splitlines()]
    stages: list[list[str]] = []
    for line in lines:
        if line.startswith("FROM "):
            stages.append([])
        if stages and line and not line.startswith("#"):
            stages[-1].append(line)
    return stages


def test_dockerfile_matches_the_chart() -> None:
    stages = _dockerfile_stages()
    assert len(stages) == 2, "multi-stage: build, then runtime"
    build, runtime = stages
    assert build[0].endswith(" AS build")
    assert any("pip wheel --no-deps" in line for line in build)
    # The dependencies as the lock pins them, then the package's wheel without dependencies.
    install = next(line for line in build if "--require-hashes" in line)
    assert "--require-hashes -r requirements-runtime.lock" in install
    assert "pip install --no-index --no-deps kcp_shard_operator-" in install
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    users = [line.split()[1] for line in runtime if line.startswith("USER ")]
    assert users == [f"{values['runAsUser']}:{values['runAsGroup']}"]
    assert any(f"--uid {values['runAsUser']}" in line for line in runtime)
    assert f"EXPOSE {values['operator']['livenessPort']} {values['metrics']['port']}" in runtime
    assert 'ENTRYPOINT ["kcp-shard-operator"]' in runtime
    assert not any(line.startswith(("RUN pip", "COPY operator")) for line in runtime)


def test_shards_example_in_values_yaml_is_valid(tmp_path: Path) -> None:
    lines = (CHART / "values.yaml").read_text().splitlines()
    start = lines.index("#   shards:")
    example = []
    for line in lines[start:]:
        if not line.startswith("#  "):
            break
        example.append(line[3:])
    values = tmp_path / "example.yaml"
    values.write_text("\n".join(example) + "\n")
    shards = of_kind(render("-f", str(values)), "Shard")
    assert [shard["metadata"]["name"] for shard in shards] == ["root", "shard-1"]


def test_a_non_root_shard_needs_no_cache_kubeconfig_while_the_operator_issues_it() -> None:
    shards = '[{"name":"s","version":"0.34.0","replicas":1,"rootShardRef":{"name":"r"}}]'
    (shard,) = of_kind(render("--set-json", f"shards={shards}"), "Shard")
    assert "cache" not in shard["spec"]


def test_metrics_have_a_named_port_a_service_and_an_optional_service_monitor() -> None:
    objects = render()
    ctr = container(objects)
    assert "--metrics-port=9090" in ctr["args"]
    assert {"name": "metrics", "containerPort": 9090, "protocol": "TCP"} in ctr["ports"]
    service = one(objects, "Service")
    assert service["metadata"]["name"] == "t-kcp-shard-operator-metrics"
    assert service["spec"]["ports"] == [
        {"name": "metrics", "port": 9090, "targetPort": "metrics", "protocol": "TCP"}
    ]
    pod_labels = one(objects, "Deployment")["spec"]["template"]["metadata"]["labels"]
    assert service["spec"]["selector"].items() <= pod_labels.items()
    assert of_kind(objects, "ServiceMonitor") == []
    custom = render("-f", str(CI_VALUES[0]))
    (monitor,) = of_kind(custom, "ServiceMonitor")
    assert monitor["metadata"]["labels"]["release"] == "prometheus"
    assert (
        monitor["spec"]["selector"]["matchLabels"].items() <= service["metadata"]["labels"].items()
    )
    assert monitor["spec"]["endpoints"] == [
        {"port": "metrics", "path": "/metrics", "interval": "15s"}
    ]
    assert one(custom, "Service")["spec"]["ports"][0]["port"] == 8443


def test_metrics_port_0_turns_them_off() -> None:
    objects = render("--set", "metrics.port=0")
    assert of_kind(objects, "Service") == []
    ctr = container(objects)
    assert "--metrics-port=0" in ctr["args"]
    assert [port["name"] for port in ctr["ports"]] == ["healthz"]


def test_metrics_and_liveness_on_one_port_is_refused() -> None:
    proc = template("--set", "metrics.port=8080")
    assert proc.returncode != 0
    assert "metrics.port must differ from operator.livenessPort" in proc.stderr
