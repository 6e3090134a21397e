"""Kubernetes credentials, loaded by the ``kubernetes`` library (its kubeconfig and in-cluster
loaders), for the operator's API calls, kopf's watches and the clients that reach kcp.

What kubectl does and the library does not is added here: the first ``current-context`` of
several files wins, the context's namespace, impersonation (``as``, ``as-groups``, ``as-uid``,
``as-user-extra``), and running an exec plugin again after a 401. What neither can use is
refused in one line. Messages never quote a token, a key or the server URL (it may carry a
password).
"""

from __future__ import annotations

import atexit
import datetime
import logging
import os
import shutil
import tempfile
import threading
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any, cast
from urllib.parse import urlsplit

import yaml
from kubernetes.client import Configuration
from kubernetes.client.rest import should_bypass_proxies
from kubernetes.config.config_exception import ConfigException
from kubernetes.config.incluster_config import InClusterConfigLoader
from kubernetes.config.kube_config import (
    ENV_KUBECONFIG_PATH_SEPARATOR,
    KubeConfigLoader,
    KubeConfigMerger,
)

from kcp_shard_operator.kube.kubeconfig import (
    CredentialsError,
    check_header,
    impersonation,
    inline_to_files,
    named,
    not_a_kubeconfig,
    one_line,
    refuse_references,
    refuse_unsupported,
    section_names,
    yaml_problem,
)

SERVICE_ACCOUNT_DIR = Path("/var/run/secrets/kubernetes.io/serviceaccount")
SOURCES = (
    "--kubeconfig, else $KUBECONFIG (its files merged), else in a pod its ServiceAccount, else "
    "~/.kube/config; --context picks a context"
)
"""Where :func:`load` finds the credentials, for the commands' help."""


class Credentials:
    """One API server and how to authenticate to it: the library's ``Configuration``, the
    context's namespace, impersonation headers, and how to renew the credentials."""

    def __init__(
        self,
        configuration: Configuration,
        renew: Callable[[], None],
        *,
        context: str | None = None,
        namespace: str | None = None,
        impersonation: tuple[tuple[str, str], ...] = (),
        expiry: Callable[[], datetime.datetime | None] = lambda: None,
        files: Path | None = None,
    ) -> None:
        self.configuration = configuration
        self.context = context
        self.namespace = namespace
        self.impersonation = impersonation
        self._renew = renew
        self._expiry = expiry
        self._files = files
        self._lock = threading.Lock()
        self.generation = 0
        """How often the credentials were renewed: a caller that saw a 401 with generation
        ``n`` renews them only when nobody has since."""

    def __repr__(self) -> str:
        return f"Credentials(context={self.context!r})"

    @property
    def server(self) -> str:
        return str(self.configuration.host)

    @property
    def tls_server_name(self) -> str | None:
        name = self.configuration.tls_server_name
        return str(name) if name else None

    @property
    def proxy(self) -> str | None:
        """The proxy to the server: the cluster's ``proxy-url``, else ``$HTTPS_PROXY`` (or
        ``$HTTP_PROXY``) unless ``$NO_PROXY`` names the server, as the library's pool decides."""
        configuration = self.configuration
        proxy = configuration.proxy
        if proxy and not should_bypass_proxies(self.server, configuration.no_proxy or ""):
            return str(proxy)
        return None

    def authorization(self) -> str | None:
        """The ``Authorization`` header's value (an expired exec credential is renewed first)."""
        value = self.configuration.get_api_key_with_prefix("BearerToken")
        return str(value) if value else None

    def expiry(self) -> datetime.datetime | None:
        """When an exec plugin's credential expires, if it said."""
        return self._expiry()

    def renew(self, seen: int) -> None:
        """Run the exec plugin again, or read the token again, after a 401 answered a request
        made with generation ``seen`` (unless another caller did since); raises
        ``CredentialsError`` in one line when that fails."""
        with self._lock:
            if self.generation == seen:
                try:
                    with _plugin_errors() as errors:
                        self._renew()
                except (ConfigException, OSError) as err:
                    raise CredentialsError(f"renewing the credentials: {one_line(err)}") from None
                if errors:
                    raise CredentialsError(f"renewing the credentials: {errors[-1]}")
                check_header(self.authorization(), "the renewed token")
                self.generation += 1

    def close(self) -> None:
        """Remove the files this client's certificates and key were written to."""
        if self._files is not None:
            shutil.rmtree(self._files, ignore_errors=True)
            self._files = None


@contextmanager
def _plugin_errors() -> Iterator[list[str]]:
    """The errors the library logs instead of raising (a failed exec plugin), collected so
    that the caller reports them in its own line."""
    errors: list[str] = []

    class Collect(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            if record.levelno >= logging.ERROR and record.pathname.endswith("kube_config.py"):
                errors.append(" ".join(record.getMessage().split()))

    handler = Collect()
    root = logging.getLogger()
    root.addHandler(handler)
    try:
        yield errors
    finally:
        root.removeHandler(handler)


def load(
    kubeconfig: str | None = None,
    context: str | None = None,
    environ: Mapping[str, str] | None = None,
) -> Credentials:
    """The credentials kubectl would use: ``kubeconfig`` (``--kubeconfig``), else the files of
    ``$KUBECONFIG``, else in a pod its ServiceAccount, else ``~/.kube/config``."""
    env = os.environ if environ is None else environ
    if kubeconfig:
        if not Path(kubeconfig).is_file():
            raise CredentialsError(f"--kubeconfig {kubeconfig}: no such file")
        return from_files([kubeconfig], context)
    paths = [path for path in env.get("KUBECONFIG", "").split(os.pathsep) if path]
    if paths:
        return from_files(paths, context)
    if env.get("KUBERNETES_SERVICE_HOST") and (SERVICE_ACCOUNT_DIR / "token").exists():
        if context:
            raise CredentialsError(
                f"--context {context}: in a pod without $KUBECONFIG the ServiceAccount is used, "
                "which has no contexts"
            )
        return in_cluster(env)
    return from_files([str(Path.home() / ".kube" / "config")], context)


def in_cluster(environ: Mapping[str, str]) -> Credentials:
    """The pod's ServiceAccount: its token is read again every minute (the kubelet rotates it)."""
    loader = InClusterConfigLoader(
        token_filename=str(SERVICE_ACCOUNT_DIR / "token"),
        cert_filename=str(SERVICE_ACCOUNT_DIR / "ca.crt"),
        environ=environ,
    )
    configuration = Configuration()
    try:
        loader.load_and_set(configuration)
    except (ConfigException, OSError) as err:
        raise CredentialsError(f"the pod's ServiceAccount: {one_line(err)}") from None
    found = Credentials(
        configuration, lambda: loader.load_and_set(configuration), namespace=_pod_namespace()
    )
    check_header(found.authorization(), "the ServiceAccount token")
    return found


def _pod_namespace() -> str | None:
    try:
        return (SERVICE_ACCOUNT_DIR / "namespace").read_text().strip() or None
    except OSError:
        return None


def from_files(paths: list[str], context: str | None = None) -> Credentials:
    """The context ``context`` (else the first ``current-context``) of the kubeconfig files
    merged as kubectl merges ``$KUBECONFIG``: the first value of each name wins, and relative
    paths resolve against the folder of the file that holds them."""
    existing = [path for path in paths if Path(path).expanduser().is_file()]
    if not existing:
        raise CredentialsError(
            f"no credentials: not in a pod and no kubeconfig at {os.pathsep.join(paths)}"
        )
    try:
        merger = KubeConfigMerger(ENV_KUBECONFIG_PATH_SEPARATOR.join(existing))
    except yaml.YAMLError as err:
        raise CredentialsError(f"kubeconfig: {yaml_problem(err)}") from None
    except OSError as err:
        raise CredentialsError(f"kubeconfig: cannot be read: {one_line(err)}") from None
    except (ConfigException, AttributeError, TypeError) as err:
        raise CredentialsError(f"kubeconfig: {not_a_kubeconfig(err)}") from None
    if context is None:
        currents = [
            cast(dict[str, Any], c).get("current-context") for c in merger.config_files.values()
        ]
        context = next((str(c) for c in currents if c), None)
    return _load(merger.config, context, what="kubeconfig", base_path=None)


def from_kubeconfig(
    raw: bytes,
    context: str | None = None,
    *,
    preferred: str | None = None,
    base_dir: Path | None = None,
    inline_only: bool = False,
) -> Credentials:
    """The credentials of one kubeconfig's bytes (YAML or JSON): ``context``, else
    ``preferred`` when present, else the current context.

    Its certificates and key are written to a private folder (0700, files 0600) under the
    temporary directory, removed by :meth:`Credentials.close`: in a pod of the chart that
    directory is a memory-backed volume. ``inline_only`` (a kubeconfig from a Secret) refuses
    files and plugins: the Secret's author would choose what the operator reads or runs.
    """
    try:
        config = yaml.safe_load(raw)
    except yaml.YAMLError as err:
        raise CredentialsError(yaml_problem(err)) from None
    if not isinstance(config, dict):
        raise CredentialsError("not a kubeconfig mapping")
    names = section_names(config, "contexts")
    if context is None:
        context = preferred if preferred in names else config.get("current-context") or None
    if inline_only:
        refuse_references(config, context)
    folder = Path(tempfile.mkdtemp(prefix="client-", dir=_key_root()))
    try:
        written = inline_to_files(config, folder, context)
        return _load(written, context, what="", base_path=str(base_dir or ""), files=folder)
    except BaseException:
        shutil.rmtree(folder, ignore_errors=True)
        raise


_KEY_ROOT: Path | None = None
_KEY_ROOT_LOCK = threading.Lock()


def _key_root() -> Path:
    """The process's private folder for certificates and keys (0700), removed at exit."""
    global _KEY_ROOT
    with _KEY_ROOT_LOCK:
        if _KEY_ROOT is None or not _KEY_ROOT.is_dir():
            _KEY_ROOT = Path(tempfile.mkdtemp(prefix="kcp-shard-operator-"))
            atexit.register(shutil.rmtree, _KEY_ROOT, True)
        return _KEY_ROOT


def _load(
    config: Any,
    context: str | None,
    *,
    what: str,
    base_path: str | None,
    files: Path | None = None,
) -> Credentials:
    """``base_path``: where relative paths start (None: the folder of each merged file).
    Errors start with ``what`` when given."""
    try:
        return _load_context(config, context, base_path=base_path, files=files)
    except CredentialsError as err:
        if what:
            raise CredentialsError(f"{what}: {err}") from None
        raise


def _load_context(
    config: Any, context: str | None, *, base_path: str | None, files: Path | None
) -> Credentials:
    plain = getattr(config, "value", config)
    names = section_names(plain, "contexts")
    if not context:
        raise CredentialsError("no context given (--context) and no current-context")
    if context not in names:
        raise CredentialsError(
            f"context {context!r} not found (have: {', '.join(names) or 'none'})"
        )
    try:
        ctx = named(plain, "contexts", context)
        cluster = named(plain, "clusters", str(ctx.get("cluster", "")))
        user = named(plain, "users", str(ctx["user"])) if ctx.get("user") else {}
    except CredentialsError as err:
        raise CredentialsError(f"context {context!r}: {err}") from None
    refuse_unsupported(context, cluster, user)
    configuration = Configuration()
    try:
        loader = KubeConfigLoader(
            config_dict=config,
            active_context=context,
            config_base_path=base_path,
            config_persister=None,
        )
        with _plugin_errors() as errors:
            loader.load_and_set(configuration)
    except (ConfigException, OSError, ValueError, TypeError, KeyError, AttributeError) as err:
        raise CredentialsError(f"context {context!r}: {one_line(err)}") from None
    has_client_certificate = bool(configuration.cert_file)
    if "exec" in user and not (configuration.api_key or has_client_certificate):
        command = user["exec"].get("command") if isinstance(user["exec"], dict) else None
        detail = errors[-1] if errors else "its output holds no token or client certificate"
        raise CredentialsError(f"context {context!r}: exec plugin {command!r}: {detail}")
    if has_client_certificate != bool(configuration.key_file):
        raise CredentialsError(f"context {context!r}: a client certificate needs its key")
    scheme = urlsplit(str(configuration.host)).scheme
    if scheme not in ("https", "http"):
        raise CredentialsError(f"context {context!r}: the server is not an http(s) URL")
    proxy_scheme = urlsplit(str(configuration.proxy or "")).scheme
    if proxy_scheme not in ("", "http", "https"):
        raise CredentialsError(
            f"context {context!r}: a {proxy_scheme} proxy is not supported; use an http(s) proxy"
        )
    found = Credentials(
        configuration,
        lambda: loader.load_and_set(configuration),
        context=context,
        namespace=str(ctx["namespace"]) if ctx.get("namespace") else None,
        impersonation=impersonation(context, user),
        expiry=lambda: cast(datetime.datetime | None, loader.__dict__.get("expiry")),
        files=files,
    )
    token = configuration.api_key.get("BearerToken")
    check_header(str(token) if token else None, f"context {context!r}: the user's token")
    return found
