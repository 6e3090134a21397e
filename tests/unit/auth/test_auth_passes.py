"""spec.auth through the operator's passes (fake API server): the Secrets it names are read
like every other mounted Secret, so they are neither reported missing nor left out of the
revisions that roll the pods."""

from __future__ import annotations

import copy
import logging

from kcp_shard_operator.controller.frontproxy import reconcile_front_proxy
from kcp_shard_operator.core.api.meta import SECRETS_ANNOTATION
from kcp_shard_operator.core.api.model import JSON
from tests.conftest import shard_object
from tests.fake_kube import FakeKube, context, rolled_out, run, secret, watched

LOGGER = logging.getLogger("test")
OIDC = {"issuerURL": "https://idp.example", "clientID": "kcp", "caSecretRef": {"name": "idp-ca"}}


def front_proxy(**auth: object) -> JSON:
    return {
        "apiVersion": "kcpshard.dev/v1alpha1",
        "kind": "FrontProxy",
        "metadata": {"name": "kcp", "namespace": "ns", "uid": "uid-kcp", "generation": 1},
        "spec": {"version": "0.34.0", "rootShardRef": {"name": "root"}, "auth": auth},
    }


def condition(obj: JSON, type_: str) -> tuple[str, str]:
    found = next(c for c in obj["status"]["conditions"] if c["type"] == type_)
    return found["status"], found["reason"]


def digest(kube: FakeKube, deployment: str) -> str:
    template = kube.objects[("Deployment", "ns", deployment)]["spec"]["template"]
    return str(template["metadata"]["annotations"][SECRETS_ANNOTATION])


def test_a_front_proxy_reads_its_auth_secrets_and_rolls_when_one_changes() -> None:
    # A new root shard: it takes the installation's service-account key.
    root = shard_object(auth={"oidc": OIDC})
    proxy = front_proxy(oidc=OIDC, serviceAccount={})
    kube = FakeKube(root, proxy, secret("idp-ca", **{"ca.crt": "Y2E="}))
    ctx = context(kube)
    run(ctx, "root")
    watched(ctx, kube.roll_out("ns", "root-kcp"))
    run(ctx, "root")
    assert condition(kube.objects[("Shard", "ns", "root")], "Degraded")[0] == "False"
    reconcile_front_proxy(ctx, "ns", "kcp", LOGGER)
    watched(ctx, kube.roll_out("ns", "kcp-front-proxy"))
    reconcile_front_proxy(ctx, "ns", "kcp", LOGGER)
    proxy = kube.objects[("FrontProxy", "ns", "kcp")]
    assert proxy["status"]["phase"] == "Ready", proxy["status"]
    assert condition(proxy, "Degraded")[0] == "False"
    volumes = kube.objects[("Deployment", "ns", "kcp-front-proxy")]["spec"]["template"]["spec"][
        "volumes"
    ]
    mounted = {v["secret"]["secretName"] for v in volumes if "secret" in v}
    assert {"idp-ca", "root-kcp-service-account-key"} <= mounted

    before = {name: digest(kube, name) for name in ("root-kcp", "kcp-front-proxy")}
    rotated = copy.deepcopy(kube.objects[("Secret", "ns", "idp-ca")])
    rotated["data"]["ca.crt"] = "bmV3"
    watched(ctx, kube.put(rotated))
    run(ctx, "root")
    reconcile_front_proxy(ctx, "ns", "kcp", LOGGER)
    after = {name: digest(kube, name) for name in ("root-kcp", "kcp-front-proxy")}
    assert all(after[name] != before[name] for name in before), (before, after)


def test_without_the_installations_key_the_front_proxy_names_it_and_does_not_start() -> None:
    """A root shard that ran before the operator issued the key keeps its own (never
    replaced): ServiceAccount tokens then need spec.auth.serviceAccount.keySecretRef."""
    kube = FakeKube(rolled_out(shard_object()), front_proxy(serviceAccount={}))
    ctx = context(kube)
    run(ctx, "root")
    reconcile_front_proxy(ctx, "ns", "kcp", LOGGER)
    proxy = kube.objects[("FrontProxy", "ns", "kcp")]
    assert condition(proxy, "Degraded") == ("True", "SecretNotFound")
    degraded = next(c for c in proxy["status"]["conditions"] if c["type"] == "Degraded")
    assert degraded["message"].endswith("not found: root-kcp-service-account-key")
    assert ("Deployment", "ns", "kcp-front-proxy") not in kube.objects


def test_a_missing_auth_secret_is_named() -> None:
    kube = FakeKube(rolled_out(shard_object(auth={"oidc": OIDC})))
    ctx = context(kube)
    run(ctx, "root")
    shard = kube.objects[("Shard", "ns", "root")]
    assert condition(shard, "Degraded") == ("True", "SecretNotFound")
    degraded = next(c for c in shard["status"]["conditions"] if c["type"] == "Degraded")
    assert "idp-ca" in degraded["message"]
