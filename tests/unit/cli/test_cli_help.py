"""What a user meets first: ``--version`` and each command's ``--help``."""

from __future__ import annotations

import argparse
from importlib import metadata
from typing import Any

import kopf
import pytest
from kubernetes.client import Configuration

from kcp_shard_operator.cli import run
from kcp_shard_operator.cli.main import build_parser, main
from kcp_shard_operator.kube import credentials


def exit_code(argv: list[str]) -> int | str | None:
    with pytest.raises(SystemExit) as exited:
        main(argv)
    return exited.value.code


def test_version_is_the_installed_distribution_s(capsys: pytest.CaptureFixture[str]) -> None:
    assert exit_code(["--version"]) == 0
    assert capsys.readouterr() == (f"{metadata.version('kcp-shard-operator')}\n", "")


def test_version_without_the_distribution_is_one_line(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    def not_installed(name: str) -> str:
        raise metadata.PackageNotFoundError(name)

    monkeypatch.setattr(metadata, "version", not_installed)
    assert exit_code(["--version"]) == 2
    assert capsys.readouterr() == (
        "",
        "error: the kcp-shard-operator distribution is not installed\n",
    )


def commands() -> dict[str, argparse.ArgumentParser]:
    parser = build_parser()
    [sub] = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    return dict(sub.choices)


def help_text(command: str, capsys: pytest.CaptureFixture[str]) -> str:
    """``command --help``, its whitespace collapsed: phrases match however lines wrap."""
    assert exit_code([command, "--help"]) == 0
    return " ".join(capsys.readouterr().out.split())


READS_AND_WRITES = {
    "run": [
        "reads: the cluster (--kubeconfig, else $KUBECONFIG (its files merged), else in a pod "
        "its ServiceAccount, else ~/.kube/config; --context picks a context; the context's "
        "namespace does not narrow what is watched): watches Shards, CacheServers, FrontProxies "
        "and Secrets",
        "with --kcp-checks, each kcp shard, through its admin kubeconfig",
        "writes: applies (server-side) the Deployments, Services, PodDisruptionBudgets, "
        "PersistentVolumeClaims and ConfigMaps",
        "creates and updates the Secrets it issues (spec.pki); no other Secret",
        "patches the status of Shards, CacheServers and FrontProxies; creates Events",
        "deletes the stale apiexport-identity-cache ConfigMap of upgraded non-root shards",
        "in the backup sidecar of Shards with spec.backup (pods/exec): etcd snapshots",
        "serves /healthz on --liveness-port and /metrics on --metrics-port; logs on stderr",
    ],
    "render": [
        "reads: the files of -f ('-': standard input); nothing in the cluster",
        "writes: the objects as YAML on stdout; notes and errors on stderr",
    ],
    "plan": [
        "reads: without -f, the cluster",
        "lists Shards, CacheServers and FrontProxies in each -n namespace (without -n: the "
        "context's namespace if it names one, else every namespace; -A: every namespace), gets "
        "the Deployment of each",
        "with -f, the files instead",
        "writes: the plan on stdout (-o), errors on stderr; nothing in the cluster",
        "exit codes: 0 the plan is printed; without --exit-code, also when a step is refused",
        "3 with --exit-code: the plan is printed and a step is Refused or InvalidSpec",
    ],
    "crd": ["reads: nothing", "writes: the CRDs as YAML on stdout; nothing in the cluster"],
    "api-reference": [
        "reads: nothing",
        "writes: the API reference as Markdown on stdout; nothing in the cluster",
    ],
    "migrate-values": [
        "reads: each PATH ('-': standard input), or the values file of --from-shard-chart",
        "writes: the migrated YAML on stdout; with --in-place, the files instead",
        "with --diff, a unified diff on stdout",
    ],
    "cleanup-identitycache": [
        "reads: the --kubeconfig file (and the files it names; its exec plugin runs)",
        "gets the LogicalCluster of logical cluster root",
        "writes: on the shard, unless --dry-run: deletes the ConfigMap",
    ],
    "kubeconfig": [
        "gets the Shard (or FrontProxy) NAME and the Secret holding the kubeconfig",
        "writes: the kubeconfig on stdout, or in the -o FILE; nothing in the cluster",
    ],
    "backup": [
        "reads: the cluster",
        "the Shard NAME and its status",
        "writes: the annotation kcpshard.dev/backup of the Shard",
        "1 it failed (the condition BackedUp's reason and message), or no answer in --timeout",
    ],
    "restore": [
        "the Shard NAME and its status",
        "writes: the annotation kcpshard.dev/restore of the Shard",
        "with --set-version also spec.version (and spec.image.tag, when set) of each Shard",
        "never without the flag",
        "1 refused or failed",
    ],
    "backups": [
        "the Shard NAME, or every Shard of the namespace",
        "with --claim, the PersistentVolumeClaim and the log of the pod it runs",
        "writes: the table on stdout; a manifest that cannot be used",
        "nothing in the cluster without --claim",
        "with --claim, a pod kcp-backup-listing-<random> on the backup image",
        "deleted once its log is read, also on failure or Ctrl-C",
        "1 no such Shard or claim, or the pod failed or did not end in --timeout",
    ],
}


def test_every_command_s_reads_and_writes_are_checked_here() -> None:
    assert set(commands()) == set(READS_AND_WRITES)


@pytest.mark.parametrize(("command", "phrases"), READS_AND_WRITES.items())
def test_each_command_s_help_says_what_it_reads_and_writes(
    command: str, phrases: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    text = help_text(command, capsys)
    for phrase in phrases:
        assert phrase in text, phrase


@pytest.mark.parametrize("command", sorted(READS_AND_WRITES))
def test_every_option_has_help_and_shows_a_default_it_has(command: str) -> None:
    for action in commands()[command]._actions:
        name = "/".join(action.option_strings) or action.dest
        assert action.help, name
        if action.default not in (None, False, [], argparse.SUPPRESS):
            assert "default" in action.help, name


def test_run_s_help_says_it_watches_every_namespace_without_n(
    capsys: pytest.CaptureFixture[str],
) -> None:
    text = help_text("run", capsys)
    assert "Without -n it watches every namespace." in text
    assert "watch this namespace only (repeatable; without -n: every namespace)" in text
    assert "-A, --all-namespaces watch every namespace, as without -n" in text


@pytest.mark.parametrize(
    ("args", "clusterwide", "namespaces"),
    [([], True, []), (["-A"], True, []), (["-n", "a", "-n", "b"], False, ["a", "b"])],
)
def test_run_watches_what_its_help_says(
    args: list[str], clusterwide: bool, namespaces: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    watched: dict[str, Any] = {}
    monkeypatch.setattr(run, "configure_logging", lambda *_: None)
    cluster = credentials.Credentials(Configuration(host="https://api:6443"), lambda: None)
    monkeypatch.setattr(run, "cluster_credentials", lambda _: cluster)
    monkeypatch.setattr(run, "Kube", lambda *_, **__: object())
    monkeypatch.setattr(kopf, "run", lambda **kwargs: watched.update(kwargs))
    assert main(["run", "--metrics-port", "0", *args]) == 0
    assert (watched["clusterwide"], watched["namespaces"]) == (clusterwide, namespaces)
