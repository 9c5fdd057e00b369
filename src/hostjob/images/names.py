"""The name index: image names -> manifest digests (containerd's image store).

    images.json     {"version": 1, "images": {NAME: NameRecord}}, replaced atomically
    images.lock     taken for every change (read, change, write)

Names are canonical (``busybox`` is ``docker.io/library/busybox:latest``). An image
is found by a name, a ``name@digest``, a manifest digest, or a prefix (4 hex digits
or more) of its manifest digest or ID (the config digest), as ``lookup`` says.
"""

from __future__ import annotations

from hostjob.errors import InvalidArgument
from hostjob.images import reference as refs
from hostjob.images import root as storedir
from hostjob.images.errors import ImageError, ImageNotFound, InvalidReference

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable, Iterable
    from typing import Any

    from hostjob.images.content import ContentStore
    from hostjob.images.root import StoreRoot

VERSION = 1
_HEX = frozenset("0123456789abcdef")


class NameRecord:
    """What one name points at, and where the image came from."""

    __slots__ = ("config", "index", "manifest", "name", "source", "tagged", "verified")

    def __init__(
        self,
        name: str,
        manifest: str,
        *,
        config: str | None = None,
        index: str | None = None,
        source: str | None = None,
        tagged: str | None = None,
        verified: dict[str, Any] | None = None,
    ) -> None:
        self.name = name
        self.manifest = manifest  # the manifest digest
        self.config = config  # the config digest: the image ID
        self.index = index  # the index it was chosen from, if any
        self.source = source  # the reference it was pulled or imported from
        self.tagged = tagged  # when, RFC 3339
        # What the signature policy decided when it came in (``trust.evaluate.Verdict``
        # as JSON: policy, section, by); None for an image stored before hostjob asked.
        self.verified = verified

    @classmethod
    def from_json(cls, name: str, data: object, what: str) -> NameRecord:
        manifest = data.get("manifest") if type(data) is dict else None
        if type(data) is not dict or type(manifest) is not str:
            raise ImageError(f"{what} is corrupt: {name!r} has no manifest digest")

        def text(key: str) -> str | None:
            value = data.get(key)
            return value if type(value) is str else None

        verified = data.get("verified")
        return cls(
            name,
            manifest,
            config=text("config"),
            index=text("index"),
            source=text("source"),
            tagged=text("tagged"),
            verified=verified if type(verified) is dict else None,
        )

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "manifest": self.manifest,
            "config": self.config,
            "index": self.index,
            "source": self.source,
            "tagged": self.tagged,
        }
        if self.verified is not None:
            out["verified"] = self.verified
        return out

    def __repr__(self) -> str:
        return f"NameRecord({self.name!r}, {self.manifest!r})"


class NameIndex:
    """The names of one store."""

    __slots__ = ("content", "root")

    def __init__(self, root: StoreRoot, content: ContentStore) -> None:
        self.root = root
        self.content = content

    @property
    def path(self) -> str:
        return self.root.join("images.json")

    def records(self) -> dict[str, NameRecord]:
        """Every name, read without a lock (the file is replaced whole)."""
        self.root.check()
        try:
            data = storedir.read_json(self.path)
        except FileNotFoundError:
            return {}
        except ValueError as err:
            raise ImageError(f"{self.path} is corrupt: {err}") from err
        images = data.get("images") if type(data) is dict else None
        if type(images) is not dict:
            raise ImageError(f"{self.path} is corrupt: no 'images' object")
        return {name: NameRecord.from_json(name, r, self.path) for name, r in images.items()}

    def _change(self, change: Callable[[dict[str, NameRecord]], None]) -> None:
        self.root.ensure()
        with self.root.lock("images.lock"):
            records = self.records()
            change(records)
            images = {name: record.to_json() for name, record in records.items()}
            storedir.write_json(self.path, {"version": VERSION, "images": images})

    def tag(self, record: NameRecord) -> None:
        """Point ``record.name`` (canonical) at its manifest, replacing what it named."""

        def change(records: dict[str, NameRecord]) -> None:
            records[record.name] = record

        self._change(change)

    def untag(self, names: Iterable[str]) -> None:
        def change(records: dict[str, NameRecord]) -> None:
            for name in names:
                records.pop(name, None)

        self._change(change)

    def lookup(self, name: str) -> tuple[list[str], str]:
        """``(names, manifest digest)`` for a name, a digest or an image-ID prefix;
        read from the names alone (a broken image is found too)."""
        records = self.records()
        if name in records:
            return [name], records[name].manifest
        try:
            canonical: str | None = refs.normalize(name)
        except InvalidReference:
            canonical = None
        if canonical and canonical in records:
            return [canonical], records[canonical].manifest
        if canonical and "@" in canonical:
            digest = canonical.rpartition("@")[2]
            names = [n for n, r in records.items() if r.manifest == digest]
            if names or self.content.has(digest):
                return names, digest
        key = name.removeprefix("sha256:")
        if len(key) >= 4 and _HEX.issuperset(key):
            found: dict[str, list[str]] = {}
            for n, record in records.items():
                ids = (record.manifest, record.config or "")
                if any(d.removeprefix("sha256:").startswith(key) for d in ids):
                    found.setdefault(record.manifest, []).append(n)
            if len(found) == 1:
                digest, names = next(iter(found.items()))
                return sorted(names), digest
            if len(found) > 1:
                raise InvalidArgument(f"image ID prefix {name!r} is ambiguous")
        raise ImageNotFound(f"no such image: {name}")
