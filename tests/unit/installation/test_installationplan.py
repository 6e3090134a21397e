"""``plan`` over a whole installation: the CacheServer first, then the root, the other shards
and the FrontProxy last, with the front-proxy's flags; a refused step holds what waits on it;
and that order is the one the operator then takes."""

from __future__ import annotations

import copy
import json
import logging
from pathlib import Path
from typing import Any

import pytest
import yaml

from kcp_shard_operator.cli.main import main
from kcp_shard_operator.controller.cacheserver import reconcile_cache_server
from kcp_shard_operator.controller.frontproxy import reconcile_front_proxy
from kcp_shard_operator.core.api.model import JSON
from kcp_shard_operator.core.cacheserver.spec import parse_cache_server
from kcp_shard_operator.core.frontproxy.spec import parse_front_proxy
from kcp_shard_operator.core.installation.plan import plan_installation
from kcp_shard_operator.core.installation.steps import (
    REFUSED,
    ROLLS,
    UNCHANGED,
    WAITS,
    Step,
    plan_upgrade,
)
from kcp_shard_operator.core.status.deployments import deployed_version
from tests.conftest import RELEASE, shard_object
from tests.fake_kube import FakeKube, context, run, watched

LOGGER = logging.getLogger("test")
SAMPLES = Path(__file__).resolve().parents[3] / "manifests" / "samples"
OLD, NEW = "0.28.0", "0.34.0"
PEER_FLAG = "--shard-peer-kubeconfig"
CHILDREN = {
    ("CacheServer", "cache"): "cache-cache",
    ("Shard", "root"): "root-kcp",
    ("Shard", "shard-1"): "shard-1-kcp",
    ("FrontProxy", "kcp"): "kcp-front-proxy",
}


def kind_object(kind: str, name: str, **spec: Any) -> JSON:
    return {
        "apiVersion": "kcpshard.dev/v1alpha1",
        "kind": kind,
        "metadata": {"name": name, "namespace": "ns", "uid": f"uid-{name}", "generation": 1},
        "spec": spec,
    }


def installation(version: str) -> list[JSON]:
    on_cache = {"serverRef": {"name": "cache"}}
    return [
        kind_object("CacheServer", "cache", version=version),
        shard_object("root", version=version, cache=on_cache),
        shard_object("shard-1", version=version, cache=on_cache, rootShardRef={"name": "root"}),
        kind_object("FrontProxy", "kcp", version=version, rootShardRef={"name": "root"}),
    ]


def reconcile(ctx: Any, kind: str, name: str) -> None:
    if kind == "CacheServer":
        reconcile_cache_server(ctx, "ns", name, LOGGER)
    elif kind == "FrontProxy":
        reconcile_front_proxy(ctx, "ns", name, LOGGER)
    else:
        run(ctx, name)


def planned_from(kube: FakeKube, target: str) -> list[Step]:
    """``plan`` over what the fake API server holds, as ``plan`` reads a cluster."""
    shards = [kube.objects[("Shard", "ns", name)] for name in ("root", "shard-1")]
    deployments = {
        f"ns/{name}": kube.objects.get(("Deployment", "ns", f"{name}-kcp"))
        for name in ("root", "shard-1")
    }
    cache = parse_cache_server(kube.objects[("CacheServer", "ns", "cache")])
    proxy = parse_front_proxy(kube.objects[("FrontProxy", "ns", "kcp")])
    others = {
        ("CacheServer", "ns/cache"): kube.objects.get(("Deployment", "ns", "cache-cache")),
        ("FrontProxy", "ns/kcp"): kube.objects.get(("Deployment", "ns", "kcp-front-proxy")),
    }
    steps = plan_upgrade(shards, deployments, target, RELEASE, lambda _: "-", {"ns/cache"}, [proxy])
    return plan_installation(steps, shards, [cache], [proxy], others, target, RELEASE)


def settled_installation() -> tuple[FakeKube, Any]:
    kube = FakeKube(*installation(OLD))
    ctx = context(kube)
    for kind, name in CHILDREN:
        reconcile(ctx, kind, name)
        watched(ctx, kube.roll_out("ns", CHILDREN[(kind, name)]))
        reconcile(ctx, kind, name)
    for kind, name in CHILDREN:
        assert (kube.objects[(kind, "ns", name)].get("status") or {}).get("version") == OLD
    return kube, ctx


def bump(ctx: Any, kube: FakeKube, kind: str, name: str, version: str) -> None:
    obj = copy.deepcopy(kube.objects[(kind, "ns", name)])
    obj["spec"]["version"] = version
    obj["metadata"]["generation"] += 1
    watched(ctx, kube.put(obj))


def test_the_installation_plan_is_the_order_the_operator_then_takes() -> None:
    """An installation reconciled at OLD on the fake API server, planned to NEW from what it
    holds, then bumped all at once: each Deployment changes in its planned wave."""
    kube, ctx = settled_installation()
    steps = planned_from(kube, NEW)
    assert [(s.kind, s.name, s.wave, s.outcome) for s in steps] == [
        ("CacheServer", "cache", 1, ROLLS),
        ("Shard", "root", 2, ROLLS),
        ("Shard", "shard-1", 3, ROLLS),
        ("FrontProxy", "kcp", 4, ROLLS),
    ]
    proxy_step = steps[-1]
    assert proxy_step.flags_added == [PEER_FLAG]
    assert proxy_step.waits_for == f"the shards of root to roll out kcp {NEW}"
    assert steps[1].waits_for == f"CacheServer cache to roll out kcp {NEW}"
    before = {key: copy.deepcopy(kube.objects[("Deployment", "ns", child)]) for key, child in
              CHILDREN.items()}  # fmt: skip

    for kind, name in CHILDREN:
        bump(ctx, kube, kind, name, NEW)
    waves: dict[str, int] = {}
    for wave in range(1, 6):
        changed = []
        for kind, name in CHILDREN:
            reconcile(ctx, kind, name)
            live = kube.objects[("Deployment", "ns", CHILDREN[(kind, name)])]
            if name not in waves and deployed_version(live) == NEW:
                changed.append((kind, name))
        for kind, name in changed:
            waves[name] = wave
            watched(ctx, kube.roll_out("ns", CHILDREN[(kind, name)]))
            reconcile(ctx, kind, name)
    assert waves == {step.name: step.wave for step in steps}
    proxy_args = kube.objects[("Deployment", "ns", "kcp-front-proxy")]["spec"]["template"]
    new_flags = {a.split("=")[0] for a in proxy_args["spec"]["containers"][0]["args"]}
    old_template = before[("FrontProxy", "kcp")]["spec"]["template"]
    old_flags = {a.split("=")[0] for a in old_template["spec"]["containers"][0]["args"]}
    assert sorted(new_flags - old_flags) == proxy_step.flags_added
    assert planned_from(kube, NEW)[0].outcome == UNCHANGED


def test_a_cache_server_refusing_an_older_minor_holds_the_shards_on_it() -> None:
    kube, _ = settled_installation()
    steps = {step.name: step for step in planned_from(kube, "0.27.1")}
    assert (steps["cache"].outcome, steps["cache"].reason) == (REFUSED, "DowngradeRefused")
    assert "the cache server stays at kcp 0.28.0" in (steps["cache"].message or "")
    for name in ("root", "shard-1"):
        assert steps[name].outcome == REFUSED, "the shards refuse their own downgrade first"
    assert (steps["kcp"].outcome, steps["kcp"].wave) == (ROLLS, 1), (
        "a front-proxy keeps no data: it may run an older kcp than its shards"
    )


def test_shards_whose_cache_server_refuses_its_version_wait_for_ever() -> None:
    """A patch release for the shards while the CacheServer is set to an older minor: the
    operator waits for the CacheServer to roll out its spec, which it never does."""
    kube, _ = settled_installation()
    cache = copy.deepcopy(kube.objects[("CacheServer", "ns", "cache")])
    cache["spec"]["version"] = "0.27.1"
    kube.put(cache)
    for name in ("root", "shard-1"):
        obj = copy.deepcopy(kube.objects[("Shard", "ns", name)])
        obj["spec"]["version"] = "0.28.1"
        kube.put(obj)
    steps = {step.name: step for step in planned_from_specs(kube)}
    assert steps["cache"].outcome == REFUSED
    for name in ("root", "shard-1"):
        assert (steps[name].outcome, steps[name].reason) == (WAITS, "WaitingForCacheServer")
        assert steps[name].after == OLD
    assert (steps["kcp"].outcome, steps["kcp"].reason) == (UNCHANGED, None)


def planned_from_specs(kube: FakeKube) -> list[Step]:
    shards = [kube.objects[("Shard", "ns", name)] for name in ("root", "shard-1")]
    deployments = {f"ns/{n}": kube.objects[("Deployment", "ns", f"{n}-kcp")] for n in
                   ("root", "shard-1")}  # fmt: skip
    cache = parse_cache_server(kube.objects[("CacheServer", "ns", "cache")])
    proxy = parse_front_proxy(kube.objects[("FrontProxy", "ns", "kcp")])
    others = {
        ("CacheServer", "ns/cache"): kube.objects[("Deployment", "ns", "cache-cache")],
        ("FrontProxy", "ns/kcp"): kube.objects[("Deployment", "ns", "kcp-front-proxy")],
    }
    steps = plan_upgrade(shards, deployments, None, RELEASE, lambda _: "-", {"ns/cache"}, [proxy])
    return plan_installation(steps, shards, [cache], [proxy], others, None, RELEASE)


def test_a_front_proxy_ahead_of_its_shards_waits_for_ever() -> None:
    """Only the FrontProxy set to NEW: the operator rolls it once every shard runs NEW or
    newer, which nothing in the plan brings about."""
    kube, _ = settled_installation()
    proxy = copy.deepcopy(kube.objects[("FrontProxy", "ns", "kcp")])
    proxy["spec"]["version"] = NEW
    kube.put(proxy)
    steps = {step.name: step for step in planned_from_specs(kube)}
    held = steps["kcp"]
    assert (held.outcome, held.reason, held.wave) == (WAITS, "WaitingForShards", None)
    assert (held.now, held.after) == (OLD, OLD)
    assert held.waits_for == "shards root, shard-1"
    assert f"run kcp {NEW} or newer" in (held.message or "")
    assert [steps[name].outcome for name in ("cache", "root", "shard-1")] == [UNCHANGED] * 3


def test_plan_on_the_samples_lists_the_whole_installation_in_order(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(["plan", "-f", str(SAMPLES), "--to", NEW]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert (
        lines[0]
        == f"Plan: every Shard, CacheServer, VirtualWorkspaceServer and FrontProxy set to kcp {NEW}"
    )
    assert lines[1].split()[:3] == ["ORDER", "KIND", "NAME"]
    assert [line.split()[:3] for line in lines[2:6]] == [
        ["1", "CacheServer", "kcp-samples/cache"],
        ["2", "Shard", "kcp-samples/root"],
        ["3", "Shard", "kcp-samples/shard-1"],
        ["4", "FrontProxy", "kcp-samples/kcp"],
    ]
    assert PEER_FLAG in lines[5]


@pytest.mark.parametrize("output", ["json", "yaml"])
def test_plan_documents_carry_the_kind(output: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["plan", "-f", str(SAMPLES), "--to", NEW, "-o", output]) == 0
    text = capsys.readouterr().out
    found = json.loads(text) if output == "json" else yaml.safe_load(text)
    assert [(s["kind"], s["name"], s["order"]) for s in found["steps"]] == [
        ("CacheServer", "cache", 1),
        ("Shard", "root", 2),
        ("Shard", "shard-1", 3),
        ("FrontProxy", "kcp", 4),
    ]


def proxy_planned_from_files(
    root_ref: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> JSON:
    """The FrontProxy's step of ``plan -f`` on root, shard-1 and a FrontProxy naming
    ``root_ref``."""
    docs = [obj for obj in installation(OLD) if obj["kind"] != "CacheServer"]
    docs[-1]["spec"]["rootShardRef"] = {"name": root_ref}
    path = tmp_path / "installation.yaml"
    path.write_text(yaml.safe_dump_all(docs), encoding="utf-8")
    assert main(["plan", "-f", str(path), "--to", NEW, "-o", "json"]) == 0
    steps = json.loads(capsys.readouterr().out)["steps"]
    found: JSON = next(step for step in steps if step["kind"] == "FrontProxy")
    return found


@pytest.mark.parametrize(
    ("root_ref", "outcome", "words"),
    [
        ("elsewhere", (REFUSED, "RootShardNotFound"), "root Shard 'elsewhere'"),
        ("shard-1", ("InvalidSpec", "InvalidSpec"), "'shard-1' is not a root shard"),
    ],
)
def test_a_front_proxy_without_its_root_shard_is_reported(
    root_ref: str,
    outcome: tuple[str, str],
    words: str,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    proxy = proxy_planned_from_files(root_ref, tmp_path, capsys)
    assert (proxy["outcome"], proxy["reason"]) == outcome
    assert words in proxy["message"]


def test_a_pinned_image_tag_of_a_cache_server_or_front_proxy_is_noted(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    docs = installation(OLD)
    for doc in (docs[0], docs[-1]):
        doc["spec"]["image"] = {"tag": f"v{OLD}"}
    path = tmp_path / "installation.yaml"
    path.write_text(yaml.safe_dump_all(docs), encoding="utf-8")
    assert main(["plan", "-f", str(path), "--to", NEW, "-o", "json"]) == 0
    steps = {s["kind"]: s for s in json.loads(capsys.readouterr().out)["steps"]}
    for kind in ("CacheServer", "FrontProxy"):
        assert steps[kind]["notes"] == [
            f"spec.image.tag 'v{OLD}' is pinned: the pods run that image, not kcp {NEW}; set it "
            "too (or remove it)"
        ], kind


VIRTUAL_WORKSPACES = SAMPLES.parents[1] / "docs" / "examples" / "virtual-workspaces.yaml"


def test_plan_puts_each_virtual_workspace_server_after_its_shard_before_the_front_proxy(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(["plan", "-f", str(VIRTUAL_WORKSPACES), "--to", NEW, "-o", "json"]) == 0
    steps = json.loads(capsys.readouterr().out)["steps"]
    order = [(step["kind"], step["name"], step["order"]) for step in steps]
    assert order == [
        ("CacheServer", "cache", 1),
        ("Shard", "root", 2),
        ("Shard", "shard-1", 3),
        ("VirtualWorkspaceServer", "root", 3),
        ("VirtualWorkspaceServer", "shard-1", 4),
        ("FrontProxy", "kcp", 5),
    ]
    servers = {step["name"]: step for step in steps if step["kind"] == "VirtualWorkspaceServer"}
    # kcp 0.31 hid and ignored the server's --shard-external-url; 0.34.0 renders it no more.
    assert servers["shard-1"]["flagsDropped"] == ["--shard-external-url"]
    assert servers["shard-1"]["waitsFor"] == f"Shard shard-1 to roll out kcp {NEW}"
    proxy = steps[-1]
    assert proxy["waitsFor"] == (
        f"the shards of root and their virtual-workspace servers to roll out kcp {NEW}"
    )
    assert all(step["outcome"] == ROLLS for step in steps)


def test_a_virtual_workspace_server_whose_shard_lacks_a_cache_server_is_invalid_past_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    text = VIRTUAL_WORKSPACES.read_text(encoding="utf-8").replace(
        "  cache: {serverRef: {name: cache}}\n---\napiVersion: kcpshard.dev/v1alpha1\nkind: Shard\n"
        "metadata:\n  name: shard-1",
        "---\napiVersion: kcpshard.dev/v1alpha1\nkind: Shard\nmetadata:\n  name: shard-1",
    )
    assert text != VIRTUAL_WORKSPACES.read_text(encoding="utf-8")
    (tmp_path / "vw.yaml").write_text(text, encoding="utf-8")
    assert main(["plan", "-f", str(tmp_path / "vw.yaml"), "--to", NEW, "-o", "json"]) == 0
    steps = json.loads(capsys.readouterr().out)["steps"]
    root_server = next(
        s for s in steps if (s["kind"], s["name"]) == ("VirtualWorkspaceServer", "root")
    )
    assert root_server["outcome"] == "InvalidSpec"
    assert "reads the core APIExport identities from the cache server" in root_server["message"]
    assert main(["plan", "-f", str(tmp_path / "vw.yaml"), "--to", "0.33.0", "-o", "json"]) == 0
    steps = json.loads(capsys.readouterr().out)["steps"]
    assert {s["outcome"] for s in steps if s["kind"] == "VirtualWorkspaceServer"} == {ROLLS}
