"""The forms of what the operator issues (pure): purposes, owners and requests, the hosts a
serving certificate covers, and the Secret and kubeconfig documents that hold the result.

Every issued Secret says in its annotations what it was issued for (a digest of the request),
by which CA (name, uid and resourceVersion of the CA's Secret) and until when, so a pass
decides from the metadata the watch keeps, without reading any key. What each kind of object
gets is decided in :mod:`pki` (Shards), :mod:`cachepki` and :mod:`frontproxypki`.
"""

from __future__ import annotations

import base64
import datetime
import hashlib
import ipaddress
import json
from dataclasses import dataclass
from enum import Enum

from kcp_shard_operator.constants import API_GROUP, FIELD_MANAGER
from kcp_shard_operator.core.api.model import JSON
from kcp_shard_operator.core.pki.spec import PKISpec, duration_seconds, url_host

ISSUED_LABEL = f"{API_GROUP}/issued"
"""On every Secret the operator issued; its value is the purpose."""
REQUEST_ANNOTATION = f"{API_GROUP}/request"
SIGNED_BY_ANNOTATION = f"{API_GROUP}/signed-by"
NOT_AFTER_ANNOTATION = f"{API_GROUP}/not-after"
SHARD_BASE_CONTEXT = "shard-base"
"""The context kcp reads from ``--root-shard-kubeconfig-file`` (and the cleanup prefers)."""
CA_LIFETIME_SECONDS = 10 * 365 * 24 * 3600
"""The generated CA lives ten years and is not renewed by the operator (see the README)."""
TIME_FORMAT = "%Y-%m-%dT%H:%M:%SZ"


@dataclass(frozen=True)
class Names:
    """The Secrets of an installation whose root Shard is ``root``."""

    root: str

    @property
    def ca(self) -> str:
        return f"{self.root}-kcp-ca"

    @property
    def client_ca(self) -> str:
        return f"{self.root}-kcp-client-ca"

    @property
    def cache_kubeconfig(self) -> str:
        return f"{self.root}-kcp-cache-kubeconfig"

    @property
    def service_account_key(self) -> str:
        return f"{self.root}-kcp-service-account-key"

    @property
    def requestheader_ca(self) -> str:
        """The CA of the front-proxy's forwarding certificates (only those: a shard trusts
        the user named in the headers of a request signed by it)."""
        return f"{self.root}-kcp-requestheader-ca"

    @property
    def requestheader_client_ca(self) -> str:
        return f"{self.root}-kcp-requestheader-client-ca"

    @property
    def external_logical_cluster_admin(self) -> str:
        return f"{self.root}-kcp-external-logical-cluster-admin-kubeconfig"

    @property
    def shared(self) -> frozenset[str]:
        """Every Secret of the installation, as against those of one Shard."""
        return frozenset(
            {
                self.ca,
                self.client_ca,
                self.cache_kubeconfig,
                self.service_account_key,
                self.requestheader_ca,
                self.requestheader_client_ca,
                self.external_logical_cluster_admin,
            }
        )


class Purpose(Enum):
    """What an issued Secret holds; its label ``kcpshard.dev/issued`` says which."""

    CA = "ca"
    CLIENT_CA = "client-ca"
    SERVICE_ACCOUNT_KEY = "service-account-key"
    SERVING = "serving"
    CLIENT = "client"
    KUBECONFIG = "kubeconfig"


KEPT_FOREVER = frozenset({Purpose.CA, Purpose.SERVICE_ACCOUNT_KEY})
"""Never issued again by the operator: a new CA or service-account key would invalidate what
the old one signed (see the README on rotating them)."""


@dataclass(frozen=True)
class Owner:
    """The object an issued Secret belongs to (its owner reference)."""

    api_version: str
    kind: str
    name: str
    namespace: str
    uid: str = ""
    app: str = "kcp"
    """``app.kubernetes.io/name`` of the Secrets issued for it."""


@dataclass(frozen=True)
class Request:
    """One Secret to issue: what it holds, who owns it and how long its certificate lives."""

    secret: str
    purpose: Purpose
    owner: Owner
    common_name: str
    organization: str | None = None
    more_groups: tuple[str, ...] = ()
    """Groups after ``organization`` (a user's kubeconfig names several)."""
    dns_names: tuple[str, ...] = ()
    ip_addresses: tuple[str, ...] = ()
    server: str | None = None
    context: str | None = None
    lifetime_seconds: int = CA_LIFETIME_SECONDS
    renew_before_seconds: int = 0

    @property
    def organizations(self) -> tuple[str, ...]:
        """Every group the certificate names (its O attributes), in order."""
        first = (self.organization,) if self.organization else ()
        return (*first, *self.more_groups)

    @property
    def digest(self) -> str:
        """What identifies the content: a change of it (a new host name) issues again."""
        fields = [
            self.purpose.value,
            self.common_name,
            self.organization,
            list(self.dns_names),
            list(self.ip_addresses),
            self.server,
            self.context,
        ]
        if self.more_groups:
            fields.append(list(self.more_groups))
        return hashlib.sha256(json.dumps(fields).encode()).hexdigest()[:16]


def lifetimes(spec: PKISpec) -> tuple[int, int]:
    """Seconds a leaf certificate lives, and how long before its expiry it is issued again."""
    return (
        duration_seconds(spec.certificate_lifetime) or 0,
        duration_seconds(spec.renew_before) or 0,
    )


def service_hosts(service: str, namespace: str) -> list[str]:
    """The names a Service answers to in the cluster, and ``localhost`` (port-forwards)."""
    return [
        service,
        f"{service}.{namespace}",
        f"{service}.{namespace}.svc",
        f"{service}.{namespace}.svc.cluster.local",
        "localhost",
    ]


def serving_request(
    secret: str, owner: Owner, spec: PKISpec, service: str, urls: tuple[str | None, ...] = ()
) -> Request:
    """A serving certificate for ``service`` (its names, localhost, 127.0.0.1) and the hosts
    of ``urls``."""
    hosts = service_hosts(service, owner.namespace)
    ips = ["127.0.0.1"]
    for url in urls:
        host = url_host(url) if url else None
        if host is None:
            continue
        try:
            ipaddress.ip_address(host)
        except ValueError:
            hosts.append(host)
        else:
            ips.append(host)
    lifetime, renew = lifetimes(spec)
    return Request(
        secret=secret,
        purpose=Purpose.SERVING,
        owner=owner,
        common_name=service,
        dns_names=tuple(dict.fromkeys(hosts)),
        ip_addresses=tuple(dict.fromkeys(ips)),
        lifetime_seconds=lifetime,
        renew_before_seconds=renew,
    )


def client_request(
    secret: str,
    owner: Owner,
    spec: PKISpec,
    user: tuple[str, str | None],
    *,
    server: str | None = None,
    context: str | None = None,
) -> Request:
    """A client certificate of ``user`` (name, group): a kubeconfig for ``server`` with
    ``context``, or without a server a kubernetes.io/tls Secret."""
    lifetime, renew = lifetimes(spec)
    return Request(
        secret=secret,
        purpose=Purpose.KUBECONFIG if server else Purpose.CLIENT,
        owner=owner,
        common_name=user[0],
        organization=user[1],
        server=server,
        context=context,
        lifetime_seconds=lifetime,
        renew_before_seconds=renew,
    )


def _b64(text: str) -> str:
    return base64.b64encode(text.encode()).decode()


def kubeconfig_document(request: Request, ca_pem: str, certificate_pem: str, key_pem: str) -> str:
    """The kubeconfig of ``request`` (JSON, which every kubeconfig reader takes as YAML)."""
    context = request.context or SHARD_BASE_CONTEXT
    user = request.common_name
    document = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {
                "name": context,
                "cluster": {"server": request.server, "certificate-authority-data": _b64(ca_pem)},
            }
        ],
        "users": [
            {
                "name": user,
                "user": {
                    "client-certificate-data": _b64(certificate_pem),
                    "client-key-data": _b64(key_pem),
                },
            }
        ],
        "contexts": [{"name": context, "context": {"cluster": context, "user": user}}],
        "current-context": context,
    }
    return json.dumps(document, indent=2) + "\n"


def secret_object(
    request: Request,
    data: dict[str, str],
    secret_type: str,
    signer: str | None,
    not_after: datetime.datetime | None,
) -> JSON:
    """The issued Secret holding ``data`` (encoded here), owned by the request's owner."""
    owner = request.owner
    annotations = {REQUEST_ANNOTATION: request.digest}
    if not_after is not None:
        annotations[NOT_AFTER_ANNOTATION] = not_after.strftime(TIME_FORMAT)
    if signer is not None:
        annotations[SIGNED_BY_ANNOTATION] = signer
    meta: JSON = {
        "name": request.secret,
        "namespace": owner.namespace,
        "labels": {
            "app.kubernetes.io/name": owner.app,
            "app.kubernetes.io/instance": owner.name,
            "app.kubernetes.io/part-of": "kcp",
            "app.kubernetes.io/managed-by": FIELD_MANAGER,
            ISSUED_LABEL: request.purpose.value,
        },
        "annotations": annotations,
    }
    if owner.uid:
        meta["ownerReferences"] = [
            {
                "apiVersion": owner.api_version,
                "kind": owner.kind,
                "name": owner.name,
                "uid": owner.uid,
            }
        ]
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": meta,
        "type": secret_type,
        "data": {key: _b64(value) for key, value in data.items()},
    }


def certificates_status(secrets: list[JSON]) -> list[JSON]:
    """``status.certificates``: each issued Secret the Shard mounts or is reached with, and
    when its certificate expires (sorted by Secret)."""
    found = []
    for secret in secrets:
        meta = secret.get("metadata") or {}
        not_after = (meta.get("annotations") or {}).get(NOT_AFTER_ANNOTATION)
        if not_after:
            found.append({"secret": meta.get("name"), "notAfter": not_after})
    return sorted(found, key=lambda entry: str(entry["secret"]))


def cache_kubeconfig_secret(cache_server: str) -> str:
    """The kubeconfig issued for CacheServer ``cache_server``, which the shards naming it mount."""
    return f"{cache_server}-cache-kubeconfig"


ADMIN_GROUP = "system:masters"
"""The group kcp grants everything on a shard; the identity-cache cleanup needs it."""
