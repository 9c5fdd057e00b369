"""Turns fuzz bytes into choices, and a JSON document into a mutated one.

The fuzzers hand every target raw bytes (atheris's coverage-guided ones, or
hypothesis's); structured targets read them through a ``Chooser`` to mutate a valid
seed document, so that deep fields are reached and not only the JSON parser.
Deterministic: the same bytes give the same document.
"""

from __future__ import annotations

import copy
from typing import Any

# Values that have broken JSON consumers before: wrong types, edges of integer ranges,
# NUL and lone surrogates, path traversal, huge and empty strings.
INTERESTING: list[Any] = [
    None, True, False, 0, -1, 1, 2**31 - 1, 2**31, 2**32, 2**63 - 1, 2**63, 2**64, -(2**63) - 1,
    10**400, 1.5, -0.0, 1e308, float("inf"), "", " ", "a", "0", "-1", "true", "null",
    "\x00", "a\x00b", "\ud800", "\n", "../../../../etc/passwd", "/", "..", ".", "/proc/self",
    "/dev/null", "x" * 5000, "%CONTAINER_SANDBOX_MOUNT_POINT%", "$CONTAINER_SANDBOX_MOUNT_POINT",
    "sha256:" + "0" * 64, "sha256:../../x", "sha512:ab", "RLIMIT_NOFILE", "CAP_SYS_ADMIN",
    "bind", "rbind", "ro", "host", [], {}, [None], [""], ["a", 1], {"": ""}, {"a": None},
]  # fmt: skip


class Chooser:
    """Reads choices from bytes; once they run out every choice is 0 (the first)."""

    __slots__ = ("data", "pos")

    def __init__(self, data: bytes) -> None:
        self.data = data
        self.pos = 0

    def byte(self) -> int:
        if self.pos >= len(self.data):
            return 0
        self.pos += 1
        return self.data[self.pos - 1]

    def below(self, n: int) -> int:
        """A number in [0, n)."""
        if n <= 1:
            return 0
        value = self.byte()
        if n > 256:
            value = value << 8 | self.byte()
        return value % n

    def pick(self, items: list[Any] | tuple[Any, ...]) -> Any:
        return items[self.below(len(items))]

    def text(self, limit: int = 24) -> str:
        size = self.below(limit + 1)
        return bytes(self.byte() for _ in range(size)).decode("utf-8", "surrogateescape")

    def value(self, depth: int = 0) -> Any:
        kind = self.below(8 if depth < 3 else 5)
        if kind < 3:
            return copy.deepcopy(self.pick(INTERESTING))
        if kind == 3:
            return self.text()
        if kind == 4:
            return self.below(1 << 16) - 100
        if kind == 5:
            return [self.value(depth + 1) for _ in range(self.below(4))]
        return {self.text(8): self.value(depth + 1) for _ in range(self.below(4))}


def _paths(doc: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    out = [prefix]
    if isinstance(doc, dict):
        for key, value in doc.items():
            out += _paths(value, (*prefix, key))
    elif isinstance(doc, list):
        for i, value in enumerate(doc):
            out += _paths(value, (*prefix, i))
    return out


def _get(doc: Any, path: tuple[Any, ...]) -> Any:
    for part in path:
        doc = doc[part]
    return doc


def mutate(seed: Any, chooser: Chooser, keys: list[str] | tuple[str, ...] = ()) -> Any:
    """A copy of ``seed`` with a few changes picked by ``chooser``: a value replaced
    (by an interesting one, a random one, or another part of the document), a key
    removed or added (``keys``: names worth adding), an item duplicated."""
    doc = copy.deepcopy(seed)
    for _ in range(1 + chooser.below(4)):
        paths = _paths(doc)
        path = chooser.pick(paths)
        op = chooser.below(5)
        if not path:
            if op == 0:
                doc = chooser.value()
            continue
        parent = _get(doc, path[:-1])
        last = path[-1]
        if op == 0:
            parent[last] = chooser.value()
        elif op == 1:
            parent[last] = copy.deepcopy(_get(doc, chooser.pick(paths)))
        elif op == 2:
            del parent[last]
        elif op == 3 and isinstance(parent, dict):
            name = chooser.pick(list(keys)) if keys and chooser.below(2) else chooser.text(8)
            parent[name] = chooser.value()
        elif op == 3 and isinstance(parent, list):
            parent.insert(last, copy.deepcopy(parent[last]))
        else:
            target = _get(doc, path)
            if isinstance(target, str):
                parent[last] = chooser.pick([target + chooser.text(4), "../" + target, ""])
            elif isinstance(target, int) and not isinstance(target, bool):
                parent[last] = chooser.pick([-target, target + 1, target * 2**32, -1])
            else:
                parent[last] = chooser.value()
    return doc


def all_keys(doc: Any) -> list[str]:
    """Every object key in ``doc`` (the names a mutation may add elsewhere)."""
    out: set[str] = set()
    for path in _paths(doc):
        if path and isinstance(path[-1], str):
            out.add(path[-1])
    return sorted(out)
