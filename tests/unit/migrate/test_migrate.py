"""Table-driven tests of the pure migration core on small inputs."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from kcp_shard_operator.core.kcp.versions import Version
from kcp_shard_operator.migrate.locate import format_path
from kcp_shard_operator.migrate.spans import RefuseError, check_positions
from kcp_shard_operator.migrate.values import migrate_text, parse

RELEASE = Version(0, 33, 0)
FLAG = "--root-shard-kubeconfig-file"


@dataclass(frozen=True)
class Row:
    id: str
    given: str
    want: str | None
    """Expected text; None when the file is refused (left unchanged, with an error)."""
    says: str = ""
    """A fragment the report must contain."""
    prune: bool = False


ROWS = [
    Row("bom kept", "\ufeffargs: [--a, " + FLAG + "=/x]\n", "\ufeffargs: [--a]\n"),
    Row("lone CR line ends", "args:\r  - --a\r  - " + FLAG + "=/x\r", "args:\r  - --a\r"),
    Row(
        "unicode around",
        '# 日本語\nargs: ["é", ' + FLAG + "=/x]\n",
        '# 日本語\nargs: ["é"]\n',
    ),
    Row(
        "comment above at another column stays",
        "args:\n  - --a\n# note\n    # deeper\n  - " + FLAG + "=/x\n",
        "args:\n  - --a\n# note\n    # deeper\n",
    ),
    Row(
        "comment-like line inside a block scalar stays",
        "args:\n  - |\n    # not a comment\n  - " + FLAG + "=/x\n",
        "args:\n  - |\n    # not a comment\n",
    ),
    Row(
        "blank lines kept",
        "args:\n  - --a\n\n  - " + FLAG + "=/x\n\n  - --b\n",
        "args:\n  - --a\n\n\n  - --b\n",
    ),
    Row("anchored flow list emptied", f"a: &x [{FLAG}=/x]\nb: *x\n", "a: &x []\nb: *x\n"),
    Row("tagged block list emptied", f"args: !!seq\n  - {FLAG}=/x\n", "args: !!seq []\n"),
    Row(
        "flag followed by a non-scalar: only the flag goes",
        f"args:\n  - {FLAG}\n  - {{a: 1}}\n",
        "args:\n  - {a: 1}\n",
        says="no value followed it",
    ),
    Row("similar flag name untouched", f"args: [{FLAG}-extra=x]\n", None, says="inside a string"),
    Row("flag in a plain string untouched", f"cmd: kcp start {FLAG}=/x\n", None, says="by hand"),
    Row(
        "image by digest: version unknown, flag removed",
        f"c:\n  - image: ghcr.io/kcp-dev/kcp@sha256:abc\n    args: [{FLAG}=/x]\n",
        "c:\n  - image: ghcr.io/kcp-dev/kcp@sha256:abc\n    args: []\n",
    ),
    Row(
        "old kcp image keeps the flag",
        f"c:\n  - image: ghcr.io/kcp-dev/kcp:v0.32.3\n    args: [{FLAG}=/x]\n",
        None,
        says="kept: kcp 0.32.3",
    ),
    Row(
        "kcp-operator image tag keeps the flag",
        f"spec:\n  image: {{registry: r, tag: v0.32.3}}\n  extraArgs: [{FLAG}=/x]\n",
        None,
        says="kept: kcp 0.32.3",
    ),
    Row(
        "secret ref as first key of a list item",
        "shards:\n- rootShardKubeconfigSecretRef: {name: x}\n  version: 0.34.0\n  name: a\n",
        "shards:\n- version: 0.34.0\n  name: a\n",
        says="Secret x",
    ),
    Row(
        "secret ref in a flow mapping",
        "shards: [{name: a, version: 0.34.0, rootShardKubeconfigSecretRef: {name: x}}]\n",
        "shards: [{name: a, version: 0.34.0}]\n",
    ),
    Row(
        "quoted key",
        'shards:\n  - version: 0.34.0\n    "rootShardKubeconfigSecretRef": {name: x}\n'
        "    name: a\n",
        "shards:\n  - version: 0.34.0\n    name: a\n",
    ),
    Row(
        "secret ref kept without a version",
        "shards:\n  - name: a\n    rootShardKubeconfigSecretRef: {name: x}\n",
        None,
        says="no valid version",
    ),
    Row(
        "compact nested list refused",
        f"args:\n- - {FLAG}=/x\n  - --b\n",
        None,
        says="refusing to rewrite",
    ),
    Row("top-level list would be empty", f"- {FLAG}=/x\n", None, says="refusing to rewrite"),
    Row("top-level list item removed", f"- {FLAG}=/x\n- --b\n", "- --b\n"),
    Row(
        "mount whose item ends in an alias is refused, not damaged",
        "x: &a 1\nc:\n  - args: [" + FLAG + "=/etc/kcp/shard/kc]\n    volumeMounts:\n"
        "      - name: kc\n        mountPath: /etc/kcp/shard\n        extra: *a\n",
        None,
        says="ends in an alias",
        prune=True,
    ),
    Row(
        "mount still used by another argument is not reported",
        "c:\n  - args: [" + FLAG + "=/etc/kcp/k/root, --cache-kubeconfig=/etc/kcp/k/cache]\n"
        "    volumeMounts:\n      - name: kc\n        mountPath: /etc/kcp/k\n",
        "c:\n  - args: [--cache-kubeconfig=/etc/kcp/k/cache]\n"
        "    volumeMounts:\n      - name: kc\n        mountPath: /etc/kcp/k\n",
        prune=True,
    ),
    Row(
        "volume shared with another container stays",
        "spec:\n  containers:\n    - args: [" + FLAG + "=/etc/s/kc]\n"
        "      volumeMounts: [{name: s, mountPath: /etc/s}]\n"
        "    - volumeMounts: [{name: s, mountPath: /other}]\n"
        "  volumes:\n    - name: s\n      secret: {secretName: s}\n",
        "spec:\n  containers:\n    - args: []\n"
        "      volumeMounts: []\n"
        "    - volumeMounts: [{name: s, mountPath: /other}]\n"
        "  volumes:\n    - name: s\n      secret: {secretName: s}\n",
        prune=True,
    ),
    Row(
        "alias as the flag's value: both items go, the anchor stays",
        f"kc: &kc /etc/kcp/shard/kubeconfig\nargs:\n  - {FLAG}\n  - *kc\n  - --v=2\n",
        "kc: &kc /etc/kcp/shard/kubeconfig\nargs:\n  - --v=2\n",
        says=f"removed {FLAG} /etc/kcp/shard/kubeconfig",
    ),
    Row(
        "anchor on the removed value still used elsewhere: refused with what to do",
        f"args:\n  - {FLAG}\n  - &kc /etc/kc\nmount: *kc\n",
        None,
        says="the item to remove carries the anchor &kc, which *kc on line 4 still uses; "
        "write the value there instead of *kc",
    ),
    Row(
        "alias next to the flag in a flow list",
        f"v: &v --v=2\nargs: [*v, {FLAG}=/x, *v]\n",
        "v: &v --v=2\nargs: [*v, *v]\n",
    ),
    Row(
        "alias as the flag itself",
        f"f: &f {FLAG}=/x\nargs:\n  - *f\n  - --v=2\n",
        "f: &f " + FLAG + "=/x\nargs:\n  - --v=2\n",
        says="appears inside a string",
    ),
    Row(
        "underscore spelling",
        "args: [--root_shard_kubeconfig_file=/x, --v=2]\n",
        "args: [--v=2]\n",
    ),
    Row(
        "bare flag takes a value that starts with '-'",
        f"args: [{FLAG}, -x, --v=2]\n",
        "args: [--v=2]\n",
    ),
    Row(
        "renamed cache flag",
        "args:\n  - '--cache-server-kubeconfig-file=/c'  # old name\n  - --v=2\n",
        "args:\n  - '--cache-kubeconfig=/c'  # old name\n  - --v=2\n",
        says="renamed --cache-server-kubeconfig-file to --cache-kubeconfig",
    ),
    Row(
        "renamed cache flag next to the new one is removed",
        "args: [--cache-kubeconfig=/c, --cache-server-kubeconfig-file, /c]\n",
        "args: [--cache-kubeconfig=/c]\n",
    ),
    Row(
        "external-hostname is a no-op",
        "args: [--external-hostname=kcp:6443, --v=2]\n",
        "args: [--v=2]\n",
        says="--shard-external-url replaces it",
    ),
    Row(
        "front-proxy root kubeconfig is kept (still read) with advice from the release on",
        "containers:\n  - image: ghcr.io/kcp-dev/kcp:v0.34.0\n    command: [/kcp-front-proxy]\n"
        "    args: [--root-kubeconfig=/etc/kcp/root/kubeconfig]\n",
        None,
        says="kept --root-kubeconfig: deprecated from 0.33.0 on; the front-proxy discovers",
    ),
    Row(
        "front-proxy root kubeconfig kept before it",
        "containers:\n  - image: ghcr.io/kcp-dev/kcp:v0.32.3\n"
        "    args: [--root-kubeconfig=/etc/kcp/root/kubeconfig]\n",
        None,
        says="kept: kcp 0.32.3 still uses --root-kubeconfig",
    ),
    Row(
        "shard chart kcp.tag alone states the version",
        f"kcp:\n  tag: v0.32.3\n  extraFlags: [{FLAG}=/x]\n",
        None,
        says="kept: kcp 0.32.3 still uses",
    ),
    Row(
        "a tag that is no version keeps the flag",
        f"kcp:\n  tag: main\n  extraFlags: [{FLAG}=/x]\n",
        None,
        says="cannot tell the kcp version from 'main'",
    ),
    Row(
        "a Shard version that is no version keeps the flag",
        f"shards:\n  - version: latest\n    extraArgs: [{FLAG}=/x]\n",
        None,
        says="cannot tell the kcp version from 'latest'",
    ),
    Row("empty file", "", ""),
    Row("comments only", "# a\n# b\n", "# a\n# b\n"),
    Row("duplicate keys are invalid", "a: 1\na: 2\n", None, says="invalid YAML"),
    Row("tabs are invalid", "a:\n\t- b\n", None, says="invalid YAML"),
]


@pytest.mark.parametrize("row", ROWS, ids=lambda r: r.id)
def test_migrate(row: Row) -> None:
    result = migrate_text(row.given, deprecating_release=RELEASE, prune_mounts=row.prune)
    findings = result.changes + result.unneeded + result.warnings + result.errors
    if row.want is None:
        assert result.errors or not result.changed
        assert result.text == row.given or result.errors
    else:
        assert not result.errors
        assert result.text == row.want
    if row.says:
        assert any(row.says in f.message for f in findings), findings


def test_refused_file_reports_the_reason_once() -> None:
    result = migrate_text(f"- {FLAG}=/x\n", deprecating_release=RELEASE)
    assert result.changes == ()
    assert [e.message for e in result.errors] == [
        "refusing to rewrite this file: line 1: would leave an empty list that is not "
        "the value of a key; left unchanged"
    ]


@pytest.mark.parametrize(
    ("version", "removed"),
    [("0.32.3", False), ("0.34.0-rc.1", True), ("0.34.0", True), ("1.0.0", True)],
)
def test_secret_ref_follows_the_deprecating_release(version: str, removed: bool) -> None:
    text = f"shards:\n  - version: {version}\n    rootShardKubeconfigSecretRef: {{name: x}}\n"
    result = migrate_text(text, deprecating_release=RELEASE)
    assert ("rootShardKubeconfigSecretRef" not in result.text) == removed


def test_release_is_configurable() -> None:
    text = f"shards:\n  - version: 0.34.0\n    extraArgs: [{FLAG}=/x]\n"
    later = migrate_text(text, deprecating_release=Version(0, 35, 0))
    assert later.text == text
    assert "kept: kcp 0.34.0" in later.warnings[0].message
    assert migrate_text(text, deprecating_release=RELEASE).changed


def test_non_root_without_cache_is_an_error_whatever_the_version() -> None:
    text = "shards:\n  - name: a\n    version: 0.32.3\n    rootShardRef: {name: root}\n"
    result = migrate_text(text, deprecating_release=RELEASE)
    assert [(e.line, e.path) for e in result.errors] == [(2, "shards[0]")]
    assert "--cache-kubeconfig is required" in result.errors[0].message


@pytest.mark.parametrize(
    ("path", "shown"),
    [
        ((), "(document)"),
        (("spec", "args", 2), "spec.args[2]"),
        ((0, "a"), "[0].a"),
        (
            ("metadata", "labels", "app.kubernetes.io/name"),
            "metadata.labels['app.kubernetes.io/name']",
        ),
    ],
)
def test_format_path(path: tuple[str | int, ...], shown: str) -> None:
    assert format_path(path) == shown


POSITIONS = (
    "a: &x plain\nb: !!str 'quoted'\nc: \"double\"\nd: |\n  block\ne: *x\n"
    "f: [x, {k: v}]\ng:\nh: multi\n  line\n"
)


def test_positions_of_every_scalar_style_are_trusted() -> None:
    check_positions(POSITIONS, parse(POSITIONS))


@pytest.mark.parametrize("prefix", ["x: 1\n", "# c\n", "\n\n"])
def test_offsets_that_do_not_match_the_text_are_refused(prefix: str) -> None:
    """Nodes located in another text stand for a parser whose offsets are off."""
    with pytest.raises(RefuseError, match="offsets cannot be trusted"):
        check_positions(POSITIONS, parse(prefix + POSITIONS))


@pytest.mark.parametrize(
    ("sharding", "reported"),
    [
        ("{enabled: true}", False),
        ("{enabled: true, isRoot: true}", False),
        ("{enabled: false, isRoot: false}", False),
        ("{enabled: true, isRoot: false}", True),
    ],
)
def test_shard_chart_admin_secret_reported_for_non_root_only(sharding: str, reported: bool) -> None:
    text = f"kcp: {{tag: v0.34.0}}\ncache: {{enabled: true}}\nsharding: {sharding}\n"
    result = migrate_text(text, deprecating_release=RELEASE)
    assert not result.errors
    assert [
        f.message.startswith("Secret <release>-shard-shard-admin-kubeconfig")
        for f in result.unneeded
    ] == ([True] if reported else [])


@pytest.mark.parametrize(
    ("given", "kcp_version", "changed"),
    [
        (f"kcp:\n  tag: main\n  extraFlags: [{FLAG}=/x]\n", "0.34.0", True),
        (f"kcp:\n  tag: main\n  extraFlags: [{FLAG}=/x]\n", "0.32.3", False),
        (f"extraArgs: [{FLAG}=/x]\n", "0.32.3", False),
        (f"kcp:\n  tag: v0.32.3\n  extraFlags: [{FLAG}=/x]\n", "0.34.0", False),
    ],
)
def test_kcp_version_decides_where_the_file_cannot(
    given: str, kcp_version: str, changed: bool
) -> None:
    result = migrate_text(
        given, deprecating_release=Version(0, 34, 0), kcp_version=Version.parse(kcp_version)
    )
    assert result.changed is changed
    assert not result.errors
