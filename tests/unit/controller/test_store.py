"""The watch-fed store: newest body wins, absence is remembered, Secrets keep metadata,
select reads one kind in one namespace."""

from __future__ import annotations

import json
import random

import pytest

from kcp_shard_operator.controller.store import TOMBSTONE_SECONDS, Store, trimmed
from kcp_shard_operator.core.api.model import JSON


def obj(name: str, rv: str, namespace: str = "ns", **fields: object) -> JSON:
    meta = {"name": name, "namespace": namespace, "resourceVersion": rv}
    return {"metadata": meta, **fields}


@pytest.mark.parametrize(
    ("first", "second", "kept"),
    [
        ("5", "7", "7"),  # a newer watch event replaces
        ("7", "5", "7"),  # a late, older event does not undo the operator's own write
        ("7", "7", "7"),
        ("abc", "5", "5"),  # opaque versions: the last one wins
        ("5", "", ""),
    ],
)
def test_put_keeps_the_newest_version(first: str, second: str, kept: str) -> None:
    store = Store()
    store.put("Deployment", obj("d", first))
    store.put("Deployment", obj("d", second))
    known, body = store.lookup("Deployment", "ns", "d")
    assert known
    assert body is not None
    assert body["metadata"]["resourceVersion"] == kept


def test_unknown_absent_and_present_are_told_apart() -> None:
    store = Store()
    assert store.lookup("Service", "ns", "s") == (False, None)
    store.not_found("Service", "ns", "s")
    assert store.lookup("Service", "ns", "s") == (True, None)
    store.put("Service", obj("s", "3"))
    assert store.lookup("Service", "ns", "s")[1] is not None
    store.deleted("Service", "ns", "s")
    assert store.lookup("Service", "ns", "s") == (True, None)


def test_not_found_does_not_hide_a_body_a_watch_delivered_meanwhile() -> None:
    store = Store()
    store.put("PodDisruptionBudget", obj("p", "9"))
    store.not_found("PodDisruptionBudget", "ns", "p")
    assert store.lookup("PodDisruptionBudget", "ns", "p")[1] is not None


def test_trimmed_keeps_of_a_secret_its_metadata_and_key_names_but_no_content() -> None:
    secret = obj("s", "4", data={"token": "c2VjcmV0"}, type="Opaque")
    secret["metadata"]["managedFields"] = [{"manager": "kubectl"}]
    secret["metadata"]["uid"] = "u"
    secret["metadata"]["labels"] = {"kcpshard.dev/issued": "serving"}
    secret["metadata"]["annotations"] = {
        "kubectl.kubernetes.io/last-applied-configuration": '{"data":{"token":"c2VjcmV0"}}',
        "kcpshard.dev/not-after": "2027-01-01T00:00:00Z",
    }
    assert trimmed("Secret", secret) == {
        "metadata": {
            "name": "s",
            "namespace": "ns",
            "resourceVersion": "4",
            "uid": "u",
            "labels": {"kcpshard.dev/issued": "serving"},
            "annotations": {"kcpshard.dev/not-after": "2027-01-01T00:00:00Z"},
        },
        "keys": ["token"],
    }


def managed(manager: str, fields: JSON, subresource: str | None = None) -> JSON:
    entry: JSON = {"manager": manager, "operation": "Apply", "fieldsV1": fields}
    return {**entry, "subresource": subresource} if subresource else entry


OPERATORS = managed(
    "kcp-shard-operator",
    {"f:metadata": {"f:labels": {"f:app": {}}}, "f:spec": {"f:replicas": {}}},
)
CONTROLLERS = [
    managed("kube-controller-manager", {"f:metadata": {"f:annotations": {"f:revision": {}}}}),
    managed("kube-controller-manager", {"f:status": {"f:replicas": {}}}, "status"),
]


def test_a_child_kept_with_only_the_operators_spec_fields_keeps_no_managed_fields() -> None:
    deployment = obj("d", "4", spec={"replicas": 1}, status={"replicas": 1})
    deployment["metadata"]["managedFields"] = [OPERATORS, *CONTROLLERS]
    kept = trimmed("Deployment", deployment)
    assert "managedFields" not in kept["metadata"]
    assert (kept["spec"], kept["status"]) == (deployment["spec"], deployment["status"])
    assert kept["metadata"]["resourceVersion"] == "4"
    assert len(deployment["metadata"]["managedFields"]) == 3


def test_a_child_edited_by_hand_keeps_every_managers_spec_fields() -> None:
    edit = managed("kubectl-edit", {"f:metadata": {"f:labels": {}}, "f:spec": {"f:paused": {}}})
    deployment = obj("d", "4", spec={"replicas": 1, "paused": True})
    deployment["metadata"]["managedFields"] = [OPERATORS, *CONTROLLERS, edit]
    assert trimmed("Deployment", deployment)["metadata"]["managedFields"] == [
        {"manager": "kcp-shard-operator", "fieldsV1": {"f:spec": {"f:replicas": {}}}},
        {"manager": "kubectl-edit", "fieldsV1": {"f:spec": {"f:paused": {}}}},
    ]


def test_the_operators_own_kinds_are_kept_without_their_managed_fields() -> None:
    shard = obj("root", "4", spec={"version": "0.30.0"})
    shard["metadata"]["managedFields"] = [{"manager": "kcp-shard-operator", "fieldsV1": {}}]
    kept = trimmed("Shard", shard)
    assert "managedFields" not in kept["metadata"]
    assert kept["spec"] == shard["spec"]
    assert kept["metadata"]["resourceVersion"] == "4"
    assert "managedFields" in shard["metadata"]


def test_each_parses_one_object_at_a_time_and_counts_the_bytes_it_keeps() -> None:
    store = Store()
    for name in ("a", "b"):
        store.put("Shard", obj(name, "1"))
    store.put(
        "Shard", {**obj("c", "1"), "metadata": {**obj("c", "1")["metadata"], "namespace": "other"}}
    )
    store.not_found("Shard", "ns", "gone")
    lazy = store.each("Shard", "ns")
    assert not isinstance(lazy, list)
    assert sorted(body["metadata"]["name"] for body in lazy) == ["a", "b"]
    assert sorted(body["metadata"]["name"] for body in store.each("Shard")) == ["a", "b", "c"]
    count, held = store.sizes()["Shard"]
    assert count == 4
    assert held == sum(len(json.dumps(b, separators=(",", ":"))) for b in store.each("Shard"))


def test_select_filters_by_kind_namespace_and_predicate() -> None:
    store = Store()
    store.put("Shard", obj("root", "1", spec={}))
    store.put("Shard", obj("s1", "2", spec={"rootShardRef": {"name": "root"}}))
    store.put("Shard", obj("s2", "3", namespace="other", spec={"rootShardRef": {"name": "root"}}))
    store.put("Deployment", obj("s1", "4", spec={"rootShardRef": {"name": "root"}}))
    store.deleted("Shard", "ns", "gone")
    found = store.select(
        "Shard", "ns", lambda body: bool(body["spec"].get("rootShardRef", {}).get("name"))
    )
    assert [body["metadata"]["name"] for body in found] == ["s1"]


def test_a_read_body_is_a_copy_the_caller_may_change() -> None:
    store = Store()
    store.put("Shard", obj("root", "1", spec={"version": "0.33.0"}))
    _, body = store.lookup("Shard", "ns", "root")
    assert body is not None
    body["spec"]["version"] = "9.9.9"
    assert store.lookup("Shard", "ns", "root")[1] == obj("root", "1", spec={"version": "0.33.0"})


def test_a_pod_keeps_only_what_tells_why_it_does_not_run() -> None:
    waiting = {"waiting": {"reason": "ImagePullBackOff", "message": "no such image"}}
    pod = obj(
        "root-kcp-abc",
        "3",
        labels={"app.kubernetes.io/instance": "root"},
        spec={"containers": [{"name": "kcp", "env": [{"name": "TOKEN", "value": "x"}]}]},
        status={
            "phase": "Pending",
            "conditions": [{"type": "PodScheduled", "status": "False"}],
            "containerStatuses": [{"name": "kcp", "state": waiting, "imageID": "sha"}],
        },
    )
    pod["metadata"]["labels"] = pod.pop("labels")
    kept = trimmed("Pod", pod)
    assert "spec" not in kept
    assert kept["metadata"]["labels"] == {"app.kubernetes.io/instance": "root"}
    assert kept["status"] == {
        "conditions": [{"type": "PodScheduled", "status": "False"}],
        "containerStatuses": [{"name": "kcp", "state": waiting}],
    }


def test_a_deleted_object_of_any_kind_is_remembered_absent() -> None:
    store = Store()
    for kind in ("Pod", "Service"):
        store.put(kind, obj("x", "1"))
        store.deleted(kind, "ns", "x")
        assert store.lookup(kind, "ns", "x") == (True, None)
    assert store.select("Pod", "ns", lambda _: True) == []


def names(store: Store, kind: str, namespace: str) -> list[str]:
    return sorted(body["metadata"]["name"] for body in store.select(kind, namespace, bool))


def test_select_sees_only_its_kind_and_namespace_through_puts_deletes_and_replaces() -> None:
    store = Store()
    for kind in ("Shard", "Deployment", "Pod"):
        for namespace in ("ns", "other"):
            for name in ("a", "b"):
                store.put(kind, obj(name, "1", namespace, spec={"of": f"{kind}/{namespace}"}))
    store.put("Shard", obj("a", "2", spec={"replaced": True}))
    store.put("Shard", obj("c", "3"))
    store.deleted("Shard", "ns", "b")
    store.deleted("Pod", "ns", "a")
    store.deleted("Pod", "ns", "b")
    store.deleted("Deployment", "other", "a")
    store.not_found("Deployment", "ns", "z")
    assert names(store, "Shard", "ns") == ["a", "c"]
    replaced = store.select("Shard", "ns", lambda body: body["metadata"]["name"] == "a")
    assert replaced == [obj("a", "2", spec={"replaced": True})]
    assert names(store, "Shard", "other") == ["a", "b"]
    assert names(store, "Pod", "ns") == []
    assert names(store, "Pod", "other") == ["a", "b"]
    assert names(store, "Deployment", "ns") == ["a", "b"]
    assert names(store, "Deployment", "other") == ["b"]
    assert names(store, "Service", "ns") == []
    assert all(
        body["spec"] == {"of": f"{kind}/other"}
        for kind in ("Shard", "Deployment")
        for body in store.select(kind, "other", bool)
    )
    store.put("Pod", obj("a", "5"))
    store.put("Deployment", obj("a", "6", namespace="other"))
    assert names(store, "Pod", "ns") == ["a"]
    assert names(store, "Deployment", "other") == ["a", "b"]


def test_select_and_lookup_agree_with_a_plain_map_over_many_operations() -> None:
    rng = random.Random(13)
    store = Store()
    model: dict[tuple[str, str, str], JSON | None] = {}
    for step in range(2000):
        kind = rng.choice(["Shard", "Pod", "Service"])
        namespace, name = rng.choice(["ns", "other"]), rng.choice("abcd")
        key = (kind, namespace, name)
        op = rng.choice(["put", "put", "deleted", "not_found"])
        if op == "put":
            body = obj(name, str(step), namespace, spec={"step": step})
            store.put(kind, body)
            model[key] = body if kind != "Pod" else trimmed("Pod", body)
        elif op == "deleted":
            store.deleted(kind, namespace, name)
            model[key] = None
        else:
            store.not_found(kind, namespace, name)
            model.setdefault(key, None)
        assert store.lookup(*key) == (key in model, model.get(key))
        expected = sorted(
            (body for (k, ns, _), body in model.items() if (k, ns) == key[:2] and body),
            key=lambda body: str(body["metadata"]["name"]),
        )
        found = store.select(kind, namespace, bool)
        assert sorted(found, key=lambda body: str(body["metadata"]["name"])) == expected


def made(name: str, rv: str, uid: str, namespace: str = "ns") -> JSON:
    return {"metadata": {"name": name, "namespace": namespace, "resourceVersion": rv, "uid": uid}}


def uid_of(store: Store, kind: str, name: str) -> str | None:
    known, body = store.lookup(kind, "ns", name)
    assert known
    return None if body is None else str(body["metadata"]["uid"])


def test_a_late_deletion_of_the_old_object_does_not_hide_the_one_made_again() -> None:
    """kopf orders the events of one object (uid), not those of two: the new object's ADDED
    may come before the old one's DELETED."""
    store = Store()
    store.put("Deployment", made("d", "10", "old"))
    store.put("Deployment", made("d", "12", "new"))
    store.deleted("Deployment", "ns", "d", "old", "11")
    assert uid_of(store, "Deployment", "d") == "new"
    store.deleted("Deployment", "ns", "d", "old")
    assert uid_of(store, "Deployment", "d") == "new", "without a version, by uid"


def test_a_late_version_of_a_deleted_object_does_not_bring_it_back() -> None:
    store = Store()
    store.put("Deployment", made("d", "10", "old"))
    store.deleted("Deployment", "ns", "d", "old", "11")
    for late in ("10", "11"):
        store.put("Deployment", made("d", late, "old"))
        assert uid_of(store, "Deployment", "d") is None
    store.put("Deployment", made("d", "12", "new"))
    assert uid_of(store, "Deployment", "d") == "new"


def test_a_deletion_of_an_older_version_than_the_one_held_changes_nothing() -> None:
    store = Store()
    store.put("Service", made("s", "20", "u"))
    store.deleted("Service", "ns", "s", "u", "19")
    assert uid_of(store, "Service", "s") == "u"
    store.deleted("Service", "ns", "s", "u", "21")
    assert uid_of(store, "Service", "s") is None


def test_a_listing_replaces_what_the_store_held_and_returns_what_vanished() -> None:
    store = Store()
    for name, rv in (("kept", "1"), ("gone", "2"), ("changed", "3")):
        store.put("Deployment", made(name, rv, name))
    since = store.mark()
    store.put("Deployment", made("arrived", "9", "arrived"))
    store.put("Deployment", made("deleted-after", "4", "deleted-after"))
    store.deleted("Deployment", "ns", "deleted-after", "deleted-after", "8")
    listing = [
        made("kept", "1", "kept"),
        made("changed", "5", "changed"),
        made("new", "6", "new"),
        made("deleted-after", "4", "deleted-after"),
    ]
    gone = store.replace("Deployment", "ns", listing, since)
    assert [body["metadata"]["name"] for body in gone] == ["gone"]
    assert names(store, "Deployment", "ns") == ["arrived", "changed", "kept", "new"]
    assert store.lookup("Deployment", "ns", "changed")[1] == made("changed", "5", "changed")
    assert store.listed("Deployment", "ns")
    assert store.lookup("Deployment", "ns", "never-seen") == (True, None)
    assert store.lookup("Deployment", "other", "never-seen") == (False, None)


def test_a_listing_keeps_what_the_watch_delivers_only() -> None:
    store = Store()
    labelled = {**made("ours", "1", "a"), "kind": "Pod"}
    labelled["metadata"]["labels"] = {"mine": "yes"}
    store.replace(
        "Pod",
        "ns",
        [labelled, made("theirs", "2", "b")],
        store.mark(),
        lambda body: "labels" in body["metadata"],
    )
    assert names(store, "Pod", "ns") == ["ours"]


def test_a_doubted_store_answers_nothing_it_held_until_listed_again() -> None:
    store = Store()
    store.put("Deployment", made("ghost", "1", "g"))
    store.put("Deployment", made("alive", "2", "a"))
    store.put("Shard", made("root", "3", "r"))
    store.put("Secret", made("elsewhere", "4", "e", namespace="other"))
    store.replace("Service", "ns", [], store.mark())
    doubted = store.doubt(store.namespaces(["Shard"]))
    assert doubted == [("Deployment", "ns"), ("Service", "ns"), ("Shard", "ns")]
    assert store.doubted() == doubted
    assert store.lookup("Deployment", "ns", "ghost") == (False, None)
    assert store.lookup("Service", "ns", "any") == (False, None), "no longer listed"
    assert store.lookup("Secret", "other", "elsewhere") == (False, None), "forgotten"
    store.put("Shard", made("root", "3", "r"))
    assert uid_of(store, "Shard", "root") == "r"
    store.not_found("Deployment", "ns", "ghost")
    assert uid_of(store, "Deployment", "ghost") is None
    gone = store.replace("Deployment", "ns", [made("alive", "2", "a")], store.mark())
    assert gone == [], "the ghost was already found absent"
    assert uid_of(store, "Deployment", "alive") == "a"
    assert store.doubted() == [("Service", "ns"), ("Shard", "ns")]


def test_tombstones_are_forgotten_after_a_while_so_the_store_stays_bounded() -> None:
    clock = [0.0]
    store = Store(clock=lambda: clock[0])
    for step in range(1000):
        clock[0] = step * 1.0
        store.put("Service", made(f"s{step}", str(2 * step + 1), f"u{step}"))
        store.deleted("Service", "ns", f"s{step}", f"u{step}", str(2 * step + 2))
        store.not_found("PodDisruptionBudget", "ns", f"p{step}")
    held = store.sizes()
    assert held["Service"][0] <= 2 * TOMBSTONE_SECONDS
    assert held["PodDisruptionBudget"][0] <= 2 * TOMBSTONE_SECONDS
    assert store.lookup("Service", "ns", "s999") == (True, None)
