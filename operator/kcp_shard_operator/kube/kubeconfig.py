"""What a kubeconfig document holds and what of it is refused, read from the mapping the
``kubernetes`` library merged (its sections, the references a kubeconfig in a Secret may not
make, inline keys moved to private files, kubectl's impersonation headers), and the one error
every credential problem is reported as."""

from __future__ import annotations

import base64
import binascii
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any, cast
from urllib.parse import quote

import yaml
from kubernetes.config.config_exception import ConfigException

SUPPORTED_AUTH_PROVIDERS = ("oidc",)
"""kubectl itself dropped the gcp and azure auth-providers for their exec plugins."""
INLINE = (
    ("clusters", "cluster", "certificate-authority"),
    ("users", "user", "client-certificate"),
    ("users", "user", "client-key"),
)
"""The kubeconfig fields whose ``-data`` form the library writes to a file of its own."""
FILE_FIELDS = ("certificate-authority", "client-certificate", "client-key", "tokenFile")


class CredentialsError(Exception):
    """No usable credentials: the message says what is missing or not supported."""


def one_line(err: BaseException) -> str:
    return " ".join(str(err).split()) or type(err).__name__


def check_header(value: str | None, what: str) -> None:
    """Refuse a credential that cannot stand in an HTTP header, without quoting it: a line
    break would end the header (and could start another one), and HTTP clients refuse control
    and non-ASCII characters with an error that quotes the whole header."""
    if value is None:
        return
    if "\n" in value or "\r" in value:
        problem = "a line break"
    elif not all(char == "\t" or " " <= char <= "~" for char in value):
        problem = "a control or non-ASCII character"
    else:
        return
    raise CredentialsError(f"{what} cannot form an HTTP header: it holds {problem}")


def yaml_problem(err: yaml.YAMLError) -> str:
    # The parser's message quotes the offending text, which may be a token: position only.
    mark = getattr(err, "problem_mark", None)
    where = f" (line {mark.line + 1}, column {mark.column + 1})" if mark else ""
    return f"not valid YAML{where}"


def not_a_kubeconfig(err: BaseException) -> str:
    if isinstance(err, ConfigException):
        return one_line(err)
    return "not a kubeconfig (a mapping with clusters, contexts and users)"


def section_items(config: Mapping[str, Any], section: str) -> list[dict[str, Any]]:
    """A section's entries; the library's merger wraps each in a node holding ``value``."""
    entries = config.get(section) or []
    if not isinstance(entries, list):
        raise CredentialsError(f"{section} is not a list")
    found = [getattr(entry, "value", entry) for entry in entries]
    if not all(isinstance(entry, dict) for entry in found):
        raise CredentialsError(f"{section} holds an entry that is not a mapping")
    return cast(list[dict[str, Any]], found)


def section_names(config: Mapping[str, Any], section: str) -> list[str]:
    return [str(entry.get("name")) for entry in section_items(config, section)]


def named(config: Mapping[str, Any], section: str, name: str) -> dict[str, Any]:
    singular = section[:-1]
    for entry in section_items(config, section):
        if entry.get("name") == name:
            value = entry.get(singular) or {}
            if not isinstance(value, dict):
                raise CredentialsError(f"{singular} {name!r} is not a mapping")
            return cast(dict[str, Any], value)
    raise CredentialsError(f"{singular} {name!r} not found")


def refuse_references(config: Mapping[str, Any], context: str | None) -> None:
    if context not in section_names(config, "contexts"):
        return
    ctx = named(config, "contexts", str(context))
    user = named(config, "users", str(ctx["user"])) if ctx.get("user") else {}
    cluster = named(config, "clusters", str(ctx["cluster"])) if ctx.get("cluster") else {}
    for key in ("exec", "auth-provider"):
        if key in user:
            raise CredentialsError(
                f"context {context!r}: the user needs an {key} plugin, which a kubeconfig in a "
                "Secret may not run; use a token or a client certificate"
            )
    for key in FILE_FIELDS:
        if user.get(key) or cluster.get(key):
            inline = "token" if key == "tokenFile" else f"{key}-data"
            raise CredentialsError(
                f"context {context!r}: {key} names a file, which a kubeconfig in a Secret may "
                f"not read; use {inline}"
            )


def inline_to_files(config: dict[str, Any], folder: Path, context: str | None) -> dict[str, Any]:
    """``config`` with the inline certificates and key of ``context`` moved to files in
    ``folder``: the library would write them to files of its own, kept until the process ends."""
    if context not in section_names(config, "contexts"):
        return config
    ctx = named(config, "contexts", str(context))
    refs = {"clusters": ctx.get("cluster"), "users": ctx.get("user")}
    written = dict(config)
    for section, singular, key in INLINE:
        entries = section_items(written, section)
        for index, entry in enumerate(entries):
            body = entry.get(singular)
            if entry.get("name") != refs[section] or not isinstance(body, dict):
                continue
            if not body.get(f"{key}-data"):
                continue
            try:
                content = base64.b64decode(str(body[f"{key}-data"]), validate=True)
            except (binascii.Error, ValueError):
                raise CredentialsError(
                    f"context {context!r}: {key}-data is not valid base64"
                ) from None
            path = folder / key
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            with os.fdopen(fd, "wb") as handle:
                handle.write(content)
            fields = {name: value for name, value in body.items() if name != f"{key}-data"}
            entries[index] = {**entry, singular: {**fields, key: str(path)}}
        written[section] = entries
    return written


def refuse_unsupported(context: str, cluster: Mapping[str, Any], user: Mapping[str, Any]) -> None:
    if not cluster.get("server"):
        raise CredentialsError(f"context {context!r}: the cluster has no server")
    provider = user.get("auth-provider")
    if provider is not None:
        name = provider.get("name") if isinstance(provider, dict) else None
        if name not in SUPPORTED_AUTH_PROVIDERS:
            raise CredentialsError(
                f"context {context!r}: the auth-provider {name!r} is not supported (kubectl "
                "dropped it too); use its exec plugin (kubelogin, gke-gcloud-auth-plugin)"
            )


def impersonation(context: str, user: Mapping[str, Any]) -> tuple[tuple[str, str], ...]:
    """The ``Impersonate-*`` headers of the user's ``as``, ``as-uid``, ``as-groups`` and
    ``as-user-extra``, as kubectl sends them."""
    headers: list[tuple[str, str]] = []
    if user.get("as"):
        headers.append(("Impersonate-User", str(user["as"])))
    if user.get("as-uid"):
        headers.append(("Impersonate-Uid", str(user["as-uid"])))
    headers += [("Impersonate-Group", str(group)) for group in user.get("as-groups") or []]
    extra = user.get("as-user-extra") or {}
    for key, values in extra.items():
        for value in values if isinstance(values, list) else [values]:
            headers.append((f"Impersonate-Extra-{quote(str(key), safe='')}", str(value)))
    if headers and not user.get("as"):
        raise CredentialsError(
            f"context {context!r}: as-groups, as-uid or as-user-extra need a user to "
            "impersonate (as)"
        )
    for name, value in headers:
        check_header(value, f"context {context!r}: {name}")
    return tuple(headers)
