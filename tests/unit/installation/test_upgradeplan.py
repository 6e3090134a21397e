"""``plan``: the order, flags, waits, refusals and identity-cache cleanup of an upgrade, and
that they are what the operator then does."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from kcp_shard_operator.cli.main import main
from kcp_shard_operator.core.api.model import JSON
from kcp_shard_operator.core.installation.steps import (
    INVALID,
    REFUSED,
    ROLLS,
    UNCHANGED,
    WAITS,
    Step,
    as_rolled_out,
    plan_upgrade,
)
from kcp_shard_operator.core.kcp.versions import Version
from kcp_shard_operator.core.shard.spec import Shard
from kcp_shard_operator.core.status.deployments import deployed_version
from kcp_shard_operator.identitycache.policy import Action, decide
from tests.conftest import RELEASE, non_root_object, shard_object
from tests.fake_kube import SECRETS, FakeKube, context, respec, run, watched

ROOT_FLAG = "--root-shard-kubeconfig-file"
SAMPLES = Path(__file__).resolve().parents[3] / "manifests" / "samples"


def cleanup(release: Version = RELEASE) -> Any:
    def what(shard: Shard) -> str:
        decision = decide(shard, release)
        return "deleted" if decision.action is Action.CLEAN else decision.reason

    return what


def installation(version: str, **root_spec: Any) -> list[JSON]:
    return [
        shard_object(version=version, **root_spec),
        non_root_object(version=version, adminKubeconfigSecretRef={"name": "admin"}),
    ]


def planned(objects: list[JSON], target: str | None, release: Version = RELEASE) -> dict[str, Step]:
    rolled, deployments = as_rolled_out(objects, release)
    steps = plan_upgrade(rolled, deployments, target, release, cleanup(release))
    return {step.name: step for step in steps}


def test_the_root_rolls_first_and_the_deprecated_flag_goes_with_the_deprecating_release() -> None:
    steps = planned(installation("0.27.1"), "0.34.0")
    root, shard = steps["root"], steps["shard-1"]
    assert (root.outcome, root.wave, root.now, root.after) == (ROLLS, 1, "0.27.1", "0.34.0")
    assert (shard.outcome, shard.wave, shard.now, shard.after) == (ROLLS, 2, "0.27.1", "0.34.0")
    assert shard.waits_for == "root shard root to roll out kcp 0.34.0"
    assert shard.flags_dropped == [ROOT_FLAG]
    assert root.flags_dropped == root.flags_added == shard.flags_added == []
    assert (root.identity_cache, shard.identity_cache) == ("RootShard", "deleted")


def test_the_flag_stays_for_a_kcp_that_still_needs_it() -> None:
    steps = planned(installation("0.27.1"), "0.34.0", release=Version.parse("0.35.0"))
    assert steps["shard-1"].flags_dropped == []
    assert steps["shard-1"].identity_cache == "OlderVersion"
    assert planned(installation("0.27.1"), "0.33.0")["shard-1"].flags_dropped == []


def test_a_patch_upgrade_rolls_the_root_first_with_no_flag_change() -> None:
    steps = planned(installation("0.28.0"), "0.28.1")
    assert [(s.wave, s.flags_added, s.flags_dropped) for s in steps.values()] == [
        (1, [], []),
        (2, [], []),
    ]


def test_the_specs_as_they_are_change_nothing() -> None:
    steps = planned(installation("0.28.0"), None)
    assert {s.outcome for s in steps.values()} == {UNCHANGED}
    assert {s.wave for s in steps.values()} == {None}


def test_a_downgrade_across_a_minor_is_refused_and_the_shard_stays() -> None:
    steps = planned(installation("0.28.0"), "0.27.1")
    for step in steps.values():
        assert (step.outcome, step.reason, step.after) == (REFUSED, "DowngradeRefused", "0.28.0")
        assert "the shard stays at kcp 0.28.0" in (step.message or "")


def test_a_root_that_cannot_be_rendered_is_refused_and_its_shards_wait_for_ever() -> None:
    rolled, deployments = as_rolled_out(installation("0.27.1"), RELEASE)
    rolled[0]["spec"]["extraArgs"] = ["--secure-port=7000"]
    found = {s.name: s for s in plan_upgrade(rolled, deployments, "0.28.0", RELEASE, cleanup())}
    assert (found["root"].outcome, found["root"].reason) == (REFUSED, "InvalidSpec")
    assert found["shard-1"].outcome == WAITS
    assert found["shard-1"].after == "0.27.1"


def test_a_target_no_shard_accepts_is_reported_per_shard() -> None:
    steps = planned(installation("0.27.1"), "0.34.0+build")
    assert {s.outcome for s in steps.values()} == {INVALID}
    assert "spec.image.tag" in (steps["root"].message or "")


def test_a_pinned_image_tag_is_noted() -> None:
    steps = planned(installation("0.27.1", image={"tag": "v0.27.1"}), "0.28.0")
    assert len(steps["root"].notes) == 1
    assert "pinned" in steps["root"].notes[0]
    assert not steps["shard-1"].notes


def test_the_plan_is_what_the_operator_then_does() -> None:
    """Shards reconciled at 0.27.1 on the fake API server, planned to 0.34.0 from what it
    holds, then bumped: the Deployments change in the planned waves, with the planned flags."""
    kube = FakeKube(*installation("0.27.1"), *SECRETS)
    ctx = context(kube)
    for name in ("root", "shard-1"):
        run(ctx, name)
        watched(ctx, kube.roll_out("ns", f"{name}-kcp"))
        run(ctx, name)
    shards = [kube.objects[("Shard", "ns", name)] for name in ("root", "shard-1")]
    assert all((s.get("status") or {}).get("version") == "0.27.1" for s in shards)
    deployments = {
        f"ns/{n}": kube.objects[("Deployment", "ns", f"{n}-kcp")] for n in ("root", "shard-1")
    }
    before = copy.deepcopy(deployments)
    steps = {s.name: s for s in plan_upgrade(shards, deployments, "0.34.0", RELEASE, cleanup())}
    for name in ("root", "shard-1"):
        respec(ctx, kube, name, version="0.34.0")
    waves: dict[str, int] = {}
    for wave in (1, 2, 3):
        changed = []
        for name in ("root", "shard-1"):
            run(ctx, name)
            live = kube.objects[("Deployment", "ns", f"{name}-kcp")]
            if name not in waves and deployed_version(live) == "0.34.0":
                changed.append(name)
        for name in changed:
            waves[name] = wave
            watched(ctx, kube.roll_out("ns", f"{name}-kcp"))
            run(ctx, name)
    assert waves == {name: step.wave for name, step in steps.items()}
    for name, step in steps.items():
        args = {
            arg.split("=")[0]
            for arg in kube.objects[("Deployment", "ns", f"{name}-kcp")]["spec"]["template"][
                "spec"
            ]["containers"][0]["args"]
        }
        old = {
            arg.split("=")[0]
            for arg in before[f"ns/{name}"]["spec"]["template"]["spec"]["containers"][0]["args"]
        }
        assert sorted(old - args) == step.flags_dropped, name
        assert sorted(args - old) == step.flags_added, name


def test_plan_on_the_samples_directory_prints_the_table(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["plan", "-f", str(SAMPLES), "--to", "0.34.0"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert (
        lines[0]
        == "Plan: every Shard, CacheServer, VirtualWorkspaceServer and FrontProxy set to kcp 0.34.0"
    )
    assert lines[1].split() == [
        "ORDER", "KIND", "NAME", "NOW", "AFTER", "FLAGS-ADDED", "FLAGS-DROPPED", "IDENTITY-CACHE",
        "OUTCOME",
    ]  # fmt: skip
    assert lines[3].split()[:8] == [
        "2", "Shard", "kcp-samples/root", "0.27.1", "0.34.0", "-", "-", "-",
    ]  # fmt: skip
    assert lines[4].split()[:7] == [
        "3", "Shard", "kcp-samples/shard-1", "0.27.1", "0.34.0", "-", ROOT_FLAG,
    ]  # fmt: skip
    assert "deleted after rollout" in lines[4]


@pytest.mark.parametrize("output", ["json", "yaml"])
def test_plan_prints_json_and_yaml_for_scripts(
    output: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["plan", "-f", str(SAMPLES), "--to", "v0.34.0", "-o", output]) == 0
    text = capsys.readouterr().out
    found = json.loads(text) if output == "json" else yaml.safe_load(text)
    assert found["target"] == "0.34.0"
    assert [(s["name"], s["order"], s["flagsDropped"]) for s in found["steps"]] == [
        ("cache", 1, []),
        ("root", 2, []),
        ("shard-1", 3, [ROOT_FLAG]),
        ("kcp", 4, []),
    ]


def test_a_refused_plan_exits_zero_and_says_why(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "shards.yaml"
    path.write_text(yaml.safe_dump_all(installation("0.28.0")), encoding="utf-8")
    assert main(["plan", "-f", str(path), "--to", "0.27.1"]) == 0
    out = capsys.readouterr().out
    assert "Refused: DowngradeRefused" in out
    assert "ns/root: kcp 0.27.1 would downgrade the running kcp 0.28.0" in out


@pytest.mark.parametrize(("target", "code"), [("0.27.1", 3), ("0.34.0", 0)])
def test_with_exit_code_a_refused_plan_exits_3_after_printing_it(
    target: str, code: int, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "shards.yaml"
    path.write_text(yaml.safe_dump_all(installation("0.28.0")), encoding="utf-8")
    assert main(["plan", "-f", str(path), "--to", target, "--exit-code", "-o", "json"]) == code
    outcomes = {step["outcome"] for step in json.loads(capsys.readouterr().out)["steps"]}
    assert outcomes == ({REFUSED} if code else {ROLLS})


@pytest.mark.parametrize(("extra", "code"), [([], 0), (["--exit-code"], 3)])
def test_with_exit_code_an_invalid_spec_exits_3(
    extra: list[str], code: int, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    objects = installation("0.27.1")
    objects[1]["spec"].update(pki={"issue": False}, rootShardKubeconfigSecretRef={"name": "r"})
    del objects[1]["spec"]["cache"]
    path = tmp_path / "shards.yaml"
    path.write_text(yaml.safe_dump_all(objects), encoding="utf-8")
    assert main(["plan", "-f", str(path), "--to", "0.34.0", *extra]) == code
    assert f"{INVALID}: {INVALID}" in capsys.readouterr().out


def test_with_exit_code_an_error_still_exits_2(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["plan", "-f", str(SAMPLES), "--to", "banana", "--exit-code"]) == 2
    assert capsys.readouterr().err.startswith("error: --to 'banana'")


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--to", "banana"], "error: --to 'banana': 'banana' is not a semantic version"),
        (["--to", "0.20.0"], "error: --to '0.20.0': kcp 0.20.0 is older than the oldest"),
        (["-f", "/nonexistent.yaml"], "error: [Errno 2] No such file or directory"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(
    args: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    extra = [] if "-f" in args else ["-f", str(SAMPLES)]
    assert main(["plan", *extra, *args]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1
    assert err[0].startswith(message)


def test_files_without_a_shard_are_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "ns.yaml"
    path.write_text("apiVersion: v1\nkind: Namespace\nmetadata: {name: x}\n", encoding="utf-8")
    assert main(["plan", "-f", str(path)]) == 2
    assert capsys.readouterr().err == "error: no Shard found\n"


def test_a_rollout_going_on_is_noted() -> None:
    rolled, deployments = as_rolled_out(installation("0.28.0"), RELEASE)
    rolled[0]["status"]["version"] = "0.27.1"
    steps = {s.name: s for s in plan_upgrade(rolled, deployments, None, RELEASE, cleanup())}
    assert steps["root"].notes == [
        "a rollout of kcp 0.28.0 is going on (every replica runs 0.27.1): the plan starts "
        "from its end"
    ]
    assert steps["shard-1"].notes == []


def test_a_non_root_shard_without_a_cache_kubeconfig_is_refused_for_any_release() -> None:
    objects = installation("0.27.1")
    objects[1]["spec"].update(pki={"issue": False}, rootShardKubeconfigSecretRef={"name": "r"})
    del objects[1]["spec"]["cache"]
    steps = planned(objects, "0.34.0")
    assert steps["shard-1"].outcome == INVALID
    assert "--cache-kubeconfig" in (steps["shard-1"].message or "")
    assert steps["root"].outcome == ROLLS
