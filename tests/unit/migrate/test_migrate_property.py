"""Property-style tests on generated YAML (seeded, so every failure reproduces).

1. A file without the flag comes back byte for byte, whatever its layout.
2. Inserting flag items into a file's block argument lists, then migrating,
   gives back exactly the file before the insertion.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field

import pytest
from ruamel.yaml import YAML

from kcp_shard_operator.core.kcp.versions import DEFAULT_DEPRECATING_RELEASE
from kcp_shard_operator.migrate.values import migrate_text

FLAG = "--root-shard-kubeconfig-file"
SEEDS = range(300)
WORDS = ["alpha", "beta", "kcp", "shard", "cache", "front-proxy", "etcd", "tls", "Ω", "naïve"]
ARG_KEYS = ["args", "extraArgs", "extraFlags", "command"]
SCALARS = [
    "plain",
    "two words",
    "42",
    "3.14",
    "true",
    "~",
    "''",
    '""',
    "'single # not a comment'",
    '"double \\" quote: #x"',
    "'it''s'",
    "/etc/kcp/tls/server/tls.crt",
    "https://kcp.example.com:6443",
    "2026-12-02",
    "é",
]
ARGS = [
    "--v=2",
    "--shard-name=beta",
    "'--cache-kubeconfig=/etc/kcp/cache/kubeconfig'",
    '"--batteries-included=workspace-types,admin"',
    "--root-directory=/data",
    "--token-auth-file",
    "/etc/kcp/token/auth.csv",
]


@dataclass
class Line:
    text: str
    arg_indent: int | None = None
    """Set on a single-line item of a block argument list: its dash column."""


@dataclass
class Generator:
    rng: random.Random
    lines: list[Line] = field(default_factory=list)
    keys: int = 0
    anchors: list[str] = field(default_factory=list)

    def key(self) -> str:
        self.keys += 1
        return f"{self.rng.choice(WORDS[:8])}{self.keys}"

    def comment(self) -> str:
        return "# " + " ".join(self.rng.choices(WORDS, k=self.rng.randint(0, 4)))

    def trailer(self) -> str:
        roll = self.rng.random()
        if roll < 0.25:
            return "  " + self.comment()
        if roll < 0.35:
            return " " * self.rng.randint(1, 3)
        return ""

    def emit(self, text: str, arg_indent: int | None = None) -> None:
        self.lines.append(Line(text, arg_indent))

    def decorations(self, indent: int) -> None:
        if self.rng.random() < 0.2:
            self.emit("")
        for _ in range(self.rng.choice([0, 0, 0, 1, 2])):
            self.emit(" " * indent + self.comment())

    def mapping(self, indent: int, depth: int) -> None:
        for _ in range(self.rng.randint(1, 4)):
            self.decorations(indent)
            pad = " " * indent
            key = self.key()
            roll = self.rng.random()
            if roll < 0.25 and depth < 3:
                self.emit(f"{pad}{key}:{self.trailer()}")
                self.mapping(indent + self.rng.choice([2, 4]), depth + 1)
            elif roll < 0.45:
                self.arg_list(pad + self.rng.choice(ARG_KEYS) + key, indent)
            elif roll < 0.55:
                items = ", ".join(self.rng.choices(SCALARS + ARGS, k=self.rng.randint(0, 3)))
                self.emit(f"{pad}{key}: [{items}]{self.trailer()}")
            elif roll < 0.62:
                self.emit(f"{pad}{key}: {{a: 1, b: [x, y]}}{self.trailer()}")
            elif roll < 0.7:
                style = self.rng.choice(["|", "|-", ">", ">-", "|+"])
                self.emit(f"{pad}{key}: {style}")
                for _ in range(self.rng.randint(1, 3)):
                    body = " ".join(self.rng.choices([*WORDS, "#", "- x"], k=3))
                    self.emit(f"{pad}  {body}{' ' * self.rng.randint(0, 2)}")
            elif roll < 0.78 and depth < 3:
                self.emit(f"{pad}{key}:{self.trailer()}")
                self.seq_of_mappings(indent + 2, depth + 1)
            elif roll < 0.85 and self.anchors:
                self.emit(f"{pad}{key}: *{self.rng.choice(self.anchors)}{self.trailer()}")
            elif roll < 0.9:
                anchor = f"anc{self.keys}"
                self.anchors.append(anchor)
                self.emit(f"{pad}{key}: &{anchor} {self.rng.choice(SCALARS)}{self.trailer()}")
            else:
                self.emit(f"{pad}{key}: {self.rng.choice(SCALARS)}{self.trailer()}")

    def seq_of_mappings(self, indent: int, depth: int) -> None:
        for _ in range(self.rng.randint(1, 2)):
            self.decorations(indent)
            pad = " " * indent
            self.emit(f"{pad}- {self.key()}: {self.rng.choice(SCALARS)}{self.trailer()}")
            if self.rng.random() < 0.5:
                self.mapping(indent + 2, depth + 1)

    def arg_list(self, head: str, indent: int) -> None:
        self.emit(f"{head}:{self.trailer()}")
        dash = indent + self.rng.choice([0, 2, 4])
        for i in range(self.rng.randint(1, 4)):
            if i and self.rng.random() < 0.2:
                self.emit(" " * dash + self.comment())
            self.emit(f"{' ' * dash}- {self.rng.choice(ARGS)}{self.trailer()}", arg_indent=dash)

    def document(self) -> str:
        docs = []
        for _ in range(self.rng.choice([1, 1, 2, 3])):
            self.lines = []
            self.anchors = []
            if self.rng.random() < 0.3:
                self.emit(self.comment())
            self.mapping(0, 0)
            docs.append(self.lines)
        out: list[Line] = []
        for i, doc in enumerate(docs):
            if i or self.rng.random() < 0.3:
                out.append(Line("---"))
            out.extend(doc)
            if self.rng.random() < 0.1:
                out.append(Line("..."))
        self.lines = out
        return self.join(out)

    def join(self, lines: list[Line]) -> str:
        return "".join(line.text + "\n" for line in lines)

    def with_flags(self) -> str:
        """The document with flag items inserted after some argument items."""
        out: list[Line] = []
        for line in self.lines:
            out.append(line)
            if line.arg_indent is not None and self.rng.random() < 0.4:
                pad = " " * line.arg_indent
                if self.rng.random() < 0.5:
                    out.append(Line(f"{pad}- {FLAG}=/etc/kcp/shard/kubeconfig{self.trailer()}"))
                else:
                    out.append(Line(f"{pad}- {FLAG}{self.trailer()}"))
                    out.append(Line(f"{pad}- '/etc/kcp/shard/kubeconfig'{self.trailer()}"))
        return self.join(out)


def crlf(text: str, rng: random.Random) -> str:
    return text.replace("\n", "\r\n") if rng.random() < 0.3 else text


def migrate(text: str) -> str:
    result = migrate_text(text, deprecating_release=DEFAULT_DEPRECATING_RELEASE)
    assert not result.errors, result.errors
    assert not result.warnings, result.warnings
    return result.text


@pytest.mark.parametrize("seed", SEEDS)
def test_file_without_flag_is_unchanged(seed: int) -> None:
    rng = random.Random(seed)
    text = crlf(Generator(rng).document(), rng)
    list(YAML(typ="safe", pure=True).compose_all(text))
    result = migrate_text(text, deprecating_release=DEFAULT_DEPRECATING_RELEASE)
    assert (result.text, result.changes, result.errors) == (text, (), ())


@pytest.mark.parametrize("seed", SEEDS)
def test_removing_inserted_flags_restores_the_file(seed: int) -> None:
    rng = random.Random(seed)
    gen = Generator(rng)
    before = gen.document()
    after = gen.with_flags()
    use_crlf = rng.random() < 0.3
    if use_crlf:
        before, after = before.replace("\n", "\r\n"), after.replace("\n", "\r\n")
    assert migrate(after) == before
    assert migrate(before) == before


def flow_list(rng: random.Random, items: list[str]) -> str:
    """``items`` as a flow list with random spacing, line breaks, comments and trailing comma."""
    if rng.random() < 0.5:
        sep = rng.choice([",", ", ", " , ", ",  "])
        return "[" + sep.join(items) + rng.choice(["", ","] if items else [""]) + "]"
    body = "".join(f"    {item},{rng.choice(['', '  # c'])}\n" for item in items)
    return "[\n" + body + "  ]"


@pytest.mark.parametrize("seed", SEEDS)
def test_flow_lists_lose_only_the_flag(seed: int) -> None:
    rng = random.Random(seed)
    kept = rng.choices(ARGS, k=rng.randint(0, 4))
    units = [[arg] for arg in kept]
    for _ in range(rng.randint(1, 3)):
        flag = (
            [f"{FLAG}=/etc/kcp/shard/kubeconfig"]
            if rng.random() < 0.5
            else [FLAG, '"/etc/kcp/shard/kubeconfig"']
        )
        units.insert(rng.randint(0, len(units)), flag)
    items = [item for unit in units for item in unit]
    head = "# header\nbefore: 1\n"
    tail = "after: [a, b]  # kept\n"
    text = f"{head}args: {flow_list(rng, items)}  # list comment\n{tail}"
    result = migrate(text)
    yaml = YAML(typ="safe", pure=True)
    assert yaml.load(result)["args"] == yaml.load(f"args: [{', '.join(kept)}]")["args"]
    assert result.startswith(head)
    assert result.endswith("  # list comment\n" + tail)
    assert migrate(result) == result
