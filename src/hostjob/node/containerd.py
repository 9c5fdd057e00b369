"""hostjob's runtime handlers in a node's containerd: the drop-in file, the one line of
the node's own configuration that imports it, and how both are undone.

containerd reads ``/etc/containerd/config.toml`` and then each file its ``imports`` name,
in order. How an imported file merges depends on the configuration's version:

* **version 2** (containerd 1.6 and 1.7): a plugin's section in an imported file
  replaces the whole section read before it, and the CRI plugin forgets its built-in
  ``runc`` once a file names any runtime. So the drop-in holds the CRI plugin's whole
  section as the node has it (the main file's, or the last import's that has one), with
  the handlers added, and ``runc`` as containerd's default when none is named.
* **version 3** (containerd 2.x): imported sections merge key by key, and the drop-in
  holds the handlers alone (``io.containerd.cri.v1.runtime``).

The drop-in lives in a directory of its own, ``/etc/containerd/hostjob``, named last in
``imports``, so no glob of the node's picks it up out of order. Adding that entry is
the one change to the node's file: a new line before its first table, or the entry
appended to a one-line ``imports`` array. Each change is read back with ``tomllib``
and must parse to the node's configuration plus the entry alone; anything else (a
version 1 file, a version the containerd does not speak, an array over several lines,
a value the writer cannot write) is ``Unmergeable`` before anything is written. The
handlers use the cgroup driver the node's own default runtime uses (``SystemdCgroup``).
"""

from __future__ import annotations

import copy
import fnmatch
import glob
import tomllib
from typing import Any

from hostjob.errors import HostjobError
from hostjob.node import toml

CONFIG = "/etc/containerd/config.toml"
DROPIN_DIR = "/etc/containerd/hostjob"
DROPIN = f"{DROPIN_DIR}/runtimes.toml"
CRI_V2 = "io.containerd.grpc.v1.cri"
CRI_V3 = "io.containerd.cri.v1.runtime"
RUNC_V2 = "io.containerd.runc.v2"
# Annotations a pod may pass down to hostjob (the operators' guide's handler).
ANNOTATIONS = ["io.hostjob.*", "microsoft.com/hostprocess-*"]
MARK = "hostjob node installer"
CONF_D = "/etc/containerd/conf.d/*.toml"  # containerd 2.2's default imports


class Unmergeable(HostjobError):
    """The node's containerd configuration cannot take the drop-in safely: nothing was
    changed."""


def containerd_major(version: str) -> int:
    """1 for ``1.6.20~ds1``, 2 for ``v2.0.4``."""
    digits = version.lstrip("v").split(".", 1)[0]
    if not digits.isdigit():
        raise Unmergeable(f"containerd's version {version!r} is not one the installer reads")
    return int(digits)


class Plan:
    """What installing changes: the node's file (``before`` -> ``after``; None: absent,
    or left as it is when both are equal) and the drop-in's text."""

    __slots__ = ("after", "before", "dropin", "systemd_cgroup", "version")

    def __init__(
        self, before: bytes | None, after: bytes | None, dropin: str, version: int, systemd: bool
    ) -> None:
        self.before = before
        self.after = after
        self.dropin = dropin
        self.version = version
        self.systemd_cgroup = systemd


def _parse(text: bytes, where: str) -> dict[str, Any]:
    try:
        return tomllib.loads(text.decode())
    except (UnicodeDecodeError, tomllib.TOMLDecodeError) as err:
        raise Unmergeable(f"{where} is not TOML the installer can read: {err}") from err


def _section(document: dict[str, Any], *names: str) -> Any:
    for name in names:
        if not isinstance(document, dict):
            return None
        document = document.get(name)  # type: ignore[assignment]
    return document


def _imports(document: dict[str, Any]) -> list[str]:
    found = document.get("imports", [])
    if not isinstance(found, list) or not all(isinstance(p, str) for p in found):
        raise Unmergeable(f"{CONFIG}: imports is not a list of paths")
    return found


def imported_files(document: dict[str, Any], read: Any) -> list[tuple[str, dict[str, Any]]]:
    """The files the node's configuration imports, in containerd's order (each glob
    sorted), but the drop-in: (path, parsed). ``read(path)``: the file's bytes, or None
    where it is absent; ``read(pattern, glob=True)``: the paths a glob matches."""
    out = []
    for entry in _imports(document):
        if not entry.startswith("/"):
            entry = f"{CONFIG.rpartition('/')[0]}/{entry}"
        names = sorted(read(entry, glob=True)) if glob.has_magic(entry) else [entry]
        for name in names:
            if name == DROPIN:
                continue
            text = read(name)
            if text is not None:
                out.append((name, _parse(text, name)))
    return out


def _deep_merge(into: dict[str, Any], other: dict[str, Any]) -> None:
    for name, item in other.items():
        if isinstance(item, dict) and isinstance(into.get(name), dict):
            _deep_merge(into[name], item)
        else:
            into[name] = copy.deepcopy(item)


def _handler(binary: str, systemd: bool) -> dict[str, Any]:
    return {
        "runtime_type": RUNC_V2,
        "pod_annotations": list(ANNOTATIONS),
        "container_annotations": list(ANNOTATIONS),
        "options": {"BinaryName": binary, "SystemdCgroup": systemd},
    }


def plan(
    config: bytes | None, containerd_version: str, handlers: dict[str, str], read: Any
) -> Plan:
    """The change that adds ``handlers`` (name -> BinaryName) to a containerd of
    ``containerd_version`` whose ``config.toml`` is ``config`` (None: absent)."""
    major = containerd_major(containerd_version)
    document = _parse(config, CONFIG) if config is not None else {}
    version = document.get("version", 1 if config is not None else (2 if major == 1 else 3))
    if version == 1:
        raise Unmergeable(
            f"{CONFIG} is a version 1 configuration, which no drop-in merges into safely:"
            " migrate it (containerd config migrate) and install again"
        )
    if version not in (2, 3) or (major == 1 and version == 3):
        raise Unmergeable(f"{CONFIG}: version {version!r} is not one containerd {major}.x reads")
    imports = imported_files(document, read)
    if version == 2:
        cri = copy.deepcopy(_section(document, "plugins", CRI_V2) or {})
        for _name, other in imports:  # a section replaces the one before it
            if isinstance(_section(other, "plugins", CRI_V2), dict):
                cri = copy.deepcopy(other["plugins"][CRI_V2])
        runtimes_at = cri
    else:
        merged = copy.deepcopy(document)
        for _name, other in imports:
            _deep_merge(merged, other)
        runtimes_at = copy.deepcopy(_section(merged, "plugins", CRI_V3) or {})
    containerd = runtimes_at.setdefault("containerd", {})
    if not isinstance(containerd, dict):
        raise Unmergeable(f"{CONFIG}: the CRI plugin's containerd is not a table")
    runtimes = containerd.setdefault("runtimes", {})
    default = containerd.get("default_runtime_name", "runc")
    if not isinstance(runtimes, dict) or not isinstance(default, str):
        raise Unmergeable(f"{CONFIG}: the CRI plugin's runtimes are not a table")
    taken = sorted(set(handlers) & set(runtimes))
    if taken:
        raise Unmergeable(f"{CONFIG} already has a runtime handler named {', '.join(taken)}")
    systemd = _section(runtimes, default, "options", "SystemdCgroup") is True
    if version == 2:
        if default == "runc" and "runc" not in runtimes:
            runtimes["runc"] = {"runtime_type": RUNC_V2}  # containerd's own, kept
        for name, binary in handlers.items():
            runtimes[name] = _handler(binary, systemd)
        dropin_doc: dict[str, Any] = {"version": 2, "plugins": {CRI_V2: cri}}
    else:
        own = {name: _handler(binary, systemd) for name, binary in handlers.items()}
        dropin_doc = {"version": 3, "plugins": {CRI_V3: {"containerd": {"runtimes": own}}}}
    try:
        dropin = toml.dumps(dropin_doc, f"Written by the {MARK}; removed with it.")
    except toml.Unwritable as err:
        raise Unmergeable(f"the CRI plugin's configuration cannot be written back: {err}") from err
    after = _with_import(config, document, version, containerd_version)
    return Plan(config, after, dropin, version, systemd)


def _with_import(
    config: bytes | None, document: dict[str, Any], version: int, containerd_version: str
) -> bytes | None:
    """The node's file with the drop-in in its ``imports`` (None: unchanged)."""
    if config is None:
        # containerd 2.2 and later import conf.d by default: a file of ours must too
        minor = containerd_version.lstrip("v").split(".")[1:2]
        keep = version == 3 and minor and minor[0].isdigit() and int(minor[0]) >= 2
        entries = [CONF_D, DROPIN] if keep else [DROPIN]
        return f"version = {version}\nimports = {toml.value(entries)}  # {MARK}\n".encode()
    entries = _imports(document)
    if imports_dropin(config):
        return None
    lines = config.decode().split("\n")
    if "imports" not in document:
        new = f'imports = ["{DROPIN}"]  # {MARK}'
        at = next((i for i, line in enumerate(lines) if line.lstrip().startswith("[")), len(lines))
        changed = [*lines[:at], new, *lines[at:]]
    else:
        found = [i for i, line in enumerate(lines) if line.split("=", 1)[0].strip() == "imports"]
        if len(found) != 1:
            raise Unmergeable(f"{CONFIG}: its imports line is not one the installer can edit")
        new = f"imports = {toml.value([*entries, DROPIN])}  # {MARK}"
        changed = [*lines[: found[0]], new, *lines[found[0] + 1 :]]
    after = "\n".join(changed).encode()
    wanted = dict(document, imports=[*entries, DROPIN])
    try:
        same = tomllib.loads(after.decode()) == wanted
    except tomllib.TOMLDecodeError:
        same = False
    if not same:
        raise Unmergeable(
            f"{CONFIG}: adding {DROPIN} to its imports would change more than that (an"
            " imports array over several lines, or one inside a table): add it by hand"
        )
    return after


def imports_dropin(config: bytes | None) -> bool:
    """Whether the node's file names the drop-in in its imports (a file that cannot be
    read counts as naming it: the drop-in then stays)."""
    if config is None:
        return False
    try:
        entries = _imports(_parse(config, CONFIG))
    except Unmergeable:
        return True
    return any(e == DROPIN or (glob.has_magic(e) and fnmatch.fnmatch(DROPIN, e)) for e in entries)


def handlers_of(binary_dir: str) -> dict[str, str]:
    """The handlers the installer adds: ``hostjob`` (pods on the host's network, IPC and
    PID namespaces) and ``hostjob-join`` (pods of their own network, IPC and UTS
    namespaces, which the job containers join: ``--default-pod-namespaces join``)."""
    return {"hostjob": f"{binary_dir}/hostjob", "hostjob-join": f"{binary_dir}/hostjob-join"}
