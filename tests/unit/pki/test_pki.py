"""The PKI the operator issues: what it decides (core.pki), what it signs (issuer.x509), and
what passes over a root and a non-root Shard write, renew, refuse and report."""

from __future__ import annotations

import base64
import copy
import datetime
import json
import re
import threading
from typing import Any

import pytest
import yaml
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from kcp_shard_operator.core.api.model import JSON, SpecError
from kcp_shard_operator.core.kcp.versions import Version
from kcp_shard_operator.core.pki import issuance, renewal
from kcp_shard_operator.core.shard import pki
from tests.conftest import RELEASE, make, shard_object
from tests.fake_kube import Effects, FakeKube, context, run, secret, settle

NOW = datetime.datetime(2026, 12, 4, 12, 0, tzinfo=datetime.UTC)


def bare_shard(name: str = "shard-1", **spec: Any) -> JSON:
    """A non-root Shard that names its root and nothing else."""
    return shard_object(name, rootShardRef={"name": "root"}, **spec)


def data(kube: FakeKube, name: str) -> dict[str, bytes]:
    found = kube.objects[("Secret", "ns", name)].get("data") or {}
    return {key: base64.b64decode(value) for key, value in found.items()}


def certificate(pem: bytes) -> x509.Certificate:
    return x509.load_pem_x509_certificate(pem)


def signed_by(leaf: x509.Certificate, ca: x509.Certificate) -> bool:
    try:
        leaf.verify_directly_issued_by(ca)
    except Exception:
        return False
    return True


def kubeconfig_certificate(document: bytes) -> tuple[JSON, x509.Certificate]:
    config = yaml.safe_load(document)
    user = config["users"][0]["user"]
    return config, certificate(base64.b64decode(user["client-certificate-data"]))


def conditions(kube: FakeKube, name: str) -> dict[str, JSON]:
    status = kube.objects[("Shard", "ns", name)].get("status") or {}
    return {cond["type"]: cond for cond in status.get("conditions") or []}


def installation(*extra: JSON, root: JSON | None = None, shard: JSON | None = None) -> FakeKube:
    return FakeKube(root or shard_object(), shard or bare_shard(), *extra)


def clock(ctx: Any, at: datetime.datetime) -> None:
    ctx.wall_clock = lambda: at


# What the core decides.


def test_a_root_shard_asks_for_a_ca_a_bundle_a_serving_certificate_and_its_kubeconfig() -> None:
    root = make(shard_object())
    assert [(r.secret, r.purpose) for r in pki.requests(root, None, RELEASE)] == [
        ("root-kcp-ca", issuance.Purpose.CA),
        ("root-kcp-client-ca", issuance.Purpose.CLIENT_CA),
        ("root-kcp-serving", issuance.Purpose.SERVING),
        ("root-kcp-admin-kubeconfig", issuance.Purpose.KUBECONFIG),
        ("root-kcp-logical-cluster-admin-kubeconfig", issuance.Purpose.KUBECONFIG),
    ]


def test_a_non_root_shard_before_the_deprecating_release_also_gets_the_root_kubeconfig() -> None:
    root = make(shard_object())
    old = make(bare_shard(version="0.33.0"))
    new = make(bare_shard(version="0.34.0"))
    names = [r.secret for r in pki.requests(old, root, RELEASE)]
    assert names == [
        "root-kcp-ca",
        "root-kcp-client-ca",
        "shard-1-kcp-serving",
        "shard-1-kcp-admin-kubeconfig",
        "shard-1-kcp-logical-cluster-admin-kubeconfig",
        "root-kcp-cache-kubeconfig",
        "root-kcp-admin-kubeconfig",
    ]
    assert "root-kcp-admin-kubeconfig" not in [r.secret for r in pki.requests(new, root, RELEASE)]
    assert pki.requests(new, None, RELEASE) == [], "nothing before the root Shard exists"


def test_what_the_user_sets_is_used_and_only_the_rest_is_issued() -> None:
    root = make(shard_object(tls={"servingCertSecretRef": {"name": "mine"}}))
    names = [r.secret for r in pki.requests(root, None, RELEASE)]
    # A client certificate of the operator's CA would not be trusted with the user's
    # serving certificate in front of it: no kubeconfig is issued for this shard.
    assert names == ["root-kcp-ca", "root-kcp-client-ca"]
    filled = pki.with_issued(root, None).spec
    assert filled.tls.serving_cert_secret_ref
    assert filled.tls.serving_cert_secret_ref.name == "mine"
    assert filled.admin_kubeconfig_secret_ref is None
    assert pki.requests(make(shard_object(pki={"issue": False})), None, RELEASE) == []


def test_the_filled_spec_points_at_the_issued_secrets() -> None:
    root = make(shard_object())
    filled = pki.with_issued(make(bare_shard(version="0.33.0")), root).spec
    assert filled.secret_names == [
        "root-kcp-admin-kubeconfig",
        "root-kcp-cache-kubeconfig",
        "root-kcp-client-ca",
        "shard-1-kcp-logical-cluster-admin-kubeconfig",
        "shard-1-kcp-serving",
    ]
    assert filled.external_url == "https://shard-1-kcp.ns.svc:6443"
    with_url = make(bare_shard(externalURL="https://kcp.example.com"))
    assert pki.with_issued(with_url, root).spec.external_url == "https://kcp.example.com"


def test_the_serving_certificate_covers_the_service_and_the_url_hosts() -> None:
    shard = make(shard_object(baseURL="https://10.0.0.7:6443", externalURL="https://kcp.example"))
    serving = next(r for r in pki.requests(shard, None, RELEASE) if r.secret.endswith("serving"))
    assert serving.dns_names == (
        "root-kcp",
        "root-kcp.ns",
        "root-kcp.ns.svc",
        "root-kcp.ns.svc.cluster.local",
        "localhost",
        "kcp.example",
    )
    assert serving.ip_addresses == ("127.0.0.1", "10.0.0.7")


@pytest.mark.parametrize(
    ("field", "value", "path"),
    [
        ("externalURL", "kcp.example.com", "spec.externalURL"),
        ("baseURL", "http://kcp:6443", "spec.baseURL"),
        ("externalURL", "https://", "spec.externalURL"),
    ],
)
def test_a_url_that_is_not_an_https_url_is_refused_naming_the_field(
    field: str, value: str, path: str
) -> None:
    with pytest.raises(SpecError) as caught:
        make(shard_object(**{field: value}))
    assert caught.value.path == path
    assert "https URL" in caught.value.message


@pytest.mark.parametrize(
    ("pki_spec", "path"),
    [
        ({"certificateLifetime": "5m"}, "spec.pki.certificateLifetime"),
        ({"certificateLifetime": "1y"}, "spec.pki.certificateLifetime"),
        ({"certificateLifetime": "1h", "renewBefore": "2h"}, "spec.pki.renewBefore"),
    ],
)
def test_lifetimes_are_checked(pki_spec: JSON, path: str) -> None:
    with pytest.raises(SpecError) as caught:
        make(shard_object(pki=pki_spec))
    assert caught.value.path == path


def test_a_non_root_shard_with_nothing_issued_still_needs_its_cache_kubeconfig() -> None:
    with pytest.raises(SpecError, match=r"cache\.kubeconfigSecretRef"):
        make(bare_shard(pki={"issue": False}))


def test_the_verdict_keeps_renews_and_never_overwrites_a_users_secret() -> None:
    root = make(shard_object(pki={"certificateLifetime": "10h", "renewBefore": "1h"}))
    serving = next(
        r for r in pki.requests(root, None, RELEASE) if r.purpose is issuance.Purpose.SERVING
    )
    issued = issuance.secret_object(serving, {"tls.crt": "x"}, "Opaque", "ca/u/1", NOW)
    issued["metadata"]["annotations"][issuance.NOT_AFTER_ANNOTATION] = "2026-12-04T22:00:00Z"
    verdict = renewal.verdict
    assert verdict(serving, None, "ca/u/1", NOW).action is renewal.Action.ISSUE
    assert verdict(serving, issued, "ca/u/1", NOW).action is renewal.Action.KEEP
    later = NOW + datetime.timedelta(hours=9, minutes=1)
    assert verdict(serving, issued, "ca/u/1", later).action is renewal.Action.RENEW
    assert verdict(serving, issued, "ca/u/2", NOW).why == "its CA changed"
    shorter = pki.requests(
        make(shard_object(pki={"certificateLifetime": "1h", "renewBefore": "10m"})), None, RELEASE
    )[2]
    assert (
        verdict(shorter, issued, "ca/u/1", NOW).why
        == "the lifetime the spec asks for is now shorter"
    )
    users = {"metadata": {"name": "root-kcp-serving"}}
    found = verdict(serving, users, "ca/u/1", NOW)
    assert found.action is renewal.Action.CONFLICT
    assert "root-kcp-serving" in found.why


# What passes write.


def test_passes_issue_a_whole_installation_signed_by_one_ca() -> None:
    kube = installation()
    effects = Effects()
    ctx = context(kube, effects)
    settle(ctx, kube, "root", "shard-1")
    ca = certificate(data(kube, "root-kcp-ca")["tls.crt"])
    constraints = ca.extensions.get_extension_for_class(x509.BasicConstraints).value
    assert constraints.ca
    assert isinstance(ca.public_key(), ec.EllipticCurvePublicKey)
    assert data(kube, "root-kcp-client-ca") == {"ca.crt": data(kube, "root-kcp-ca")["tls.crt"]}
    for shard in ("root", "shard-1"):
        serving = certificate(data(kube, f"{shard}-kcp-serving")["tls.crt"])
        assert signed_by(serving, ca)
        names = serving.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
        assert f"{shard}-kcp.ns.svc" in names.get_values_for_type(x509.DNSName)
        usage = serving.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value
        assert list(usage) == [ExtendedKeyUsageOID.SERVER_AUTH]
        config, client = kubeconfig_certificate(
            data(kube, f"{shard}-kcp-admin-kubeconfig")["kubeconfig"]
        )
        assert signed_by(client, ca)
        assert client.subject.get_attributes_for_oid(NameOID.ORGANIZATION_NAME)[0].value == (
            "system:masters"
        )
        assert config["clusters"][0]["cluster"]["server"] == f"https://{shard}-kcp.ns.svc:6443"
        assert config["current-context"] == "shard-base"
        assert conditions(kube, shard)["Ready"]["status"] == "True"
        assert conditions(kube, shard)["Degraded"]["status"] == "False"
        # The LogicalClusters on other shards are made with kcp's own group, not masters.
        lca = data(kube, f"{shard}-kcp-logical-cluster-admin-kubeconfig")["kubeconfig"]
        _, lca_client = kubeconfig_certificate(lca)
        assert lca_client.subject.get_attributes_for_oid(NameOID.ORGANIZATION_NAME)[0].value == (
            "system:kcp:logical-cluster-admin"
        )
    cache, _ = kubeconfig_certificate(data(kube, "root-kcp-cache-kubeconfig")["kubeconfig"])
    assert cache["clusters"][0]["cluster"]["server"] == "https://root-kcp.ns.svc:6443"
    args = kube.objects[("Deployment", "ns", "shard-1-kcp")]["spec"]["template"]["spec"][
        "containers"
    ][0]["args"]
    assert any(arg.startswith("--cache-kubeconfig=") for arg in args)
    assert any(arg.startswith("--client-ca-file=") for arg in args)
    assert any(arg.startswith("--logical-cluster-admin-kubeconfig=") for arg in args)
    assert "--shard-external-url=https://shard-1-kcp.ns.svc:6443" in args
    # One Event a pass: the CA, the bundle, the root's serving certificate and kubeconfig;
    # then shard-1's serving certificate and kubeconfig and the cache kubeconfig.
    issued = [(who, e.message) for who, e in effects.events if e.reason == "CertificateIssued"]
    assert [who for who, _ in issued] == ["root", "shard-1"]
    assert [message.count(" Secret ") for _, message in issued] == [6, 4]
    # One service-account key for the installation: tokens of one shard verify on the other.
    sa_pem = data(kube, "root-kcp-service-account-key")["tls.key"]
    # SEC 1: the only form of an ECDSA private key kcp's --service-account-key-file reads.
    assert sa_pem.startswith(b"-----BEGIN EC PRIVATE KEY-----")
    assert isinstance(serialization.load_pem_private_key(sa_pem, None), ec.EllipticCurvePrivateKey)
    for shard in ("root", "shard-1"):
        volumes = kube.objects[("Deployment", "ns", f"{shard}-kcp")]["spec"]["template"]["spec"][
            "volumes"
        ]
        assert "root-kcp-service-account-key" in [
            v["secret"]["secretName"] for v in volumes if "secret" in v
        ]
    assert "serving certificate Secret shard-1-kcp-serving (valid until 20" in issued[1][1]


def test_a_settled_installation_issues_nothing_and_reads_no_key() -> None:
    kube = installation()
    ctx = context(kube)
    settle(ctx, kube, "root", "shard-1")
    calls = len(kube.calls)
    run(ctx, "root", "shard-1")
    assert kube.calls[calls:] == []


def test_a_certificate_is_renewed_before_expiry_and_the_pods_roll() -> None:
    short = {"certificateLifetime": "10h", "renewBefore": "1h"}
    kube = installation(root=shard_object(pki=short))
    effects = Effects()
    ctx = context(kube, effects)
    clock(ctx, NOW)
    settle(ctx, kube, "root")
    before = data(kube, "root-kcp-serving")["tls.crt"]
    template = kube.objects[("Deployment", "ns", "root-kcp")]["spec"]["template"]
    status = kube.objects[("Shard", "ns", "root")]["status"]
    expiry = {entry["secret"]: entry["notAfter"] for entry in status["certificates"]}
    assert expiry["root-kcp-serving"] == "2026-12-04T22:00:00Z"
    clock(ctx, NOW + datetime.timedelta(hours=8))
    run(ctx, "root")
    assert data(kube, "root-kcp-serving")["tls.crt"] == before, "not yet due"
    clock(ctx, NOW + datetime.timedelta(hours=9, minutes=1))
    effects.events.clear()
    run(ctx, "root")
    after = data(kube, "root-kcp-serving")["tls.crt"]
    assert after != before
    assert certificate(after).not_valid_after_utc == NOW + datetime.timedelta(hours=19, minutes=1)
    assert kube.objects[("Deployment", "ns", "root-kcp")]["spec"]["template"] != template
    renewed = [e for _, e in effects.events if e.reason == "CertificateRenewed"]
    assert len(renewed) == 1
    assert set(re.findall(r"Secret (\S+) \(", renewed[0].message)) == {
        "root-kcp-serving",
        "root-kcp-admin-kubeconfig",
        "root-kcp-logical-cluster-admin-kubeconfig",
    }
    assert data(kube, "root-kcp-ca")["tls.crt"] == data(kube, "root-kcp-client-ca")["ca.crt"]


def test_a_deleted_issued_secret_is_issued_again() -> None:
    kube = installation()
    ctx = context(kube)
    settle(ctx, kube, "root")
    kube.delete("v1", "Secret", "ns", "root-kcp-serving")
    ctx.store.deleted("Secret", "ns", "root-kcp-serving")
    run(ctx, "root")
    assert ("Secret", "ns", "root-kcp-serving") in kube.objects
    assert conditions(kube, "root")["Degraded"]["status"] == "False"


def test_a_users_secret_in_the_way_is_reported_and_left_as_it_is() -> None:
    users = secret("root-kcp-serving", **{"tls.crt": "bWluZQ=="})
    kube = installation(users)
    ctx = context(kube)
    run(ctx, "root")
    assert kube.objects[("Secret", "ns", "root-kcp-serving")]["data"] == {"tls.crt": "bWluZQ=="}
    degraded = conditions(kube, "root")["Degraded"]
    assert (degraded["status"], degraded["reason"]) == ("True", "CertificateConflict")
    assert "root-kcp-serving" in degraded["message"]


def test_two_passes_racing_for_the_ca_share_the_one_created_first() -> None:
    kube = installation()
    ctx = context(kube)
    run(ctx, "root")
    ca = kube.objects[("Secret", "ns", "root-kcp-ca")]
    ctx.store.not_found("Secret", "ns", "root-kcp-ca")
    # The store has not seen the CA yet (its watch event comes later): the create conflicts.
    other = context(kube)
    other.store.deleted("Secret", "ns", "root-kcp-ca")
    run(other, "shard-1")
    assert kube.objects[("Secret", "ns", "root-kcp-ca")]["metadata"]["uid"] == ca["metadata"]["uid"]
    serving = certificate(data(kube, "shard-1-kcp-serving")["tls.crt"])
    assert signed_by(serving, certificate(data(kube, "root-kcp-ca")["tls.crt"]))


def _user_ca(
    *, is_ca: bool = True, days: int = 30, key: Any = None, start: datetime.datetime | None = None
) -> tuple[bytes, bytes]:
    key = key or ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "user CA")])
    start = start or NOW - datetime.timedelta(days=1)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(1)
        .not_valid_before(start)
        .not_valid_after(start + datetime.timedelta(days=days))
        .add_extension(x509.BasicConstraints(ca=is_ca, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    key_pem = key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )
    return cert.public_bytes(serialization.Encoding.PEM), key_pem


def _ca_secret(cert: bytes | None, key: bytes | None) -> JSON:
    fields = {"tls.crt": cert, "tls.key": key}
    return secret(
        "my-ca", **{k: base64.b64encode(v).decode() for k, v in fields.items() if v is not None}
    )


@pytest.mark.parametrize("rsa_bits", [None, 3072])
def test_a_users_ca_signs_instead_of_a_generated_one(rsa_bits: int | None) -> None:
    cert, key = _user_ca(key=rsa.generate_private_key(65537, rsa_bits) if rsa_bits else None)
    kube = installation(
        _ca_secret(cert, key), root=shard_object(pki={"caSecretRef": {"name": "my-ca"}})
    )
    ctx = context(kube)
    clock(ctx, NOW)
    settle(ctx, kube, "root")
    assert ("Secret", "ns", "root-kcp-ca") not in kube.objects
    serving = certificate(data(kube, "root-kcp-serving")["tls.crt"])
    assert signed_by(serving, certificate(cert))
    assert data(kube, "root-kcp-client-ca")["ca.crt"] == cert
    assert serving.not_valid_after_utc <= certificate(cert).not_valid_after_utc


@pytest.mark.parametrize(
    ("material", "fragment"),
    [
        (lambda: (_user_ca()[0], None), "Secret my-ca has no tls.key"),
        (lambda: _user_ca(is_ca=False), "is not a CA"),
        (lambda: _user_ca(start=NOW - datetime.timedelta(days=40)), "expired at"),
        (lambda: (_user_ca()[0], _user_ca()[1]), "is not the key of its tls.crt"),
        (lambda: _user_ca(key=rsa.generate_private_key(65537, 2048)), "RSA 2048"),
        (lambda: (b"not a certificate", _user_ca()[1]), "is not a PEM certificate"),
    ],
)
def test_a_users_ca_that_cannot_sign_is_reported_and_nothing_is_issued(
    material: Any, fragment: str
) -> None:
    cert, key = material()
    users_ca = _ca_secret(cert, key)
    kube = installation(users_ca, root=shard_object(pki={"caSecretRef": {"name": "my-ca"}}))
    ctx = context(kube)
    clock(ctx, NOW)
    run(ctx, "root")
    degraded = conditions(kube, "root")["Degraded"]
    assert (degraded["status"], degraded["reason"]) == ("True", "InvalidCA")
    assert fragment in degraded["message"]
    assert [name for kind, _, name in kube.objects if kind == "Secret"] == ["my-ca"]
    assert kube.objects[("Secret", "ns", "my-ca")]["data"] == users_ca["data"]


def test_a_missing_users_ca_is_reported_by_name() -> None:
    kube = installation(root=shard_object(pki={"caSecretRef": {"name": "my-ca"}}))
    run(context(kube), "root")
    degraded = conditions(kube, "root")["Degraded"]
    assert degraded["reason"] == "InvalidCA"
    assert "Secret my-ca (spec.pki.caSecretRef of Shard root) not found" in degraded["message"]


def test_no_key_reaches_a_status_an_event_or_a_log_line(caplog: pytest.LogCaptureFixture) -> None:
    kube = installation()
    effects = Effects()
    ctx = context(kube, effects)
    settle(ctx, kube, "root", "shard-1")
    keys = [data(kube, name)["tls.key"] for name in ("root-kcp-ca", "root-kcp-serving")]
    text = json.dumps([kube.objects[("Shard", "ns", n)]["status"] for n in ("root", "shard-1")])
    text += json.dumps([e.message for _, e in effects.events]) + caplog.text
    assert "PRIVATE KEY" not in text
    for key in keys:
        assert key.decode() not in text
    for body in ctx.store.select("Secret", "ns", lambda _: True):
        assert "data" not in body
        assert "PRIVATE" not in json.dumps(body)


def test_the_deprecating_release_decides_whether_the_root_kubeconfig_is_issued() -> None:
    root = make(shard_object())
    shard = make(bare_shard(version="0.34.0"))
    later = Version.parse("0.35.0")
    assert "root-kcp-admin-kubeconfig" in [r.secret for r in pki.requests(shard, root, later)]


@pytest.mark.parametrize(
    ("root_spec", "why"),
    [
        ({"pki": {"issue": False}}, "the root Shard root sets spec.pki.issue false"),
        (
            {"tls": {"servingCertSecretRef": {"name": "mine"}}},
            "the root Shard root serves the user's certificate or trusts the user's CA",
        ),
    ],
)
def test_a_kubeconfig_the_root_cannot_be_reached_with_is_reported_not_issued(
    root_spec: JSON, why: str
) -> None:
    kube = installation(secret("mine"), root=shard_object(**root_spec), shard=bare_shard())
    ctx = context(kube)
    run(ctx, "root", "shard-1")
    degraded = conditions(kube, "shard-1")["Degraded"]
    assert (degraded["status"], degraded["reason"]) == ("True", "KubeconfigNotIssued")
    assert (
        f"spec.cache.kubeconfigSecretRef is unset and cannot be issued ({why})"
        in (degraded["message"])
    )
    assert ("Secret", "ns", "root-kcp-cache-kubeconfig") not in kube.objects


def test_the_ca_is_read_once_and_a_replaced_ca_signs_everything_again() -> None:
    kube = installation(bare_shard("shard-2"), bare_shard("shard-3"))
    ctx = context(kube)
    settle(ctx, kube, "root", "shard-1", "shard-2", "shard-3")
    # One read: the listing of the namespace's Secrets at the first miss, before the CA
    # existed. It signs from memory since: no key read.
    assert kube.calls.count(("list", "Secret", "")) == 1
    assert kube.calls.count(("get", "Secret", "root-kcp-ca")) == 0
    # A CA rotation: the CA Secret is deleted; the next passes make a new one and issue every
    # leaf again from it.
    old_ca = data(kube, "root-kcp-ca")["tls.crt"]
    kube.delete("v1", "Secret", "ns", "root-kcp-ca")
    ctx.store.deleted("Secret", "ns", "root-kcp-ca")
    run(ctx, "root", "shard-1", "shard-2", "shard-3")
    new_ca = certificate(data(kube, "root-kcp-ca")["tls.crt"])
    assert new_ca != certificate(old_ca)
    for name in ("root", "shard-1", "shard-2", "shard-3"):
        assert signed_by(certificate(data(kube, f"{name}-kcp-serving")["tls.crt"]), new_ca)
    assert data(kube, "root-kcp-client-ca")["ca.crt"] == data(kube, "root-kcp-ca")["tls.crt"]


def test_a_users_secret_without_the_key_kcp_reads_is_named_with_the_field() -> None:
    mine = secret("mine", **{"tls.crt": "Y2VydA=="})
    custom = secret("lca", other="eA==")
    root = shard_object(
        tls={"servingCertSecretRef": {"name": "mine"}},
        externalURL="https://kcp.example.com",
        logicalClusterAdminKubeconfigSecretRef={"name": "lca", "key": "admin.kubeconfig"},
    )
    kube = installation(mine, custom, root=root)
    run(context(kube), "root")
    degraded = conditions(kube, "root")["Degraded"]
    assert (degraded["status"], degraded["reason"]) == ("True", "SecretKeyNotFound")
    assert (
        "Secret lca has no key 'admin.kubeconfig' (spec.logicalClusterAdminKubeconfigSecretRef, "
        "for --logical-cluster-admin-kubeconfig)" in degraded["message"]
    )
    assert (
        "Secret mine has no key 'tls.key' (spec.tls.servingCertSecretRef, for "
        "--tls-private-key-file)" in degraded["message"]
    )
    assert "'tls.crt'" not in degraded["message"]


def test_a_shard_that_ran_without_the_service_account_key_never_gets_it() -> None:
    root = make(shard_object())
    new = make(bare_shard())
    assert pki.takes_service_account_key(new, root, None)
    ran = make({**bare_shard(), "status": {"version": "0.34.0"}})
    assert not pki.takes_service_account_key(ran, root, None), "its Deployment was deleted"
    without: JSON = {"spec": {"template": {"spec": {"volumes": []}}}}
    assert not pki.takes_service_account_key(new, root, without)
    mounting = {
        "spec": {
            "template": {
                "spec": {
                    "volumes": [
                        {"name": "sa", "secret": {"secretName": "root-kcp-service-account-key"}}
                    ]
                }
            }
        }
    }
    assert pki.takes_service_account_key(new, root, mounting)
    names = [r.secret for r in pki.requests(new, root, RELEASE, service_account_key=False)]
    assert "root-kcp-service-account-key" not in names
    filled = pki.with_issued(new, root, service_account_key=False)
    assert filled.spec.tls.service_account_key_secret_ref is None


def test_an_existing_shard_keeps_running_without_the_service_account_key() -> None:
    """A Shard made before the operator issued anything: its next passes issue the rest but
    no service-account key, and its pods keep kcp's own key."""
    kube = installation(root=shard_object(pki={"issue": False}))
    ctx = context(kube)
    settle(ctx, kube, "root")
    respec_pki = copy.deepcopy(kube.objects[("Shard", "ns", "root")])
    respec_pki["spec"].pop("pki")
    ctx.store.put("Shard", kube.put(respec_pki))
    run(ctx, "root")
    assert ("Secret", "ns", "root-kcp-serving") in kube.objects
    assert ("Secret", "ns", "root-kcp-service-account-key") not in kube.objects
    args = kube.objects[("Deployment", "ns", "root-kcp")]["spec"]["template"]["spec"]["containers"][
        0
    ]["args"]
    assert not any(arg.startswith("--service-account-key-file") for arg in args)


def test_a_shards_own_secrets_are_issued_while_another_pass_holds_the_installation() -> None:
    """Only the installation's shared Secrets (its CA first) are issued one pass at a time;
    a Shard's own are issued beside the passes over the other Shards of the installation."""
    kube = installation(bare_shard("shard-2"))
    ctx = context(kube)
    settle(ctx, kube, "root", "shard-1")
    done = threading.Event()

    def pass_over_shard_2() -> None:
        run(ctx, "shard-2")
        done.set()

    with ctx.lock("ns", "root/pki"):
        worker = threading.Thread(target=pass_over_shard_2)
        worker.start()
        assert done.wait(10), "shard-2's pass waited for the installation's lock"
    worker.join()
    assert ("Secret", "ns", "shard-2-kcp-serving") in kube.objects
