"""``kcp-shard-operator run``: start the kopf operator."""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import secrets
from collections.abc import Awaitable, Callable
from typing import Any

import aiohttp
import kopf
from multidict import CIMultiDict
from prometheus_client import start_http_server

from kcp_shard_operator.cli.arenas import bound_malloc_arenas
from kcp_shard_operator.cli.options import (
    add_cluster_options,
    add_deprecating_release_option,
    cluster_credentials,
    deprecating_release,
)
from kcp_shard_operator.constants import (
    CLEANUP_ENV,
    KCP_CHECKS_ENV,
    LOG_FORMAT_ENV,
    LOG_LEVEL_ENV,
)
from kcp_shard_operator.controller import handlers
from kcp_shard_operator.controller.context import PEERING_LIFETIME_SECONDS, Context, Settings
from kcp_shard_operator.controller.metered import MeteredKube
from kcp_shard_operator.controller.metrics import Metrics
from kcp_shard_operator.core.kcp.versions import InvalidVersionError
from kcp_shard_operator.kube import credentials
from kcp_shard_operator.kube.client import Kube, user_agent
from kcp_shard_operator.kube.credentials import Credentials
from kcp_shard_operator.kube.kubeconfig import CredentialsError

LOG_FORMATS = {
    "text": kopf.LogFormat.PLAIN,
    "full": kopf.LogFormat.FULL,
    "json": kopf.LogFormat.JSON,
}


METRICS_PORT = 9090
WORKERS = min(32, (os.cpu_count() or 1) + 4)
"""Threads running the handlers (kopf's executor; Python's default size, made explicit): the
operator's connection pool holds as many connections."""

CHATTY_LOGGERS = {"urllib3": logging.INFO, "aiohttp.access": logging.WARNING}
"""Loggers whose lines below these levels are for debugging only: urllib3's line per request
(its warnings stay), aiohttp's access line per ``/healthz`` probe (every 20 s in a pod)."""


def configure_logging(level: str, log_format: str) -> None:
    """kopf's logging at ``level``; the libraries' request and probe lines only at debug."""
    debug = level == "debug"
    kopf.configure(
        debug=debug,
        verbose=level in ("debug", "info"),
        quiet=level == "error",
        log_format=LOG_FORMATS[log_format],
    )
    for name, quiet_below in CHATTY_LOGGERS.items():
        logging.getLogger(name).setLevel(logging.DEBUG if debug else quiet_below)


def _env_bool(name: str, default: bool) -> bool:
    value = os.environ.get(name, "").strip().lower()
    if not value:
        return default
    if value in ("1", "true", "yes", "on"):
        return True
    if value in ("0", "false", "no", "off"):
        return False
    raise SystemExit(f"error: {name}={value!r} is not a boolean (true/false)")


def kopf_login(cluster: Credentials) -> Callable[..., Awaitable[kopf.AiohttpSession]]:
    """kopf's login: a session with the credentials the operator's own calls use (the
    library's ``Configuration``: server, CA, client certificate, token, proxy), the
    impersonation headers and the operator's ``User-Agent``. kopf logs in again after a 401 and
    when an exec plugin's credential expires: the credentials are renewed then."""
    logins = 0

    async def login(**_: Any) -> kopf.AiohttpSession:
        nonlocal logins
        if logins:
            await asyncio.to_thread(cluster.renew, cluster.generation)
        logins += 1
        configuration = cluster.configuration
        tls = kopf.ConnectionInfo(
            server=cluster.server,
            ca_path=configuration.ssl_ca_cert,
            insecure=not configuration.verify_ssl,
            certificate_path=configuration.cert_file,
            private_key_path=configuration.key_file,
        ).as_ssl_context()
        headers: CIMultiDict[str] = CIMultiDict({"User-Agent": user_agent()})
        authorization = await asyncio.to_thread(cluster.authorization)
        if authorization:
            headers["Authorization"] = authorization
        for name, value in cluster.impersonation:
            headers.add(name, value)
        session = aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(limit=0, ssl=tls), headers=headers, proxy=cluster.proxy
        )
        return kopf.AiohttpSession(
            server=cluster.server,
            aiohttp_session=session,
            default_namespace=cluster.namespace,
            expiration=cluster.expiry(),
        )

    return login


def register(commands: Any) -> None:
    parser = commands.add_parser(
        "run",
        help="run the operator",
        description="Reconcile Shards, CacheServers and FrontProxies into kcp Deployments and "
        "what they need, and report their status, until stopped. Without -n it watches every "
        "namespace.",
        epilog=f"""reads:
  the cluster ({credentials.SOURCES}; the context's namespace does not narrow what is \
watched): watches Shards, CacheServers, FrontProxies and \
Secrets, and the Deployments, Services, PodDisruptionBudgets, PersistentVolumeClaims, \
ConfigMaps and Pods it manages, in every namespace (-A, or no -n) or in each -n namespace
  with --kcp-checks, each kcp shard, through its admin kubeconfig
writes:
  applies (server-side) the Deployments, Services, PodDisruptionBudgets, \
PersistentVolumeClaims and ConfigMaps of those objects; may replace the first three, and delete \
a Service or PodDisruptionBudget (to recreate it, or when no longer needed)
  creates and updates the Secrets it issues (spec.pki); no other Secret
  patches the status of Shards, CacheServers and FrontProxies; creates Events; \
patches kopf's peering objects (not with --standalone)
  with --identity-cache-cleanup and --kcp-checks, in kcp: deletes the stale \
apiexport-identity-cache ConfigMap of upgraded non-root shards
  in the backup sidecar of Shards with spec.backup (pods/exec): etcd snapshots onto the claim \
spec.backup.claimRef names or uploaded to the bucket of spec.backup.s3 (with keys the sidecar \
mounts), and the removal of those retention lets go
  serves /healthz on --liveness-port and /metrics on --metrics-port; logs on stderr
exit codes:
  0  stopped
  1  bad settings or no credentials, in one line on stderr""",
    )
    scope = parser.add_mutually_exclusive_group()
    scope.add_argument(
        "-n",
        "--namespace",
        action="append",
        default=[],
        help="watch this namespace only (repeatable; without -n: every namespace)",
    )
    scope.add_argument(
        "-A",
        "--all-namespaces",
        action="store_true",
        help="watch every namespace, as without -n",
    )
    parser.add_argument(
        "--liveness-port",
        type=int,
        default=8080,
        help="port of the liveness probe at /healthz (default: %(default)s)",
    )
    parser.add_argument(
        "--metrics-port",
        type=int,
        default=METRICS_PORT,
        help="port of the Prometheus metrics at /metrics; 0 turns them off (default: %(default)s)",
    )
    peering = parser.add_mutually_exclusive_group()
    peering.add_argument(
        "--standalone", action="store_true", help="do not coordinate with other replicas"
    )
    peering.add_argument(
        "--peering",
        default="kcp-shard-operator",
        help="kopf peering name the replicas share (default: %(default)s)",
    )
    parser.add_argument(
        "--peering-priority",
        type=int,
        default=None,
        help="kopf peering priority: the live replica with the highest one reconciles, the others "
        "pause (default: random, as kopf pauses all replicas of equal priority)",
    )
    parser.add_argument(
        "--peering-lifetime",
        type=int,
        default=PEERING_LIFETIME_SECONDS,
        help="seconds a replica's peering record stays valid without a keep-alive: another "
        "replica takes over at most this long after the active one crashed (kopf's default is "
        "60; default: %(default)s, at least 10)",
    )
    parser.add_argument(
        "--identity-cache-cleanup",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="delete the stale apiexport-identity-cache ConfigMap of upgraded non-root shards "
        f"(default: ${CLEANUP_ENV}, else on)",
    )
    parser.add_argument(
        "--kcp-checks",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="ask kcp through the admin kubeconfigs: the health probe and the identity-cache "
        "cleanup; off only where pods run no kcp, as on kwok (default: "
        f"${KCP_CHECKS_ENV}, else on)",
    )
    parser.add_argument(
        "--log-level",
        default=os.environ.get(LOG_LEVEL_ENV, "info"),
        choices=["debug", "info", "warning", "error"],
        help=f"the least level logged (default: ${LOG_LEVEL_ENV}, else info)",
    )
    parser.add_argument(
        "--log-format",
        default=os.environ.get(LOG_FORMAT_ENV, "text"),
        choices=sorted(LOG_FORMATS),
        help="text: plain lines; full: with time, logger and level; json: one JSON object a "
        f"line (default: ${LOG_FORMAT_ENV}, else text)",
    )
    add_deprecating_release_option(parser)
    add_cluster_options(parser)
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    cleanup: bool | None = args.identity_cache_cleanup
    try:
        release = deprecating_release(args)
    except InvalidVersionError as err:
        raise SystemExit(f"error: --root-shard-flag-removed-in: {err}") from err
    if not 0 <= args.metrics_port <= 65535 or args.metrics_port == args.liveness_port:
        raise SystemExit(
            f"error: --metrics-port {args.metrics_port} must be 0 (off) or a port other than "
            "--liveness-port"
        )
    if args.peering_lifetime < 10:
        raise SystemExit("error: --peering-lifetime must be at least 10 seconds")
    settings = Settings(
        deprecating_release=release,
        peering_lifetime=args.peering_lifetime,
        identity_cache_cleanup=_env_bool(CLEANUP_ENV, True) if cleanup is None else cleanup,
        kcp_checks=_env_bool(KCP_CHECKS_ENV, True) if args.kcp_checks is None else args.kcp_checks,
    )
    configure_logging(args.log_level, args.log_format)
    logging.getLogger("kcp_shard_operator").info(
        "starting: deprecating kcp release %s, identity-cache cleanup %s, kcp checks %s",
        settings.deprecating_release,
        "on" if settings.identity_cache_cleanup else "off",
        "on" if settings.kcp_checks else "off",
    )
    try:
        cluster = cluster_credentials(args)
    except CredentialsError as err:
        raise SystemExit(f"error: {err}") from err
    if cluster.tls_server_name:
        raise SystemExit(
            f"error: context {cluster.context!r}: tls-server-name is not supported by run (kopf's "
            "watches cannot send it); use a server URL whose host the certificate names"
        )
    bound_malloc_arenas()
    registry = kopf.OperatorRegistry()
    handlers.register(registry)
    kopf.on.login(registry=registry, id="login")(kopf_login(cluster))
    metrics = Metrics()
    kube = MeteredKube(Kube(cluster, pool_size=WORKERS), metrics)
    context = Context(settings=settings, kube=kube, metrics=metrics)
    operator_settings = kopf.OperatorSettings()
    operator_settings.execution.max_workers = WORKERS
    if args.metrics_port:
        try:
            start_http_server(args.metrics_port, registry=metrics.registry)
        except OSError as err:
            raise SystemExit(f"error: --metrics-port {args.metrics_port}: {err}") from err
    kopf.run(
        registry=registry,
        settings=operator_settings,
        standalone=args.standalone,
        peering_name=None if args.standalone else args.peering,
        priority=(
            args.peering_priority
            if args.peering_priority is not None
            else secrets.randbelow(2**31 - 1) + 1
        ),
        clusterwide=args.all_namespaces or not args.namespace,
        namespaces=args.namespace,
        liveness_endpoint=f"http://0.0.0.0:{args.liveness_port}/healthz",
        memo=kopf.Memo(context=context),
    )
    return 0
