"""The PKI step of a pass: issue or renew what :func:`core.pki.requests` asks for, from the
metadata the watch keeps; a CA key is read only when something is signed."""

from __future__ import annotations

import datetime
from dataclasses import dataclass, field

from kcp_shard_operator.controller.context import Context, Logger
from kcp_shard_operator.controller.reads import read
from kcp_shard_operator.core.api.model import JSON
from kcp_shard_operator.core.frontproxy.spec import FrontProxy
from kcp_shard_operator.core.pki import issuance, renewal
from kcp_shard_operator.core.shard import pki
from kcp_shard_operator.core.shard.names import child_name
from kcp_shard_operator.core.shard.spec import Shard
from kcp_shard_operator.core.status.events import Event
from kcp_shard_operator.core.virtualworkspaces.spec import VirtualWorkspaceServer
from kcp_shard_operator.issuer import x509
from kcp_shard_operator.kube.client import APIError, RefusedError, error_message

CONFLICT = 409
CERTIFICATE_CONFLICT = "CertificateConflict"
INVALID_CA = "InvalidCA"
ISSUE_FAILED = "IssueFailed"
NOT_ISSUED = "KubeconfigNotIssued"
PAST = {renewal.Action.ISSUE: "issued", renewal.Action.RENEW: "renewed"}
REASONS = {renewal.Action.ISSUE: "CertificateIssued", renewal.Action.RENEW: "CertificateRenewed"}
PURPOSES = {
    issuance.Purpose.CA: "CA",
    issuance.Purpose.CLIENT_CA: "client CA bundle",
    issuance.Purpose.SERVICE_ACCOUNT_KEY: "service-account key",
    issuance.Purpose.SERVING: "serving certificate",
    issuance.Purpose.CLIENT: "client certificate",
    issuance.Purpose.KUBECONFIG: "kubeconfig",
}


Change = tuple[issuance.Request, renewal.Verdict, JSON]
"""A Secret issued or renewed: the request, why, and the Secret as written."""


@dataclass
class Issued:
    """What issuing did: what went wrong (reason, message), the Secrets it issued or renewed
    and ``status.certificates``."""

    problems: list[tuple[str, str]] = field(default_factory=list)
    changes: list[Change] = field(default_factory=list)
    certificates: list[JSON] = field(default_factory=list)
    stopped: bool = False
    """Issuing stopped before the end: the CA is not there or cannot sign, or a write failed."""

    @property
    def events(self) -> list[Event]:
        """One Event for what was issued and one for what was renewed, each naming every
        Secret with its expiry (and why it was renewed)."""
        return _events(self.changes)

    def add(self, other: Issued) -> None:
        """Fold in what issuing with another CA (or more with the same) did in the pass."""
        self.problems += other.problems
        self.changes += other.changes
        self.stopped = self.stopped or other.stopped
        self.certificates = sorted(
            [*self.certificates, *other.certificates], key=lambda entry: str(entry["secret"])
        )


@dataclass
class _Signer:
    """The CA of an installation: its Secret's metadata, and its key once loaded."""

    secret: str
    meta: JSON | None
    ca: x509.CA | None = None


def issue(
    ctx: Context,
    shard: Shard,
    root: Shard | None,
    logger: Logger,
    proxy: FrontProxy | None = None,
    virtual_workspaces: VirtualWorkspaceServer | None = None,
) -> tuple[Shard, Issued]:
    """Issue what ``shard`` leaves unset: the Shard as the rest of the pass renders it, and
    what issuing did. ``proxy`` is the FrontProxy of its installation (None: none),
    ``virtual_workspaces`` the server that runs its virtual workspaces (None: it does)."""
    release = ctx.settings.deprecating_release
    deployment = read(ctx, "apps/v1", "Deployment", shard.namespace, child_name(shard))
    key = pki.takes_service_account_key(shard, root, deployment)
    requests = pki.requests(
        shard,
        root,
        release,
        service_account_key=key,
        proxy=proxy,
        virtual_workspaces=virtual_workspaces,
    )
    trust = pki.trust_requests(shard, root, proxy)
    filled = pki.with_issued(
        shard, root, service_account_key=key, proxy=proxy, virtual_workspaces=virtual_workspaces
    )
    done = Issued([(NOT_ISSUED, why) for why in pki.not_issued(filled, root, release)])
    if not requests and not trust:
        return filled, done
    installation_root = pki.installation_root(shard, root)
    assert installation_root is not None, "requests are made only within an installation"
    names = issuance.Names(installation_root.name)
    ca_name = pki.ca_secret(installation_root)
    user_ca = installation_root.spec.pki.ca_secret_ref is not None
    where = f"spec.pki.caSecretRef of Shard {installation_root.name}" if user_ca else None
    # Passes over one installation issue its shared Secrets (the CA first) one at a time: the
    # second finds what the first created instead of racing it to a conflict. Once they are
    # issued, and for each Shard's own Secrets, the passes go on side by side.
    first = [request for request in requests if request.secret in names.shared]

    def shared_ones() -> Issued:
        issued = issue_requests(ctx, shard.namespace, ca_name, where, first, logger)
        if trust:
            issued.add(
                issue_requests(ctx, shard.namespace, names.requestheader_ca, None, trust, logger)
            )
        return issued

    if _settled(ctx, shard.namespace, ca_name, first) and _settled(
        ctx, shard.namespace, names.requestheader_ca, trust
    ):
        shared = shared_ones()
    else:
        with ctx.lock(shard.namespace, f"{installation_root.name}/pki"):
            shared = shared_ones()
    done.add(shared)
    own = [request for request in requests if request.secret not in names.shared]
    if own and not shared.stopped:
        done.add(issue_requests(ctx, shard.namespace, ca_name, where, own, logger))
    return filled, done


def issue_requests(
    ctx: Context,
    namespace: str,
    ca_name: str,
    user_ca: str | None,
    requests: list[issuance.Request],
    logger: Logger,
) -> Issued:
    """Issue or renew ``requests`` signed by the CA in Secret ``ca_name``; ``user_ca`` says
    where the user named that CA (None: the operator issues it, as the first request)."""
    done = Issued()
    signer = _Signer(ca_name, read(ctx, "v1", "Secret", namespace, ca_name))
    if user_ca is not None and signer.meta is None:
        done.problems.append(
            (INVALID_CA, f"Secret {ca_name} ({user_ca}) not found: nothing is issued")
        )
        done.stopped = True
        return done
    now = ctx.wall_clock()
    issued: list[JSON] = []
    changes: list[Change] = []
    for request in requests:
        live = read(ctx, "v1", "Secret", namespace, request.secret)
        signed_by = None if request.purpose in issuance.KEPT_FOREVER else _signer_id(signer)
        verdict = renewal.verdict(request, live, signed_by, now)
        if verdict.action is renewal.Action.CONFLICT:
            done.problems.append((CERTIFICATE_CONFLICT, verdict.why))
            if request.purpose is issuance.Purpose.CA:
                done.stopped = True
                break
            continue
        if verdict.action is renewal.Action.KEEP:
            issued.append(live or {})
            continue
        try:
            written = _write(ctx, request, live, signer, now)
        except x509.CAError as err:
            done.problems.append((INVALID_CA, f"{err}: nothing is issued"))
            done.stopped = True
            break
        except APIError as err:
            done.problems.append((ISSUE_FAILED, f"Secret {request.secret}: {error_message(err)}"))
            done.stopped = True
            break
        ctx.store.put("Secret", written)
        issued.append(written)
        if request.purpose is issuance.Purpose.CA:
            signer.meta = written
        changes.append((request, verdict, written))
        logger.info("%s Secret %s (%s)", PAST[verdict.action], request.secret, verdict.why)
    done.changes = changes
    done.certificates = issuance.certificates_status(issued)
    return done


def _settled(ctx: Context, namespace: str, ca_name: str, requests: list[issuance.Request]) -> bool:
    """Whether each of ``requests`` (signed by the CA in Secret ``ca_name``) is issued and
    kept as it is: nothing to write."""
    signer = _Signer(ca_name, read(ctx, "v1", "Secret", namespace, ca_name))
    now = ctx.wall_clock()
    for request in requests:
        live = read(ctx, "v1", "Secret", namespace, request.secret)
        signed_by = None if request.purpose in issuance.KEPT_FOREVER else _signer_id(signer)
        if renewal.verdict(request, live, signed_by, now).action is not renewal.Action.KEEP:
            return False
    return True


def _signer_id(signer: _Signer) -> str | None:
    return renewal.signer_id(signer.meta) if signer.meta is not None else None


def _ca(ctx: Context, namespace: str, signer: _Signer, now: datetime.datetime) -> x509.CA:
    """The CA that signs, read from its Secret once per version of that Secret."""
    where, version = f"{namespace}/{signer.secret}", _signer_id(signer)
    if signer.ca is None:
        cached = ctx.signers.get(where)
        if cached is not None and cached[0] == version:
            signer.ca = cached[1]
    if signer.ca is None:
        data = ctx.kube.secret_data(namespace, signer.secret) or {}
        signer.ca = x509.load_ca(signer.secret, data.get("tls.crt"), data.get("tls.key"), now)
    ctx.signers[where] = (version, signer.ca)
    return signer.ca


def _write(
    ctx: Context,
    request: issuance.Request,
    live: JSON | None,
    signer: _Signer,
    now: datetime.datetime,
) -> JSON:
    """Sign and write the Secret of ``request``: created when absent, else replaced at the
    resourceVersion the verdict was made on."""
    namespace = request.owner.namespace
    made_ca = None
    if request.purpose is issuance.Purpose.SERVICE_ACCOUNT_KEY:
        data = {"tls.key": x509.new_key()}
        body = issuance.secret_object(request, data, "Opaque", None, None)
    elif request.purpose is issuance.Purpose.CA:
        made_ca, made = x509.new_ca(request, now)
        data = {
            "tls.crt": made.certificate_pem,
            "tls.key": made.key_pem,
            "ca.crt": made.certificate_pem,
        }
        body = issuance.secret_object(request, data, "kubernetes.io/tls", None, made.not_after)
    else:
        body = _leaf(request, _ca(ctx, namespace, signer, now), _signer_id(signer), now)
    if live is not None:
        body["metadata"]["resourceVersion"] = (live.get("metadata") or {}).get("resourceVersion")
        written = ctx.kube.replace(body)
    else:
        try:
            written = ctx.kube.create(body)
        except RefusedError as err:
            if err.status != CONFLICT:
                raise
            # Another pass (over a Shard of the same installation) created it first: its
            # CA signs, read from the API when needed.
            found = ctx.kube.get("v1", "Secret", namespace, request.secret)
            if found is None:
                raise
            return found
    if made_ca is not None:
        signer.ca = made_ca
    return written


def _leaf(
    request: issuance.Request, ca: x509.CA, signed_by: str | None, now: datetime.datetime
) -> JSON:
    if request.purpose is issuance.Purpose.CLIENT_CA:
        data = {"ca.crt": ca.certificate_pem}
        return issuance.secret_object(
            request, data, "Opaque", signed_by, ca.certificate.not_valid_after_utc
        )
    made = x509.sign(ca, request, now)
    if request.purpose in (issuance.Purpose.SERVING, issuance.Purpose.CLIENT):
        data = {
            "tls.crt": made.certificate_pem,
            "tls.key": made.key_pem,
            "ca.crt": ca.certificate_pem,
        }
        return issuance.secret_object(request, data, "kubernetes.io/tls", signed_by, made.not_after)
    document = issuance.kubeconfig_document(
        request, ca.certificate_pem, made.certificate_pem, made.key_pem
    )
    return issuance.secret_object(
        request, {"kubeconfig": document}, "Opaque", signed_by, made.not_after
    )


def _events(changes: list[Change]) -> list[Event]:
    lines: dict[renewal.Action, list[str]] = {}
    for request, verdict, written in changes:
        not_after = ((written.get("metadata") or {}).get("annotations") or {}).get(
            issuance.NOT_AFTER_ANNOTATION, ""
        )
        why = f"{verdict.why}; " if verdict.action is renewal.Action.RENEW else ""
        lines.setdefault(verdict.action, []).append(
            f"{PURPOSES[request.purpose]} Secret {request.secret} ({why}valid until {not_after})"
        )
    return [
        Event("Normal", REASONS[action], f"{PAST[action]} " + ", ".join(found))
        for action, found in lines.items()
    ]
