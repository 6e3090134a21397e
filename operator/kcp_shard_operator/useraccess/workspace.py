"""Requests into one workspace of kcp for a Kubeconfig, through its target (a front-proxy's
Service or a shard's base URL) with the target's admin kubeconfig: is the workspace there,
make the ClusterRoleBindings the spec asks for, remove those it no longer asks for.

Nothing here raises for what kcp answers: every refusal comes back as a
:class:`~kcp_shard_operator.core.kubeconfig.access.Problem`; an unreachable target too.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol

from kcp_shard_operator.core.api.model import JSON
from kcp_shard_operator.core.kubeconfig.access import (
    Problem,
    Target,
    answer_problem,
    binding_entry,
    bindings,
    bindings_url,
    fits,
    made_by,
    stale,
    workspace_lookup,
    workspace_problem,
)
from kcp_shard_operator.core.kubeconfig.spec import Kubeconfig
from kcp_shard_operator.identitycache.client import CLIENTS, ShardClient
from kcp_shard_operator.identitycache.policy import Response
from kcp_shard_operator.kube.client import UnreachableError
from kcp_shard_operator.kube.kubeconfig import CredentialsError

TIMEOUT = 10.0
GONE = (403, 404)
"""What a binding's GET answers when it, or its workspace, is gone (through a front-proxy,
a workspace that does not exist is forbidden)."""


@dataclass
class Bound:
    """What a pass did to the bindings: ``status.bindings`` after it, and what failed."""

    made: list[JSON] = field(default_factory=list)
    problems: list[Problem] = field(default_factory=list)


class WorkspaceCalls(Protocol):
    """What a pass over a Kubeconfig asks through its target (a unit test's fake too)."""

    def check(self, path: str) -> Problem | None: ...

    def bind(self, kubeconfig: Kubeconfig, recorded: list[JSON]) -> Bound: ...

    def unbind(self, kubeconfig: Kubeconfig, entries: list[JSON]) -> Bound: ...


class Workspaces:
    """Requests through one target with its admin kubeconfig."""

    def __init__(self, admin_kubeconfig: bytes, to: Target) -> None:
        self.to = to
        self._client: ShardClient = CLIENTS.get(admin_kubeconfig, TIMEOUT, to.operator_url)

    def _unreachable(self, err: UnreachableError) -> Problem:
        return Problem(
            "spec.target", "TargetNotReady", f"cannot reach {self.to.operator_url}: {err.reason}"
        )

    def _ask(self, method: str, url: str, body: JSON | None = None) -> Response:
        return self._client.request(method, url, body)

    def check(self, path: str) -> Problem | None:
        """None when workspace ``path`` exists and is Ready."""
        url = workspace_lookup(self.to, path)
        if url is None:
            return None
        try:
            answer = self._ask("GET", url)
        except UnreachableError as err:
            return self._unreachable(err)
        return workspace_problem(path, answer.status, answer.body)

    def bind(self, kubeconfig: Kubeconfig, recorded: list[JSON]) -> Bound:
        """Remove the recorded bindings the spec no longer asks for, then make (or correct)
        those it asks for in ``spec.workspace``."""
        done = self.unbind(kubeconfig, stale(kubeconfig, recorded))
        path = kubeconfig.spec.workspace
        for wanted in bindings(kubeconfig):
            name = wanted["metadata"]["name"]
            problem = self._put(kubeconfig, path, wanted)
            if problem is None:
                done.made.append(binding_entry(path, wanted))
            else:
                done.problems.append(problem)
                if any(e.get("name") == name and e.get("workspace") == path for e in recorded):
                    done.made.append(binding_entry(path, wanted))
        return done

    def _put(self, kubeconfig: Kubeconfig, path: str, wanted: JSON) -> Problem | None:
        """Make ``wanted``; one made for this Kubeconfig that binds something else is made
        again (a roleRef cannot change), one made by anybody else is left alone."""
        name = wanted["metadata"]["name"]
        url = bindings_url(self.to.operator_url, path, name)
        what = f"ClusterRoleBinding {name} in {path}"
        try:
            live = self._ask("GET", url)
            if live.status == 200 and live.body is not None:
                if not made_by(kubeconfig, live.body):
                    return Problem(
                        "spec.clusterRoles",
                        "BindingConflict",
                        f"{what} exists and was not made for this Kubeconfig: it is left as it is",
                    )
                if fits(wanted, live.body):
                    return None
                live = self._ask("DELETE", url)
                if live.status not in (200, 202, 404):
                    return answer_problem(f"deleting {what}", live.status, live.body)
            elif live.status != 404:
                return answer_problem(f"reading {what}", live.status, live.body)
            made = self._ask("POST", bindings_url(self.to.operator_url, path), wanted)
        except UnreachableError as err:
            return self._unreachable(err)
        if made.status in (200, 201):
            return None
        return answer_problem(f"creating {what}", made.status, made.body)

    def unbind(self, kubeconfig: Kubeconfig, entries: list[JSON]) -> Bound:
        """Delete the bindings ``entries`` name (each only if made for ``kubeconfig``); those
        that could not be deleted stay recorded."""
        done = Bound()
        for entry in entries:
            path, name = str(entry.get("workspace")), str(entry.get("name"))
            url = bindings_url(self.to.operator_url, path, name)
            try:
                live = self._ask("GET", url)
                if live.status in GONE:
                    continue
                if live.status == 200 and live.body is not None and made_by(kubeconfig, live.body):
                    live = self._ask("DELETE", url)
                if live.status in (200, 202, *GONE):
                    continue
                done.problems.append(
                    answer_problem(
                        f"removing ClusterRoleBinding {name} in {path}", live.status, live.body
                    )
                )
            except UnreachableError as err:
                done.problems.append(self._unreachable(err))
            done.made.append(entry)
        return done


def workspaces(admin_kubeconfig: bytes, to: Target) -> WorkspaceCalls | Problem:
    """The requests through ``to``, or why its admin kubeconfig cannot be used."""
    try:
        return Workspaces(admin_kubeconfig, to)
    except CredentialsError as err:
        return Problem(
            "spec.target", "TargetNotReady", f"the admin kubeconfig of {to.kind} {to.name}: {err}"
        )
