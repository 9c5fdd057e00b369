"""The fenced blocks of the project's Markdown pages, for the tests that check or run them.

A test reads two kinds of block:

* a *snippet*: the block right after a ``<!-- snippet: NAME -->`` line, a configuration the
  tests hand to a real client (docs/operators.md's containerd, podman and docker entries);
* an *example*: a block whose info string's second word is ``example``
  (```` ```sh example ````), what a reader types; tests/integration/test_docs_examples.py
  runs every one. The words after ``example`` are its settings: ``name=NAME`` (another page
  may start from it), ``after=NAME[,NAME...]`` (run those examples first: the example's
  preconditions, themselves documented), ``needs=registry`` (a registry at
  ``127.0.0.1:5000``) or ``needs=systemd`` (systemd runs the host), ``ci=COMMAND`` (the lines
of that command are CI's, which runs it: ``scripts/test``). A block whose info string
  is ``text output``, next after an example, is what that example prints: its lines, in
  that order, among the example's output (``...`` in a line stands for any text).

One parser, so that what a page shows and what a test runs cannot drift apart.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

from tests.helpers import REPO

FENCE = re.compile(r"^(?P<indent>[ \t]*)(?P<fence>```+)(?P<info>[^`]*)$")
SNIPPET = re.compile(r"^\s*<!-- snippet: (?P<name>[\w.-]+) -->\s*$")

USER_PAGES = (
    REPO / "README.md",
    *sorted((REPO / "docs").glob("*.md")),
    *sorted((REPO / "docs" / "commands").glob("*.md")),
)
"""The pages written for users. docs/DEVELOPING.md is for contributors (its shell lines are
measuring tools); docs/operators.md's client configurations are snippets, which the
compat and CRI suites hand to the real clients."""

RUN_PAGES = tuple(p for p in USER_PAGES if p.name not in ("DEVELOPING.md", "operators.md"))
"""The pages whose every shell block is an example that a test runs."""


@dataclass
class Block:
    """One fenced block: where it is, its info string's words, its text."""

    path: Path
    line: int  # of the opening fence, from 1
    info: list[str]
    text: str
    snippet: str | None = None  # the name of the snippet marker right above it
    output: str | None = None  # an example's ``text output`` block, if one follows it
    settings: dict[str, str] = field(default_factory=dict)

    @property
    def where(self) -> str:
        return f"{self.path.relative_to(REPO)}:{self.line}"

    @property
    def language(self) -> str:
        return self.info[0] if self.info else ""

    @property
    def is_example(self) -> bool:
        return len(self.info) > 1 and self.info[1] == "example"

    @property
    def is_output(self) -> bool:
        return self.info == ["text", "output"]

    @property
    def after(self) -> list[str]:
        names = self.settings.get("after", "")
        return [n for n in names.split(",") if n]

    @property
    def needs(self) -> list[str]:
        return [n for n in self.settings.get("needs", "").split(",") if n]


def blocks(path: Path) -> list[Block]:
    """Every fenced block of ``path``, in order; an example carries the output block that
    follows it (before any other fenced block)."""
    found: list[Block] = []
    lines = path.read_text().splitlines()
    marker: str | None = None
    i = 0
    while i < len(lines):
        opening = FENCE.match(lines[i])
        snippet = SNIPPET.match(lines[i])
        if snippet:
            marker = snippet.group("name")
        if not opening:
            if lines[i].strip() and not snippet:
                marker = None
            i += 1
            continue
        indent, fence = opening.group("indent"), opening.group("fence")
        body: list[str] = []
        j = i + 1
        while j < len(lines) and lines[j].strip() != fence:
            body.append(lines[j][len(indent) :] if lines[j].startswith(indent) else lines[j])
            j += 1
        if j == len(lines):
            raise ValueError(f"{path}:{i + 1}: a fenced block that never closes")
        info = opening.group("info").split()
        block = Block(path, i + 1, info, "\n".join(body) + "\n", marker)
        block.settings = dict(w.split("=", 1) for w in info[2:] if "=" in w)
        if block.is_output and found and found[-1].is_example and found[-1].output is None:
            found[-1].output = block.text
        found.append(block)
        marker = None
        i = j + 1
    return found


def snippet(path: Path, name: str) -> str:
    """The text of the block after ``<!-- snippet: NAME -->`` in ``path``."""
    for block in blocks(path):
        if block.snippet == name:
            return block.text
    raise AssertionError(f"snippet {name!r} missing from {path}")


def examples(path: Path) -> list[Block]:
    return [b for b in blocks(path) if b.is_example]


def named_examples() -> dict[str, Block]:
    """Every example with a ``name=``, across the pages users read (a name is unique)."""
    named: dict[str, Block] = {}
    for path in RUN_PAGES:
        for block in examples(path):
            name = block.settings.get("name")
            if name is None:
                continue
            if name in named:
                raise AssertionError(
                    f"{block.where}: example name {name!r} is taken by {named[name].where}"
                )
            named[name] = block
    return named


def output_matches(expected: str, output: str) -> str | None:
    """None when every line of ``expected`` appears in ``output``, in order (``...`` for
    any text); else the first line that did not."""
    lines = output.splitlines()
    at = 0
    for wanted in (w.strip() for w in expected.splitlines()):
        # a line is searched for anywhere in an output line: ``...`` at its ends says so
        wanted = wanted.removeprefix("... ").removesuffix(" ...").strip()
        if not wanted:
            continue
        pattern = re.compile(".*".join(re.escape(part) for part in wanted.split("...")))
        while at < len(lines) and not pattern.search(lines[at]):
            at += 1
        if at == len(lines):
            return wanted
        at += 1
    return None
