"""An in-memory API server for the calls a reconcile pass makes, a Context around it, and
what happens around a pass: watch events, a Deployment's rollout, a user's spec change."""

from __future__ import annotations

import base64
import copy
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from kcp_shard_operator.controller.context import Context, Settings
from kcp_shard_operator.controller.shard import reconcile
from kcp_shard_operator.core.api.model import JSON
from kcp_shard_operator.core.frontproxy.status import Route
from kcp_shard_operator.core.shard.health import Failure, Probe, ProbeTarget, Registered
from kcp_shard_operator.core.status.deployments import DEPLOYMENT_REVISION
from kcp_shard_operator.core.status.events import Event
from kcp_shard_operator.identitycache.policy import Outcome, Result
from kcp_shard_operator.kube.client import Ran, RefusedError

from .conftest import RELEASE

Key = tuple[str, str, str]
WRITES = frozenset({"apply", "create", "replace", "delete", "status"})
LOGGER = logging.getLogger("test")


def refused(status: int = 422, reason: str = "Unprocessable Entity") -> RefusedError:
    return RefusedError(status, reason, "refused by the fake API server")


def conflict() -> RefusedError:
    return refused(409, "Conflict")


def _key(obj: JSON) -> Key:
    meta = obj["metadata"]
    return obj["kind"], meta["namespace"], meta["name"]


def _merged(base: Any, patch: Any) -> Any:
    """A JSON merge patch (RFC 7386) of ``patch`` onto ``base``."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    out = dict(base) if isinstance(base, dict) else {}
    for name, value in patch.items():
        if value is None:
            out.pop(name, None)
        else:
            out[name] = _merged(out.get(name), value)
    return out


class FakeKube:
    """Objects by (kind, namespace, name), as the API server keeps them for the operator.

    Every write numbers a new resourceVersion; an object made again gets another uid; a
    changed spec bumps ``metadata.generation``;
    an apply keeps the status and what the server set in metadata; a replace whose
    resourceVersion is not the stored one answers 409, one of a missing object 404.
    ``fail`` queues errors for the next calls of an operation on a kind; ``calls`` lists
    (operation, kind, name) of every call; ``containers`` answers commands run in pods,
    ``logs`` holds the logs of containers by (pod, container).
    """

    def __init__(self, *objects: JSON) -> None:
        self.containers: Callable[[str, str, str, list[str]], Ran] | None = None
        self.logs: dict[tuple[str, str], str] = {}
        self.objects: dict[Key, JSON] = {}
        self.calls: list[tuple[str, str, str]] = []
        self._errors: dict[tuple[str, str], list[Exception]] = {}
        self._revision = 0
        self._rolled: dict[str, tuple[JSON | None, int]] = {}
        self._made: dict[Key, int] = {}
        for obj in objects:
            self.put(obj)

    def put(self, obj: JSON) -> JSON:
        """Store ``obj`` as the server would after a write, without recording a call."""
        old = self.objects.get(_key(obj))
        new = copy.deepcopy(obj)
        meta = new["metadata"]
        self._revision += 1
        meta["resourceVersion"] = str(self._revision)
        if "uid" not in meta:
            meta["uid"] = old["metadata"]["uid"] if old is not None else self._uid(_key(new))
        generation = int((old or obj)["metadata"].get("generation", 1))
        if old is not None and old.get("spec") != new.get("spec"):
            generation += 1
        meta["generation"] = generation
        self.objects[_key(new)] = new
        return copy.deepcopy(new)

    def _uid(self, key: Key) -> str:
        """The uid of an object made anew: another one each time the name is made again."""
        made = self._made[key] = self._made.get(key, 0) + 1
        kind, _, name = key
        return f"uid-{name}-{kind}" + (f"-{made}" if made > 1 else "")

    def fail(self, op: str, kind: str, *errors: Exception) -> None:
        self._errors.setdefault((op, kind), []).extend(errors)

    @property
    def writes(self) -> list[tuple[str, str, str]]:
        return [call for call in self.calls if call[0] in WRITES]

    def _call(self, op: str, kind: str, name: str) -> None:
        self.calls.append((op, kind, name))
        errors = self._errors.get((op, kind))
        if errors:
            raise errors.pop(0)

    def get(self, api_version: str, kind: str, namespace: str, name: str) -> JSON | None:
        self._call("get", kind, name)
        found = self.objects.get((kind, namespace, name))
        return copy.deepcopy(found)

    def list(self, api_version: str, kind: str, namespace: str | None) -> list[JSON]:
        self._call("list", kind, "")
        return [
            copy.deepcopy(obj)
            for (held, where, _), obj in self.objects.items()
            if held == kind and namespace in (None, where)
        ]

    def apply(self, obj: JSON) -> JSON:
        self._call("apply", obj["kind"], obj["metadata"]["name"])
        old = self.objects.get(_key(obj))
        if old is None:
            return self.put(obj)
        meta = {**old["metadata"], **copy.deepcopy(obj["metadata"])}
        meta.pop("resourceVersion", None)
        return self.put({**old, **copy.deepcopy(obj), "metadata": meta})

    def create(self, obj: JSON) -> JSON:
        self._call("create", obj["kind"], obj["metadata"]["name"])
        if _key(obj) in self.objects:
            raise refused(409, "Conflict")
        return self.put(obj)

    def replace(self, obj: JSON, dry_run: bool = False) -> JSON:
        self._call("dry-run" if dry_run else "replace", obj["kind"], obj["metadata"]["name"])
        old = self.objects.get(_key(obj))
        if old is None:
            raise refused(404, "Not Found")
        if obj["metadata"].get("resourceVersion") != old["metadata"]["resourceVersion"]:
            raise conflict()
        meta = {
            **copy.deepcopy(obj["metadata"]),
            "uid": old["metadata"]["uid"],
            "generation": old["metadata"]["generation"],
        }
        new = {**copy.deepcopy(obj), "metadata": meta, "status": old.get("status")}
        return copy.deepcopy(new) if dry_run else self.put(new)

    def storage_classes(self) -> dict[str, JSON]:
        self._call("list", "StorageClass", "")
        return {
            name: copy.deepcopy(obj)
            for (kind, _, name), obj in self.objects.items()
            if kind == "StorageClass"
        }

    def delete(self, api_version: str, kind: str, namespace: str, name: str) -> None:
        self._call("delete", kind, name)
        self.objects.pop((kind, namespace, name), None)

    def patch_status(
        self, api_version: str, kind: str, namespace: str, name: str, status: JSON
    ) -> JSON:
        self._call("status", kind, name)
        old = self.objects.get((kind, namespace, name))
        if old is None:
            raise refused(404, "Not Found")
        return self.put({**old, "status": _merged(old.get("status"), status)})

    def secret_value(self, namespace: str, name: str, key: str) -> bytes | None:
        return (self.secret_data(namespace, name) or {}).get(key)

    def secret_data(self, namespace: str, name: str) -> dict[str, bytes] | None:
        self._call("get", "Secret", name)
        secret = self.objects.get(("Secret", namespace, name))
        if secret is None:
            return None
        return {key: base64.b64decode(value) for key, value in (secret.get("data") or {}).items()}

    def pod_log(self, namespace: str, name: str, container: str) -> str | None:
        self._call("log", "Pod", name)
        if ("Pod", namespace, name) not in self.objects:
            return None
        return self.logs.get((name, container), "")

    def run_in_container(
        self, namespace: str, pod: str, container: str, command: Sequence[str]
    ) -> Ran:
        self._call("exec", "Pod", pod)
        assert self.containers is not None, "a test that runs commands in pods answers them"
        return self.containers(namespace, pod, container, [*command])

    def roll_out(self, namespace: str, name: str) -> JSON:
        """What the Deployment controller writes once every replica of ``name`` is available:
        the status, and a new revision when the pod template is new."""
        deployment = self.objects[("Deployment", namespace, name)]
        replicas = deployment["spec"].get("replicas", 1)
        template, revision = self._rolled.get(name, (None, 0))
        if template != deployment["spec"]["template"]:
            template, revision = copy.deepcopy(deployment["spec"]["template"]), revision + 1
            self._rolled[name] = (template, revision)
        meta = deployment["metadata"]
        annotations = {**(meta.get("annotations") or {}), DEPLOYMENT_REVISION: str(revision)}
        return self.put(
            {
                **deployment,
                "metadata": {**meta, "annotations": annotations},
                "status": {
                    "observedGeneration": deployment["metadata"]["generation"],
                    **dict.fromkeys(
                        ("replicas", "updatedReplicas", "availableReplicas", "readyReplicas"),
                        replicas,
                    ),
                },
            }
        )


def healthy(target: ProbeTarget) -> Probe:
    """kcp's answers about a ready shard on its first etcd, listed by its root."""
    registration = target.root if isinstance(target.root, Failure) else Registered("reg")
    return Probe(data_uid=f"data-{target.kcp_name}", registration=registration)


@dataclass
class Effects:
    """The shard HTTP calls and the Events of a pass, recorded; a clock the test moves.

    ``answers`` gives kcp's answers to a probe (default :func:`healthy`).
    """

    outcome: Outcome = field(default_factory=lambda: Outcome(Result.DELETED, "deleted"))
    cleaned: list[bytes] = field(default_factory=list)
    answers: Callable[[ProbeTarget], Probe] = healthy
    probed: list[ProbeTarget] = field(default_factory=list)
    events: list[tuple[str, Event]] = field(default_factory=list)
    now: float = 1000.0
    route_answer: Route = field(default_factory=lambda: Route(True, "Routed", "1 shard(s) listed"))
    routed: list[tuple[bytes, str]] = field(default_factory=list)
    delayed: list[tuple[float, Callable[[], None]]] = field(default_factory=list)
    """Work the operator asked to run later (seconds, work), left to the test to run."""

    def route(self, kubeconfig: bytes, url: str) -> Route:
        """A read through a front-proxy: ``route_answer``."""
        self.routed.append((kubeconfig, url))
        return self.route_answer

    def clean(self, kubeconfig: bytes) -> Outcome:
        self.cleaned.append(kubeconfig)
        return self.outcome

    def probe(self, target: ProbeTarget) -> Probe:
        self.probed.append(target)
        return self.answers(target)

    def post(self, obj: JSON, event: Event) -> None:
        self.events.append((obj["metadata"]["name"], event))

    def clock(self) -> float:
        return self.now

    def later(self, seconds: float, work: Callable[[], None]) -> None:
        self.delayed.append((seconds, work))

    def run_delayed(self, seconds: float) -> None:
        """Run the one piece of work the operator asked to run ``seconds`` later."""
        assert [delay for delay, _ in self.delayed] == [seconds]
        _, work = self.delayed.pop()
        work()


def context(kube: FakeKube, effects: Effects | None = None, *, cleanup: bool = True) -> Context:
    """A Context over ``kube`` whose store holds every object, as the watches' listings fill it."""
    effects = effects or Effects()
    ctx = Context(
        settings=Settings(deprecating_release=RELEASE, identity_cache_cleanup=cleanup),
        kube=kube,
        post=effects.post,
        clean=effects.clean,
        probe=effects.probe,
        route=effects.route,
        clock=effects.clock,
        later=effects.later,
    )
    for (kind, _, _), obj in kube.objects.items():
        ctx.store.put(kind, copy.deepcopy(obj))
    return ctx


def secret(name: str, **data: str) -> JSON:
    meta = {"name": name, "namespace": "ns"}
    return {"apiVersion": "v1", "kind": "Secret", "metadata": meta, "data": data}


SECRETS = (secret("cache", kubeconfig="Y2FjaGU="), secret("root-admin", kubeconfig="cm9vdA=="))


READY_STATUS = {
    "readyReplicas": 1,
    "conditions": [{"type": "Ready", "status": "True", "reason": "RolledOut"}],
}


def rolled_out(shard: JSON) -> JSON:
    """``shard`` with its spec version rolled out and Ready, as its status says."""
    return {**shard, "status": {"version": shard["spec"]["version"], **READY_STATUS}}


def run(ctx: Context, *names: str) -> None:
    for name in names:
        reconcile(ctx, "ns", name, LOGGER)


def watched(ctx: Context, obj: JSON) -> None:
    """What a watch event does: the store gets the object."""
    ctx.store.put(obj["kind"], obj)


def settle(ctx: Context, kube: FakeKube, *names: str) -> None:
    """A pass, the Deployment's rollout as its watch delivers it, and the pass that follows."""
    for name in names:
        run(ctx, name)
        watched(ctx, kube.roll_out("ns", f"{name}-kcp"))
        run(ctx, name)


def respec(ctx: Context, kube: FakeKube, name: str, **spec: Any) -> None:
    """A user's change of the Shard's spec, delivered by its watch."""
    obj = copy.deepcopy(kube.objects[("Shard", "ns", name)])
    obj["spec"].update(spec)
    watched(ctx, kube.put(obj))
