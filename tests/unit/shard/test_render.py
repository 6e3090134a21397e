from __future__ import annotations

from typing import Any

import pytest

from kcp_shard_operator.core.api.meta import SECRETS_ANNOTATION, VERSION_ANNOTATION
from kcp_shard_operator.core.api.model import JSON, SpecError
from kcp_shard_operator.core.kcp.podtemplate import secret_names
from kcp_shard_operator.core.kcp.versions import Version
from kcp_shard_operator.core.shard.args import SPEC_FIELDS
from kcp_shard_operator.core.shard.render import render_shard
from kcp_shard_operator.core.shard.spec import Shard
from tests.conftest import RELEASE, make, non_root_object, shard_object

ROOT_FLAG = "--root-shard-kubeconfig-file"
EXTERNAL_ETCD = {"endpoints": ["https://etcd:2379"]}


def container(deployment: JSON) -> JSON:
    result: JSON = deployment["spec"]["template"]["spec"]["containers"][0]
    return result


def args_of(shard: Shard, root: Shard | None, release: Version = RELEASE) -> list[str]:
    return list(container(render_shard(shard, root, release).deployment)["args"])


@pytest.mark.parametrize(
    ("spec", "present", "absent"),
    [
        ({"version": "0.32.3"}, [f"{ROOT_FLAG}=/etc/kcp/root-shard/kubeconfig"], []),
        ({"version": "0.34.0"}, [], [ROOT_FLAG]),
        ({"version": "0.34.2"}, [], [ROOT_FLAG]),
        ({"version": "0.34.0-rc.1"}, [], [ROOT_FLAG]),
        ({"version": "0.33.0"}, [f"{ROOT_FLAG}=/etc/kcp/root-shard/kubeconfig"], []),
        ({"version": "0.34.0+build.1", "image": {"tag": "b1"}}, [], [ROOT_FLAG]),
        (
            {"version": "0.34.0", "extraArgs": [ROOT_FLAG, "/x", "--v=4"]},
            ["--v=4"],
            [ROOT_FLAG, "/x"],
        ),
        (
            {"version": "0.34.0", "extraArgs": [f"{ROOT_FLAG}=/x", "--v=4"]},
            ["--v=4"],
            [f"{ROOT_FLAG}=/x"],
        ),
        (
            {"version": "0.32.3", "extraArgs": ["--v=4"]},
            ["--v=4", "--cache-kubeconfig=/etc/kcp/cache/kubeconfig", "--shard-name=shard-1"],
            [],
        ),
    ],
)
def test_non_root_flags(
    spec: dict[str, Any], present: list[str], absent: list[str], root: Shard
) -> None:
    args = args_of(make(non_root_object(**spec)), root)
    for arg in present:
        assert arg in args
    for arg in absent:
        assert not any(a == arg or a.startswith(arg + "=") for a in args), args


@pytest.mark.parametrize(
    "extra",
    [[f"{ROOT_FLAG}=/custom"], [ROOT_FLAG, "/custom"], ["--root_shard_kubeconfig_file=/custom"]],
)
def test_root_flag_in_extra_args_before_the_release_is_refused_not_doubled(
    root: Shard, extra: list[str]
) -> None:
    shard = make(non_root_object(version="0.32.3", extraArgs=extra))
    with pytest.raises(SpecError) as refused:
        render_shard(shard, root, RELEASE)
    assert str(refused.value) == (
        "spec.extraArgs: [0] --root-shard-kubeconfig-file: the operator renders it from "
        "spec.rootShardKubeconfigSecretRef; set it there instead"
    )


@pytest.mark.parametrize(
    ("extra", "kept", "dropped"),
    [
        (
            ["--cache-server-kubeconfig-file=/c"],
            ["--cache-kubeconfig=/c"],
            ["--cache-server-kubeconfig-file=/c (renamed to --cache-kubeconfig)"],
        ),
        (["--external-hostname", "kcp:6443", "--v=2"], ["--v=2"], ["--external-hostname kcp:6443"]),
        (["--external_hostname=kcp:6443"], [], ["--external_hostname=kcp:6443"]),
    ],
)
def test_retired_flags_leave_extra_args(
    extra: list[str], kept: list[str], dropped: list[str]
) -> None:
    rendered = render_shard(make(shard_object(version="0.32.3", extraArgs=extra)), None, RELEASE)
    args = container(rendered.deployment)["args"]
    assert args[len(args) - len(kept) :] == kept
    assert not any("external" in a and "hostname" in a for a in args)
    assert rendered.dropped_args == dropped


def test_renamed_cache_flag_is_refused_next_to_the_rendered_one(root: Shard) -> None:
    shard = make(non_root_object(version="0.34.0", extraArgs=["--cache-server-kubeconfig-file=/c"]))
    with pytest.raises(
        SpecError,
        match=r"\[0\] --cache-kubeconfig: the operator renders it from "
        r"spec.cache.kubeconfigSecretRef; set it there instead",
    ):
        render_shard(shard, root, RELEASE)


def test_dropped_and_unused_are_reported(root: Shard) -> None:
    shard = make(non_root_object(version="0.34.0", extraArgs=[ROOT_FLAG, "/x"]))
    rendered = render_shard(shard, root, RELEASE)
    assert rendered.dropped_args == [f"{ROOT_FLAG} /x"]
    assert rendered.unused_refs == ["spec.rootShardKubeconfigSecretRef"]
    volumes = [v["name"] for v in rendered.deployment["spec"]["template"]["spec"]["volumes"]]
    assert "root-shard-kubeconfig" not in volumes


def test_root_never_gets_root_flag_or_shard_name(root: Shard) -> None:
    args = args_of(make(shard_object(version="0.32.3")), None)
    assert not any(a.startswith(ROOT_FLAG) for a in args)
    assert not any(a.startswith("--shard-name") for a in args)


def test_release_is_configurable(root: Shard) -> None:
    shard = make(non_root_object(version="0.34.0"))
    assert any(a.startswith(ROOT_FLAG) for a in args_of(shard, root, Version.parse("0.35.0")))


def test_kubeconfig_secret_is_mounted_by_key(root: Shard) -> None:
    shard = make(
        non_root_object(version="0.32.3", cache={"kubeconfigSecretRef": {"name": "c", "key": "kc"}})
    )
    pod = render_shard(shard, root, RELEASE).deployment["spec"]["template"]["spec"]
    cache = next(v for v in pod["volumes"] if v["name"] == "cache-kubeconfig")
    assert cache["secret"] == {
        "secretName": "c",
        "defaultMode": 0o440,
        "items": [{"key": "kc", "path": "kubeconfig"}],
    }
    mount = next(m for m in pod["containers"][0]["volumeMounts"] if m["name"] == "cache-kubeconfig")
    assert mount == {"name": "cache-kubeconfig", "mountPath": "/etc/kcp/cache", "readOnly": True}


def test_deployment_shape(root: Shard) -> None:
    shard = make(
        non_root_object(
            replicas=3,
            etcd={
                "endpoints": ["https://e1:2379", "https://e2:2379"],
                "prefix": "/p",
                "tlsSecretRef": {"name": "etcd"},
            },
            baseURL="https://s1.example:6443",
            nodeSelector={"pool": "kcp"},
            tolerations=[{"key": "k", "operator": "Exists"}],
            resources={"requests": {"cpu": "1"}},
        )
    )
    rendered = render_shard(shard, root, RELEASE)
    dep = rendered.deployment
    assert dep["metadata"]["name"] == "shard-1-kcp"
    assert dep["metadata"]["ownerReferences"][0]["uid"] == "uid-shard-1"
    assert dep["spec"]["replicas"] == 3
    assert dep["spec"]["strategy"]["rollingUpdate"] == {"maxUnavailable": 0, "maxSurge": 1}
    template = dep["spec"]["template"]
    assert template["metadata"]["annotations"][VERSION_ANNOTATION] == "0.34.0"
    labels = template["metadata"]["labels"]
    assert labels["app.kubernetes.io/managed-by"] == "kcp-shard-operator"
    assert labels["kcpshard.dev/root-shard"] == "root"
    assert dep["spec"]["selector"]["matchLabels"] == {
        "app.kubernetes.io/name": "kcp",
        "app.kubernetes.io/instance": "shard-1",
    }
    pod = template["spec"]
    assert pod["nodeSelector"] == {"pool": "kcp"}
    assert pod["tolerations"] == [{"key": "k", "operator": "Exists"}]
    assert pod["securityContext"]["runAsNonRoot"] is True
    c = pod["containers"][0]
    assert c["image"] == "ghcr.io/kcp-dev/kcp:v0.34.0"
    assert c["securityContext"]["readOnlyRootFilesystem"] is True
    assert c["resources"] == {"requests": {"cpu": "1"}}
    assert c["readinessProbe"]["httpGet"]["path"] == "/readyz"
    assert c["livenessProbe"]["httpGet"]["path"] == "/livez"
    assert c["startupProbe"]["httpGet"]["port"] == 6443
    assert "--etcd-servers=https://e1:2379,https://e2:2379" in c["args"]
    assert "--etcd-prefix=/p" in c["args"]
    assert "--etcd-certfile=/etc/kcp/etcd/tls.crt" in c["args"]
    assert "--shard-base-url=https://s1.example:6443" in c["args"]
    assert rendered.pdb is not None
    assert rendered.pdb["spec"]["maxUnavailable"] == 1
    assert rendered.service["spec"]["ports"][0]["port"] == 6443


def test_single_replica_has_no_pdb_and_embedded_etcd(root: Shard) -> None:
    rendered = render_shard(root, None, RELEASE)
    assert rendered.pdb is None
    assert [o["kind"] for o in rendered.objects] == [
        "Service",
        "PersistentVolumeClaim",
        "Deployment",
    ]
    args = container(rendered.deployment)["args"]
    assert not any(a.startswith("--etcd-servers") for a in args)
    assert "--shard-base-url=https://root-kcp.ns.svc:6443" in args


def test_offline_shard_without_uid_has_no_owner() -> None:
    obj = shard_object()
    del obj["metadata"]["uid"]
    assert "ownerReferences" not in render_shard(make(obj), None, RELEASE).service["metadata"]


@pytest.mark.parametrize(
    ("root_obj", "message"),
    [
        (None, "root Shard 'root' not found"),
        (shard_object(name="other"), "root Shard 'root' not found"),
        (non_root_object(name="root"), "is not a root shard"),
    ],
)
def test_root_reference_errors(root_obj: dict[str, Any] | None, message: str) -> None:
    shard = make(non_root_object())
    root = make(root_obj) if root_obj else None
    with pytest.raises(SpecError, match=message):
        render_shard(shard, root, RELEASE)


def test_secret_revisions_restart_pods_when_a_secret_changes(root: Shard) -> None:
    shard = make(non_root_object(version="0.32.3"))

    def annotations(revisions: dict[str, str] | None) -> dict[str, str]:
        deployment = render_shard(shard, root, RELEASE, revisions).deployment
        result: dict[str, str] = deployment["spec"]["template"]["metadata"]["annotations"]
        return result

    assert SECRETS_ANNOTATION not in annotations(None)
    before = annotations({"cache": "1", "root-admin": "7"})[SECRETS_ANNOTATION]
    assert annotations({"cache": "1", "root-admin": "7", "unrelated": "9"})[SECRETS_ANNOTATION] == (
        before
    )
    assert annotations({"cache": "2", "root-admin": "7"})[SECRETS_ANNOTATION] != before


def test_mounted_secrets_follow_the_version(root: Shard) -> None:
    def mounted(version: str) -> list[str]:
        shard = make(non_root_object(version=version))
        return secret_names(
            render_shard(shard, root, RELEASE).deployment["spec"]["template"]["spec"]
        )

    assert mounted("0.32.3") == ["cache", "root-admin"]
    assert mounted("0.34.0") == ["cache"]


def test_spec_names_the_secrets_of_every_version() -> None:
    spec = make(
        non_root_object(
            version="0.34.0",
            etcd={"endpoints": ["https://e:2379"], "tlsSecretRef": {"name": "etcd"}},
            tls={"clientCASecretRef": {"name": "ca"}},
            adminKubeconfigSecretRef={"name": "admin"},
        )
    ).spec
    assert spec.secret_names == ["ca", "cache", "etcd", "root-admin"]


OPERATORS_OWN = "the operator sets this flag; remove it"


@pytest.mark.parametrize(
    ("extra", "index", "flag", "advice"),
    [
        (
            ["--v=2", "--cache-kubeconfig=/x"],
            1,
            "--cache-kubeconfig",
            "the operator renders it from spec.cache.kubeconfigSecretRef; set it there instead",
        ),
        (["--shard-name", "other"], 0, "--shard-name", OPERATORS_OWN),
        (["--secure-port=7443"], 0, "--secure-port", OPERATORS_OWN),
        (["--secure_port=1"], 0, "--secure-port", OPERATORS_OWN),
        (["--v=2", "--root_directory=/"], 1, "--root-directory", OPERATORS_OWN),
        (["--shard_name", "x"], 0, "--shard-name", OPERATORS_OWN),
    ],
)
def test_extra_args_may_not_override_rendered_flags(
    extra: list[str], index: int, flag: str, advice: str, root: Shard
) -> None:
    shard = make(non_root_object(version="0.34.0", extraArgs=extra))
    with pytest.raises(SpecError) as refused:
        render_shard(shard, root, RELEASE)
    assert refused.value.path == "spec.extraArgs"
    assert refused.value.message == f"[{index}] {flag}: {advice}"


def test_every_flag_given_twice_is_named_with_what_to_do(root: Shard) -> None:
    extra = ["--secure-port=1", "--v=2", f"{ROOT_FLAG}=/x", "--root-directory=/d"]
    shard = make(non_root_object(version="0.32.3", extraArgs=extra))
    with pytest.raises(SpecError) as refused:
        render_shard(shard, root, RELEASE)
    assert refused.value.message == (
        f"[0] --secure-port: {OPERATORS_OWN}; "
        f"[2] {ROOT_FLAG}: the operator renders it from spec.rootShardKubeconfigSecretRef; "
        f"set it there instead; [3] --root-directory: {OPERATORS_OWN}"
    )


EVERY_FIELD: dict[str, Any] = {
    "replicas": 2,
    "baseURL": "https://shard-1:6443",
    "externalURL": "https://kcp.example:443",
    "etcd": {"endpoints": ["https://e:2379"], "prefix": "/p", "tlsSecretRef": {"name": "etcd"}},
    "tls": {
        name: {"name": name}
        for name in (
            "servingCertSecretRef",
            "clientCASecretRef",
            "serviceAccountKeySecretRef",
            "requestHeaderClientCASecretRef",
            "shardClientCertSecretRef",
            "rootCASecretRef",
            "virtualWorkspaceCASecretRef",
        )
    },
    "virtualWorkspaceURL": "https://shard-1-vw:6443",
    "logicalClusterAdminKubeconfigSecretRef": {"name": "lca"},
    "externalLogicalClusterAdminKubeconfigSecretRef": {"name": "elca"},
    "auth": {
        "oidc": {
            "issuerURL": "https://idp.example",
            "clientID": "kcp",
            "usernamePrefix": "oidc:",
            "groupsClaim": "groups",
            "groupsPrefix": "oidc:",
            "signingAlgs": ["RS256"],
            "requiredClaims": {"hd": "example.com"},
            "caSecretRef": {"name": "idp-ca"},
        },
        "tokenFileSecretRef": {"name": "tokens"},
        "authorizationWebhook": {"configSecretRef": {"name": "authz"}},
    },
    "audit": {"logFile": {"compress": True}},
}


def test_every_rendered_flag_but_the_operators_own_names_its_spec_field(root: Shard) -> None:
    rendered: set[str] = set()
    for version in ("0.30.0", "0.32.3", "0.34.0"):
        shard = make(non_root_object(version=version, **EVERY_FIELD))
        rendered |= {arg.split("=")[0] for arg in args_of(shard, root)}
    assert rendered - set(SPEC_FIELDS) == {
        "--root-directory",
        "--secure-port",
        "--shard-name",
        "--leader-election-namespace",
        "--leader-election-name",
    }
    assert set(SPEC_FIELDS) <= rendered


def test_extra_args_may_set_flags_the_operator_does_not_render(root: Shard) -> None:
    shard = make(non_root_object(version="0.34.0", extraArgs=["--etcd-servers=https://e:2379"]))
    args = args_of(shard, root)
    assert args[-1] == "--etcd-servers=https://e:2379"


@pytest.mark.parametrize("kind", ["service", "pdb"])
def test_a_version_change_leaves_service_and_pdb_untouched(kind: str) -> None:
    spec: dict[str, Any] = {"replicas": 2, "etcd": {"endpoints": ["https://etcd:2379"]}}
    old = render_shard(make(shard_object(version="0.32.3", **spec)), None, RELEASE)
    new = render_shard(make(shard_object(version="0.32.4", **spec)), None, RELEASE)
    assert getattr(old, kind) == getattr(new, kind)
    assert old.deployment != new.deployment
    labels = new.deployment["metadata"]["labels"]
    assert labels["app.kubernetes.io/version"] == "0.32.4"
    assert new.deployment["spec"]["template"]["metadata"]["labels"] == labels


@pytest.mark.parametrize(
    ("version", "label"),
    [("0.33.0", "0.33.0"), ("0.33.0-rc.1", "0.33.0-rc.1"), ("0.33.0-rc-", "0.33.0-rc")],
)
def test_version_label_is_a_valid_label_value(version: str, label: str) -> None:
    rendered = render_shard(make(shard_object(version=version)), None, RELEASE)
    template = rendered.deployment["spec"]["template"]["metadata"]
    for labels in (rendered.deployment["metadata"]["labels"], template["labels"]):
        assert labels["app.kubernetes.io/version"] == label
    assert template["annotations"][VERSION_ANNOTATION] == version


def test_build_metadata_stays_out_of_label_values() -> None:
    obj = shard_object(version="0.34.0+build.1", image={"tag": "v0.34.0-b1"})
    rendered = render_shard(make(obj), None, RELEASE)
    assert rendered.deployment["metadata"]["labels"]["app.kubernetes.io/version"] == "0.34.0"
    for obj in rendered.objects:
        assert all("+" not in value for value in obj["metadata"]["labels"].values())
    assert rendered.deployment["spec"]["template"]["metadata"]["labels"][
        "app.kubernetes.io/version"
    ] == ("0.34.0")


def test_sharded_kcp_trust_and_client_settings(root: Shard) -> None:
    shard = make(
        non_root_object(
            version="0.34.0",
            externalURL="https://kcp.example.com:443",
            logicalClusterAdminKubeconfigSecretRef={"name": "lca"},
            externalLogicalClusterAdminKubeconfigSecretRef={"name": "elca", "key": "k"},
            tls={
                "requestHeaderClientCASecretRef": {"name": "rh-ca", "key": "tls.crt"},
                "shardClientCertSecretRef": {"name": "client"},
                "rootCASecretRef": {"name": "root-ca"},
            },
        )
    )
    rendered = render_shard(shard, root, RELEASE)
    args = container(rendered.deployment)["args"]
    for arg in (
        "--requestheader-client-ca-file=/etc/kcp/tls/requestheader-client-ca/ca.crt",
        "--requestheader-username-headers=X-Remote-User",
        "--requestheader-group-headers=X-Remote-Group",
        "--requestheader-extra-headers-prefix=X-Remote-Extra-",
        "--shard-client-cert-file=/etc/kcp/tls/shard-client/tls.crt",
        "--shard-client-key-file=/etc/kcp/tls/shard-client/tls.key",
        "--root-ca-file=/etc/kcp/tls/root-ca/ca.crt",
        "--logical-cluster-admin-kubeconfig=/etc/kcp/logical-cluster-admin/kubeconfig",
        "--external-logical-cluster-admin-kubeconfig=/etc/kcp/external-logical-cluster-admin/kubeconfig",
    ):
        assert arg in args
    volumes = {
        v["name"]: v["secret"]
        for v in rendered.deployment["spec"]["template"]["spec"]["volumes"]
        if "secret" in v
    }
    assert volumes["requestheader-client-ca"]["items"] == [{"key": "tls.crt", "path": "ca.crt"}]
    assert volumes["external-logical-cluster-admin"]["items"] == [
        {"key": "k", "path": "kubeconfig"}
    ]
    assert {"rh-ca", "client", "root-ca", "lca", "elca"} <= set(shard.spec.secret_names)


@pytest.mark.parametrize(
    ("rolled_out", "wanted", "strategy"),
    [
        (None, "0.28.0", "RollingUpdate"),
        ("0.28.0", "0.28.0", "RollingUpdate"),
        ("0.28.0", "0.28.1", "RollingUpdate"),
        ("0.28.1", "0.28.0", "RollingUpdate"),
        ("0.28.0", "0.29.0-rc.1", "Recreate"),
        ("0.27.1", "0.28.0", "Recreate"),
        ("0.28.0", "1.28.0", "Recreate"),
        ("0.28.0", "0.27.1", "Recreate"),
        ("not-a-version", "0.28.0", "RollingUpdate"),
    ],
)
def test_recreate_while_moving_to_another_minor(
    rolled_out: str | None, wanted: str, strategy: str
) -> None:
    obj = shard_object(version=wanted, etcd=EXTERNAL_ETCD)
    if rolled_out:
        obj["status"] = {"version": rolled_out}
    rendered = render_shard(make(obj), None, RELEASE).deployment["spec"]["strategy"]
    assert rendered["type"] == strategy
    if strategy == "Recreate":
        assert "rollingUpdate" not in rendered
    else:
        assert rendered["rollingUpdate"] == {"maxUnavailable": 0, "maxSurge": 1}


LEADER_ELECTION = [
    "--enable-leader-election=true",
    "--leader-election-namespace=kube-system",
    "--leader-election-name=kcp-controllers",
]


@pytest.mark.parametrize("version", ["0.27.1", "0.28.0", "0.30.0", "0.34.0"])
@pytest.mark.parametrize("replicas", [2, 3])
def test_a_replicated_shard_elects_the_replica_that_runs_kcps_controllers(
    version: str, replicas: int, root: Shard
) -> None:
    for obj, parent in (
        (shard_object(version=version, replicas=replicas, etcd=EXTERNAL_ETCD), None),
        (non_root_object(version=version, replicas=replicas, etcd=EXTERNAL_ETCD), root),
    ):
        args = args_of(make(obj), parent)
        assert [arg for arg in args if "leader-election" in arg] == LEADER_ELECTION


def test_a_single_replica_runs_kcps_controllers_without_an_election(root: Shard) -> None:
    for obj, parent in ((shard_object(replicas=1), None), (non_root_object(replicas=1), root)):
        assert not [arg for arg in args_of(make(obj), parent) if "leader-election" in arg]


def test_extra_args_cannot_turn_the_election_of_a_replicated_shard_off() -> None:
    shard = make(
        shard_object(replicas=2, etcd=EXTERNAL_ETCD, extraArgs=["--enable-leader-election=false"])
    )
    with pytest.raises(SpecError, match=r"\[0\] --enable-leader-election: .*spec.replicas"):
        args_of(shard, None)
