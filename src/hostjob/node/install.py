"""Installing hostjob on the node the installer pod runs on, and undoing it.

The pod runs the installer image's own hostjob, with the host's root mounted at
``host_root`` (``/host``). ``install``:

1. asks the host's containerd its version over the CRI, reads its configuration and
   plans the drop-in (``hostjob.node.containerd``): a configuration it cannot merge
   safely stops here, nothing written;
2. copies the image's ``/opt/hostjob`` onto the host (to a new directory beside it,
   then renamed over it: a command that runs meanwhile sees the old tree or the new),
   unless the host already has this very tree (its ``.hostjob-node`` file says which);
   a ``/opt/hostjob`` the installer did not make is never touched;
3. writes the drop-in, a record of the node's file as it was (``installed.json``,
   beside the drop-in), then the node's file with the drop-in imported;
4. restarts containerd through the host's systemd (D-Bus on systemd's own socket) and
   waits until its CRI serves the handlers; if it does not, the node's file is put back
   and containerd restarted again.

``uninstall`` puts the node's file back as the record has it (unless it changed since:
then it says so and leaves it), removes the drop-in, restarts containerd, waits until
the handlers are gone, and removes ``/opt/hostjob`` once no job container of hostjob's
is left in containerd's state (those still running need it for their own ``delete``;
the installer waits for them up to its deadline, then leaves the tree and says so).
Running again is safe: an install over an install changes only what differs.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import time
from typing import Any

from hostjob.errors import HostjobError
from hostjob.node import containerd, cri

INSTALL_DIR = "/opt/hostjob"
IDENTITY = ".hostjob-node"  # in the tree: which build it is (written at build)
RECORD = f"{containerd.DROPIN_DIR}/installed.json"
SOCKET = "/run/containerd/containerd.sock"
UNIT = "containerd.service"
STATE_ROOTS = "/run/containerd/runc"  # the runc shim's state roots, one per namespace
SYSTEMD = "org.freedesktop.systemd1"
MANAGER = "org.freedesktop.systemd1.Manager"


# The drop-in once the node's file changed under the installer: imported, and harmless.
EMPTIED = f"# Left by the {containerd.MARK}: remove it from the imports of {containerd.CONFIG}.\n"


class NodeError(HostjobError):
    """The node cannot be set up (or restored) as asked."""


def say(line: str) -> None:
    """One line of the pod's log."""
    print(f"hostjob-node: {line}", flush=True)


class Node:
    """The host, as the installer pod sees it."""

    def __init__(
        self,
        host_root: str = "/host",
        socket: str = SOCKET,
        unit: str = UNIT,
        source: str | None = None,
        timeout: float = 120.0,
    ) -> None:
        self.root = host_root.rstrip("/") or "/"
        self.socket = socket
        self.unit = unit
        # the tree to copy: the one this interpreter runs from (<dir>/usr/bin/python3.11)
        self.source = source or os.path.dirname(os.path.dirname(os.path.dirname(sys.executable)))
        self.timeout = timeout

    def host(self, path: str) -> str:
        return path if self.root == "/" else self.root + path

    def read(self, path: str, glob: bool = False) -> Any:
        """A host file's bytes (None: absent); with ``glob``, the host paths a pattern
        matches (``containerd.imported_files``)."""
        if glob:
            import glob as globbing

            return [p[len(self.root) :] if self.root != "/" else p
                    for p in globbing.glob(self.host(path))]  # fmt: skip
        try:
            with open(self.host(path), "rb") as f:
                return f.read(1 << 20)
        except FileNotFoundError:
            return None

    def write(self, path: str, data: bytes) -> None:
        from hostjob.linux import fsutil

        fsutil.write_atomic(self.host(path), data, mode=0o644, durable=True)

    def restart(self) -> None:
        """Restart the host's containerd (through its systemd)."""
        restart_containerd(self)

    def check_restart(self) -> None:
        """Refuse before any change when the host's systemd cannot restart containerd."""
        from hostjob.cgroups import dbus

        if not os.path.exists(self.host(dbus.PRIVATE_SOCKET)):
            raise NodeError(
                f"the host has no systemd socket at {dbus.PRIVATE_SOCKET}: the installer"
                " restarts containerd through systemd"
            )

    def remove(self, path: str) -> None:
        try:
            os.unlink(self.host(path))
        except FileNotFoundError:
            pass


def _identity(tree: str) -> str | None:
    try:
        with open(f"{tree}/{IDENTITY}") as f:
            return f.read(256).strip()
    except FileNotFoundError:
        return None


def copy_tree(node: Node) -> bool:
    """The image's tree onto the host at ``INSTALL_DIR``; False when it was there."""
    wanted = _identity(node.source)
    if wanted is None:
        raise NodeError(f"{node.source} is not an installer image's tree (no {IDENTITY})")
    target = node.host(INSTALL_DIR)
    there = os.path.lexists(target)
    if there and _identity(target) is None:
        raise NodeError(
            f"{INSTALL_DIR} exists on the host and is not the installer's: left as it is"
        )
    if there and _identity(target) == wanted:
        return False
    _build_pack(node.source)
    parent = os.path.dirname(target)
    os.makedirs(parent, exist_ok=True)
    fresh = f"{parent}/.hostjob-new-{os.getpid()}"
    old = f"{parent}/.hostjob-old-{os.getpid()}"
    shutil.copytree(node.source, fresh, symlinks=True)  # modes and mtimes kept (the pack's)
    if there:
        os.rename(target, old)
    os.rename(fresh, target)
    if there:
        shutil.rmtree(old)
    return True


def _build_pack(tree: str) -> None:
    """The code pack of the tree's hostjob, made where the tree lies in the image: its
    sources are at the same paths, with the same sizes and times, once copied."""
    from hostjob.boot import codepack_build

    package = f"{tree}/lib/python{sys.version_info[0]}.{sys.version_info[1]}/site-packages/hostjob"
    if os.path.isdir(package):
        try:
            codepack_build.build(package)
        except OSError as err:
            say(f"no code pack made ({err}): the first command makes it")


def restart_containerd(node: Node) -> None:
    """Restart the unit through the host's systemd and wait for its job to finish."""
    from hostjob.cgroups import dbus

    node.check_restart()
    with dbus.Connection(node.host(dbus.PRIVATE_SOCKET), peer_to_peer=True) as conn:
        conn.call(SYSTEMD, "/org/freedesktop/systemd1", MANAGER, "Subscribe")
        (job,) = conn.call(
            SYSTEMD,
            "/org/freedesktop/systemd1",
            MANAGER,
            "RestartUnit",
            "ss",
            [node.unit, "replace"],
        )
        deadline = time.monotonic() + node.timeout
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise NodeError(f"systemd did not restart {node.unit} in {node.timeout:.0f} s")
            signal = conn.wait_signal(MANAGER, "JobRemoved", left)
            _id, path, unit, result = signal.body
            if path == job:
                if result != "done":
                    raise NodeError(
                        f"systemd could not restart {unit}: the job's result is {result}"
                    )
                return


def _serves(handlers: set[str], present: bool) -> Any:
    def ready(path: str) -> bool:
        served = cri.runtime_handlers(path)
        return handlers <= served if present else not handlers & served

    return ready


def _apply_and_restart(node: Node, handlers: set[str], present: bool) -> None:
    node.restart()
    cri.wait(node.host(node.socket), _serves(handlers, present), time.monotonic() + node.timeout)


def install(node: Node) -> None:
    name, version = cri.version(node.host(node.socket))
    say(f"containerd {version} answers on {node.socket} ({name})")
    handlers = containerd.handlers_of(f"{INSTALL_DIR}/bin")
    record = _read_record(node)
    current = node.read(containerd.CONFIG)
    before = current
    if record is not None and current == record["after"]:
        before = record["before"]  # ours already: plan from the node's own file
    dropin_dir = node.host(containerd.DROPIN_DIR)
    if os.path.lexists(dropin_dir) and record is None:
        raise NodeError(f"{containerd.DROPIN_DIR} exists and is not the installer's: left as it is")
    plan = containerd.plan(before, version, handlers, node.read)
    say(f"config version {plan.version}, SystemdCgroup = {str(plan.systemd_cgroup).lower()}")
    node.check_restart()
    copied = copy_tree(node)
    if copied:
        say(f"installed {INSTALL_DIR} ({_identity(node.source)})")
    after = plan.after if plan.after is not None else before
    unchanged = (
        node.read(containerd.DROPIN) == plan.dropin.encode() and current == after
    ) and handlers.keys() <= cri.runtime_handlers(node.host(node.socket))
    if unchanged:
        say("containerd already serves the handlers: nothing to change")
        return
    os.makedirs(dropin_dir, mode=0o755, exist_ok=True)
    node.write(containerd.DROPIN, plan.dropin.encode())
    node.write(RECORD, _record(before, plan.after))
    if plan.after is not None:
        node.write(containerd.CONFIG, plan.after)
    say(
        f"wrote {containerd.DROPIN}"
        + (f", imported from {containerd.CONFIG}" if plan.after else "")
    )
    try:
        _apply_and_restart(node, set(handlers), True)
    except HostjobError as err:
        say(f"containerd did not come back with the handlers ({err}): putting the node back")
        _restore_config(node)
        _apply_and_restart(node, set(handlers), False)
        if copied:
            shutil.rmtree(node.host(INSTALL_DIR))
        raise NodeError(f"containerd did not serve the handlers: {err}") from err
    say(f"containerd serves the handlers {', '.join(sorted(handlers))}")


def _record(before: bytes | None, after: bytes | None) -> bytes:
    def text(data: bytes | None) -> str | None:
        return None if data is None else data.decode()

    return json.dumps({"before": text(before), "after": text(after)}).encode()


def _read_record(node: Node) -> dict[str, Any] | None:
    data = node.read(RECORD)
    if data is None:
        return None
    try:
        found = json.loads(data)
        return {k: None if found[k] is None else found[k].encode() for k in ("before", "after")}
    except (ValueError, KeyError, TypeError, AttributeError) as err:
        raise NodeError(f"{RECORD} is not the installer's record: left as it is") from err


def _restore_config(node: Node) -> None:
    """The node's file as the record has it, and the drop-in gone -- but emptied, not
    removed, while the node's file still imports it (it changed since the install, or
    imported it before): containerd does not start when a file it imports is missing."""
    record = _read_record(node)
    if record is not None and record["after"] is not None:
        if node.read(containerd.CONFIG) == record["after"]:
            if record["before"] is None:
                node.remove(containerd.CONFIG)
            else:
                node.write(containerd.CONFIG, record["before"])
            say(f"restored {containerd.CONFIG}")
        else:
            say(f"{containerd.CONFIG} changed since the install: left as it is")
    if containerd.imports_dropin(node.read(containerd.CONFIG)):
        node.write(containerd.DROPIN, EMPTIED.encode())
        say(f"{containerd.DROPIN} emptied: {containerd.CONFIG} still imports it")
        return
    node.remove(containerd.DROPIN)
    node.remove(RECORD)
    try:
        os.rmdir(node.host(containerd.DROPIN_DIR))
    except FileNotFoundError:
        pass


def job_containers(node: Node) -> list[str]:
    """hostjob's containers in the runc shim's state roots (runc's own differ: their
    state has no ``phase``)."""
    found = []
    roots = node.host(STATE_ROOTS)
    for namespace in sorted(os.listdir(roots)) if os.path.isdir(roots) else []:
        where = f"{roots}/{namespace}"
        for name in sorted(os.listdir(where)) if os.path.isdir(where) else []:
            try:
                with open(f"{where}/{name}/state.json", "rb") as f:
                    state = json.loads(f.read(1 << 20))
            except (OSError, ValueError):
                continue
            if isinstance(state, dict) and "phase" in state and "undo" in state:
                found.append(f"{namespace}/{name}")
    return found


def uninstall(node: Node, wait_for_jobs: float = 0.0) -> bool:
    """Undo ``install``; False when ``/opt/hostjob`` stays for job containers that still
    run."""
    handlers = set(containerd.handlers_of(f"{INSTALL_DIR}/bin"))
    if os.path.lexists(node.host(containerd.DROPIN_DIR)) and (
        node.read(containerd.DROPIN) != EMPTIED.encode()
    ):
        _restore_config(node)
        _apply_and_restart(node, handlers, False)
        say("containerd no longer serves the handlers")
    target = node.host(INSTALL_DIR)
    if not os.path.lexists(target):
        return True
    if _identity(target) is None:
        say(f"{INSTALL_DIR} is not the installer's: left as it is")
        return True
    deadline = time.monotonic() + wait_for_jobs
    while True:
        left = job_containers(node)
        if not left:
            break
        if time.monotonic() >= deadline:
            say(
                f"{INSTALL_DIR} left on the node: {len(left)} job container(s) still need it"
                f" for their own delete ({', '.join(left[:5])})"
            )
            return False
        time.sleep(1)
    shutil.rmtree(target)
    say(f"removed {INSTALL_DIR}")
    return True


def serve(node: Node, wait_for_jobs: float) -> int:
    """The DaemonSet pod's life: install, wait for SIGTERM (or SIGINT), uninstall."""
    import signal

    stop = []
    for number in (signal.SIGTERM, signal.SIGINT):
        signal.signal(number, lambda n, _f: stop.append(n))
    install(node)
    say("installed; waiting for the pod's termination to undo it")
    while not stop:
        time.sleep(1)
    say("terminating: undoing the install")
    uninstall(node, wait_for_jobs)
    return 0
