"""``kcp-shard-operator kubeconfig``: print the admin kubeconfig of a Shard's kcp, or the users'
admin kubeconfig of a FrontProxy.

For a Shard the Secret is ``spec.adminKubeconfigSecretRef`` when set, else the one the operator
issues (``<shard>-kcp-admin-kubeconfig``); for a FrontProxy the issued
``<name>-front-proxy-admin-kubeconfig``. Errors are one line on stderr; no message quotes the
kubeconfig, which holds a private key.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import Any

import yaml

from kcp_shard_operator.cli.options import add_cluster_options, cluster_credentials
from kcp_shard_operator.constants import (
    FRONT_PROXY_API_VERSION,
    FRONT_PROXY_KIND,
    SHARD_API_VERSION,
    SHARD_KIND,
)
from kcp_shard_operator.core.api import model
from kcp_shard_operator.core.api.model import JSON, SpecError
from kcp_shard_operator.core.api.refs import KUBECONFIG_KEY, SecretKeyRef
from kcp_shard_operator.core.frontproxy import names as frontproxy_names
from kcp_shard_operator.core.frontproxy.spec import parse_front_proxy
from kcp_shard_operator.core.shard.names import admin_kubeconfig_secret, issues_client_certificates
from kcp_shard_operator.core.shard.spec import Shard, ShardSpec
from kcp_shard_operator.identitycache.target import server_url
from kcp_shard_operator.kube import credentials
from kcp_shard_operator.kube.client import APIError, Kube, error_message
from kcp_shard_operator.kube.kubeconfig import CredentialsError

DEFAULT_NAMESPACE = "default"
"""The namespace when neither -n nor the context names one, as for kubectl."""


def register(commands: Any) -> None:
    parser = commands.add_parser(
        "kubeconfig",
        help="print the admin kubeconfig of a Shard or FrontProxy",
        description=(
            "Print the admin kubeconfig (system:masters) of a Shard's kcp: the Secret of "
            "spec.adminKubeconfigSecretRef, else the one the operator issued. With "
            "--front-proxy, the users' admin kubeconfig (system:kcp:admin, every workspace) "
            "the operator issued for a FrontProxy."
        ),
        epilog=f"""reads:
  the cluster ({credentials.SOURCES}): gets the Shard (or FrontProxy) NAME and the Secret \
holding the kubeconfig
writes:
  the kubeconfig on stdout, or in the -o FILE; nothing in the cluster
exit codes:
  0  printed
  1  not found or unusable, in one line on stderr that never quotes the kubeconfig""",
    )
    parser.add_argument("shard", metavar="NAME", help="name of the Shard (or FrontProxy)")
    parser.add_argument(
        "--front-proxy",
        action="store_true",
        help="NAME is a FrontProxy: its issued admin kubeconfig, for kcp through the front-proxy",
    )
    parser.add_argument(
        "-n",
        "--namespace",
        default=None,
        help="namespace of the Shard or FrontProxy (default: the context's namespace, else "
        f"{DEFAULT_NAMESPACE})",
    )
    parser.add_argument(
        "--server",
        metavar="URL",
        default=None,
        help="replace the server of every cluster, e.g. https://localhost:6443 after "
        "kubectl port-forward svc/<shard>-kcp 6443 (the issued certificate covers localhost)",
    )
    parser.add_argument(
        "-o",
        "--output",
        metavar="FILE",
        type=Path,
        default=None,
        help="write to FILE, readable by its owner only (mode 0600; default: stdout)",
    )
    add_cluster_options(parser)
    parser.set_defaults(handler=run)


def _shard(obj: JSON, namespace: str, name: str) -> Shard:
    try:
        spec = model.parse(ShardSpec, obj.get("spec"), "spec")
    except SpecError as err:
        raise SystemExit(f"error: Shard {namespace}/{name}: {err}") from None
    return Shard(name=name, namespace=namespace, spec=spec)


def _not_issued(shard: Shard) -> str:
    """Why the issued admin kubeconfig of ``shard`` may be missing."""
    if not shard.spec.pki.issue:
        return "spec.pki.issue is false, so the operator issues no kubeconfig"
    if not issues_client_certificates(shard):
        return (
            "the Shard's serving certificate or client CA is the user's own, so the operator "
            "issues no kubeconfig; set spec.adminKubeconfigSecretRef"
        )
    return "the operator may not have issued it yet"


def _read(kube: Kube, namespace: str, name: str) -> tuple[str, bytes]:
    """The kubeconfig the Shard ``namespace/name`` is reached with, and where it is kept."""
    obj = kube.get(SHARD_API_VERSION, SHARD_KIND, namespace, name)
    if obj is None:
        raise SystemExit(f"error: Shard {namespace}/{name} not found")
    shard = _shard(obj, namespace, name)
    ref = shard.spec.admin_kubeconfig_secret_ref
    secret = ref or SecretKeyRef(admin_kubeconfig_secret(shard))
    where = f"Secret {namespace}/{secret.name}"
    why = "named by spec.adminKubeconfigSecretRef" if ref else _not_issued(shard)
    data = kube.secret_data(namespace, secret.name)
    if data is None:
        raise SystemExit(f"error: {where} not found: {why}")
    value = data.get(secret.key)
    if value is None:
        raise SystemExit(f"error: {where} has no key {secret.key!r}: {why}")
    return f"{where} key {secret.key!r}", value


def _read_front_proxy(kube: Kube, namespace: str, name: str) -> tuple[str, bytes]:
    """The users' admin kubeconfig of the FrontProxy ``namespace/name``, and where it is."""
    obj = kube.get(FRONT_PROXY_API_VERSION, FRONT_PROXY_KIND, namespace, name)
    if obj is None:
        raise SystemExit(f"error: FrontProxy {namespace}/{name} not found")
    try:
        proxy = parse_front_proxy(obj)
    except SpecError as err:
        raise SystemExit(f"error: FrontProxy {namespace}/{name}: {err}") from None
    if not proxy.spec.pki.issue:
        raise SystemExit(
            f"error: FrontProxy {namespace}/{name}: spec.pki.issue is false, so the operator "
            "issues no kubeconfig"
        )
    where = f"Secret {namespace}/{frontproxy_names.admin_kubeconfig_secret(proxy)}"
    value = (
        kube.secret_data(namespace, frontproxy_names.admin_kubeconfig_secret(proxy)) or {}
    ).get(KUBECONFIG_KEY)
    if value is None:
        raise SystemExit(
            f"error: {where} not found: the operator issues it once the root shard is Ready"
        )
    return f"{where} key {KUBECONFIG_KEY!r}", value


def _kubeconfig(where: str, raw: bytes, server: str | None) -> dict[str, Any]:
    """``raw`` parsed, with ``server`` in every cluster when given."""
    try:
        config = yaml.safe_load(raw.decode("utf-8"))
    except (UnicodeDecodeError, yaml.YAMLError):
        raise SystemExit(f"error: {where}: neither JSON nor YAML") from None
    if not isinstance(config, dict):
        raise SystemExit(f"error: {where}: not a kubeconfig mapping")
    clusters = config.get("clusters")
    clusters = [] if clusters is None else clusters
    if not isinstance(clusters, list) or not all(
        isinstance(item, dict) and isinstance(item.get("cluster"), dict) for item in clusters
    ):
        raise SystemExit(f"error: {where}: clusters is not a list of named clusters")
    if server is not None:
        for item in clusters:
            item["cluster"]["server"] = server
    return config


def _write(path: Path, text: str) -> None:
    """``text`` in ``path``, readable by its owner only."""
    try:
        fd = os.open(path, os.O_CREAT | os.O_WRONLY | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w", encoding="utf-8") as file:
            os.fchmod(fd, 0o600)
            file.write(text)
    except OSError as err:
        raise SystemExit(f"error: cannot write {path}: {err.strerror}") from None


def run(args: argparse.Namespace) -> int:
    try:
        server = None if args.server is None else server_url(args.server)
    except CredentialsError as err:
        raise SystemExit(f"error: --server: {err}") from None
    try:
        cluster = cluster_credentials(args)
        namespace = args.namespace or cluster.namespace or DEFAULT_NAMESPACE
        read = _read_front_proxy if args.front_proxy else _read
        where, raw = read(Kube(cluster), namespace, args.shard)
    except CredentialsError as err:
        raise SystemExit(f"error: {err}") from None
    except APIError as err:
        raise SystemExit(f"error: {error_message(err)}") from None
    text = yaml.safe_dump(_kubeconfig(where, raw, server), sort_keys=False)
    if args.output is None:
        sys.stdout.write(text)
    else:
        _write(args.output, text)
    return 0
