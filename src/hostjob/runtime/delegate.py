"""Containers that are not job containers (mixed pods): handed to a real OCI runtime.

Whether a container is delegated is decided by the library only, and the command line
only calls in: the conversion of a bundle whose annotations say it is not a job
container (``hostjob.specconv.pods``) raises ``NotAJobContainer`` and the command line's
``create`` calls ``create`` here; for any later command, ``Handle.load`` finds the route
that ``create`` wrote and raises it too, and the command line calls ``handover``.

In a pod run by the hostjob handler, such a container runs as an ordinary namespaced
container: the real runtime -- ``runc`` from ``PATH`` unless ``HOSTJOB_DELEGATE_RUNTIME``
names another (an absolute path or a name in ``PATH``) -- is run with the same global
flags but a state root of hostjob's own, ``<root>/.delegate/<runtime name>``:

* ``create`` makes the container's directory ``<root>/<id>`` (so an ID is unique across
  both runtimes), records the route there (``StateStore.write_route``: a symlink to the
  runtime's absolute path), writes a changed bundle when the namespaces must change
  (``confined_bundle``), then runs the runtime's ``create`` and waits for it; a failed
  create removes the route again;
* ``handover``: every later command naming the ID (``Handle.load`` finds the route
  where a job container's record would be) is replaced by the runtime's
  (``exec``) with the same words; ``delete`` runs the runtime's and removes the route once
  that succeeded (``delete --force`` of a route whose container the runtime never made
  succeeds too: runc's does), then the runtime's state root if it is empty (``_tidy``);
* ``list_delegated`` merges the runtime's list into ``hostjob list``.

Nothing here runs, nor is loaded, for a job container.
"""

from __future__ import annotations

import posix

from hostjob.boot import paths
from hostjob.boot.env import getenv
from hostjob.errors import DelegateError
from hostjob.runtime.record import StateStore
from hostjob.runtime.state_root import DELEGATE_DIR, validate_id

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any, NoReturn

    from hostjob.linux.fsutil import FileLock

ENV_RUNTIME = "HOSTJOB_DELEGATE_RUNTIME"
DEFAULT_RUNTIME = "runc"
BUNDLE_DIR = "bundle"  # <root>/<id>/bundle: the changed bundle, when there is one


def runtime_path() -> str:
    """The real OCI runtime's absolute path (``HOSTJOB_DELEGATE_RUNTIME``, else runc)."""
    name = getenv(ENV_RUNTIME) or DEFAULT_RUNTIME
    if "/" in name:
        candidates = [paths.abspath(name)]
    else:
        search = (getenv("PATH") or "/usr/local/bin:/usr/bin:/bin").split(":")
        candidates = [paths.join(d, name) for d in search if paths.isabs(d)]
    for path in candidates:
        if paths.isfile(path) and posix.access(path, posix.X_OK):
            if paths.basename(paths.realpath(path)) == "hostjob":
                raise DelegateError(
                    f"{ENV_RUNTIME}={name} names hostjob itself: a container that is not a"
                    " job container needs a real OCI runtime (runc, crun)"
                )
            return path
    where = "" if "/" in name else " in PATH"
    raise DelegateError(
        f"the OCI runtime for containers that are not job containers, {name}, is not"
        f" found{where}: install runc or set {ENV_RUNTIME}"
    )


def create(
    root: str,
    container_id: str,
    bundle: str,
    document: object,
    flags: list[str],
    create_flags: list[str],
    pod_default: str | None = None,
) -> int:
    """``create`` of the bundle at ``bundle`` (``document``: its config.json as
    ``bundle.read_config`` read it), of a container that is not a job container (the
    conversion said so: ``NotAJobContainer``): record the route, run the runtime's create
    (``create_flags``: the client's, but ``--bundle``) and return its exit status (the
    route goes again when it fails; ``pod_default``: the operator's
    ``--default-pod-namespaces``)."""
    from hostjob import faults
    from hostjob.specconv import pods

    if not pods.delegated(document, pod_default):
        raise DelegateError(f"container {container_id} is a job container: hostjob runs it")
    validate_id(container_id)
    bundle = paths.abspath(bundle)
    runtime = runtime_path()
    store = StateStore(root)
    lock = store.create(container_id)  # an ID taken by either runtime: already exists
    try:
        store.write_route(container_id, runtime)
        faults.point("delegate:after-route")
        given = confined_bundle(store, container_id, bundle)
        argv = [runtime, *flags, "--root", store.delegate_root(runtime), "create"]
        argv += ["--bundle", given, *create_flags, container_id]
        with _delegates_lock(store):
            code = _spawn(argv)
        if code != 0:
            store.remove(container_id)
            _tidy(store)
        return code
    except BaseException:
        store.remove(container_id)
        _tidy(store)
        raise
    finally:
        lock.release()


def handover(
    root: str, container_id: str, runtime: str, command: str, words: list[str], flags: list[str]
) -> int:
    """Any later command (``words``: its arguments as given) on a container that the
    real OCI runtime ``runtime`` runs (``Handle.load`` found its route and raised
    ``NotAJobContainer``): ``delete`` waits for the runtime and then drops the route;
    every other command becomes the runtime's own (this process is replaced)."""
    from hostjob import faults

    store = StateStore(root)
    argv = [runtime, *flags, "--root", store.delegate_root(runtime), command, *words]
    if command != "delete":
        _exec(argv)
    with store.lock(container_id):
        code = _spawn(argv)
        if code == 0:
            faults.point("delegate:after-runtime-delete")
            store.remove(container_id)
    if code == 0:
        _tidy(store)
    return code


def _delegates_lock(store: StateStore) -> FileLock:
    """A shared lock on ``<root>/.delegate`` (made if missing), held while a runtime makes
    a container in its state root there: ``_tidy`` removes none of them meanwhile."""
    from hostjob.linux import fsutil

    path = paths.join(store.root, DELEGATE_DIR)
    fsutil.ensure_dir(path, 0o700)
    return fsutil.lock_fd(posix.open(path, fsutil.DIR_FLAGS), shared=True)


def _tidy(store: StateStore) -> None:
    """Remove the real runtimes' state roots that hold no container any more, and
    ``<root>/.delegate`` with them -- unless a create is under way (it holds the shared
    lock; the next delete tidies up)."""
    from hostjob.linux import fsutil

    path = paths.join(store.root, DELEGATE_DIR)
    try:
        lock = fsutil.lock_fd(posix.open(path, fsutil.DIR_FLAGS), wait=False)
    except (FileNotFoundError, BlockingIOError):
        return
    with lock:
        for name in posix.listdir(lock.fd):
            try:
                posix.rmdir(name, dir_fd=lock.fd)
            except OSError:
                pass  # a runtime's root that still holds containers (or a file)
        try:
            posix.rmdir(path)
        except OSError:
            pass


def list_delegated(root: str) -> list[tuple[str, dict[str, Any]]]:
    """(runtime name, state) of each container a real runtime runs for hostjob: what
    ``<runtime> list --format json`` says of the IDs routed to it."""
    from hostjob import log
    from hostjob.boot import jsonio

    store = StateStore(root)
    routed: dict[str, set[str]] = {}
    for container_id in store.ids():
        runtime = store.route(container_id)
        if runtime is not None:
            routed.setdefault(runtime, set()).add(container_id)
    found = []
    for runtime, ids in sorted(routed.items()):
        argv = [runtime, "--root", store.delegate_root(runtime), "list", "--format", "json"]
        code, out = _capture(argv)
        try:
            states = jsonio.loads(out) if code == 0 else None
        except ValueError:
            states = None
        if code != 0 or (states is not None and type(states) is not list):
            log.warning(f"{runtime} list failed (exit status {code}): its containers are not shown")
            continue
        name = paths.basename(runtime)
        found += [(name, s) for s in states or [] if type(s) is dict and s.get("id") in ids]
    return found


def confined_bundle(store: StateStore, container_id: str, bundle: str) -> str:
    """The bundle to give the real runtime: ``bundle`` itself, or -- when its config must
    change -- a copy of its config.json with those changes, the rootfs and relative bind
    sources made absolute, in ``<root>/<id>/bundle``. Two changes: the namespaces
    (``pods.confined_namespaces``: a job sandbox's namespaces are the host's), and a
    ``hostname``/``domainname`` dropped when the container joins the host's UTS
    namespace, where setting it would rename the node (``_keep_host_names``)."""
    from hostjob.boot import jsonio
    from hostjob.linux import fsutil
    from hostjob.runtime.bundle import read_json
    from hostjob.specconv import pods

    spec = read_json(paths.join(bundle, "config.json"), "config.json")
    linux = spec.get("linux") if type(spec) is dict else None
    entries = linux.get("namespaces") if type(linux) is dict else None
    if type(entries) is not list or not all(type(e) is dict for e in entries):
        return bundle
    assert type(spec) is dict and type(linux) is dict
    on_host = _on_host(entries)
    changed = pods.confined_namespaces(entries, on_host)
    final = entries if changed is None else changed
    joins_host_uts = "uts" in on_host and any(
        e.get("type") == "uts" and e.get("path") for e in final
    )
    names = _keep_host_names(spec) if joins_host_uts else None
    if changed is None and names is None:
        return bundle
    spec = names if names is not None else dict(spec)
    if changed is not None:
        spec["linux"] = dict(linux, namespaces=changed)
    root = spec.get("root")
    if type(root) is dict and type(root.get("path")) is str:
        spec["root"] = dict(root, path=paths.join(bundle, root["path"]))
    mounts = spec.get("mounts")
    if type(mounts) is list:
        spec["mounts"] = [_absolute_source(m, bundle) for m in mounts]
    folder = paths.join(store.dir(container_id), BUNDLE_DIR)
    posix.mkdir(folder, 0o700)
    data = jsonio.dumps(spec) + "\n"
    fsutil.write_atomic(paths.join(folder, "config.json"), data.encode(), mode=0o600)
    return folder


def _keep_host_names(spec: dict[str, Any]) -> dict[str, Any] | None:
    """``spec`` without the ``hostname``/``domainname`` that differ from the host's, or
    None when there is none: in the host's UTS namespace the real runtime would set them
    on the node itself (a mixed pod on the host's network renamed the machine)."""
    from hostjob import log

    host = {"hostname": posix.uname().nodename, "domainname": _host_domainname()}
    dropped = {
        key: spec[key]
        for key in ("hostname", "domainname")
        if type(spec.get(key)) is str and spec[key] and spec[key] != host[key]
    }
    if not dropped:
        return None
    for key, value in dropped.items():
        log.warning(
            f"{key} {value!r} is not set: the container joins the host's UTS namespace,"
            f" whose {key} is {host[key]!r}"
        )
    return {k: v for k, v in spec.items() if k not in dropped}


def _host_domainname() -> str:
    try:
        with open("/proc/sys/kernel/domainname", "rb") as f:
            value = f.read().decode(errors="replace").strip()
    except OSError:
        return ""
    return "" if value == "(none)" else value


def _on_host(entries: list[dict[str, Any]]) -> set[str]:
    from hostjob.runtime.bundle import host_namespaces

    return host_namespaces([(e.get("type"), e.get("path")) for e in entries])


def _absolute_source(mount: object, bundle: str) -> object:
    if type(mount) is not dict:
        return mount
    source = mount.get("source")
    options = mount.get("options") or []
    is_bind = mount.get("type") == "bind" or (type(options) is list and "rbind" in options)
    if is_bind and type(source) is str and source and not paths.isabs(source):
        return dict(mount, source=paths.join(bundle, source))
    return mount


def _spawn(argv: list[str]) -> int:
    """Run ``argv`` with this process's stdio and environment; its exit status (a signal
    that ended it: 128 + its number, as a shell says)."""
    try:
        pid = posix.posix_spawn(argv[0], argv, posix.environ)
    except OSError as err:
        raise DelegateError(f"cannot run {argv[0]}: {err.strerror}") from err
    _, status = posix.waitpid(pid, 0)
    code = posix.waitstatus_to_exitcode(status)
    return 128 - code if code < 0 else code


def _capture(argv: list[str]) -> tuple[int, bytes]:
    """``_spawn`` with stdout captured."""
    read_end, write_end = posix.pipe()
    try:
        try:
            pid = posix.posix_spawn(
                argv[0], argv, posix.environ, file_actions=[(posix.POSIX_SPAWN_DUP2, write_end, 1)]
            )
        except OSError as err:
            raise DelegateError(f"cannot run {argv[0]}: {err.strerror}") from err
        posix.close(write_end)
        write_end = -1
        chunks = []
        while chunk := posix.read(read_end, 65536):
            chunks.append(chunk)
    finally:
        posix.close(read_end)
        if write_end >= 0:
            posix.close(write_end)
    _, status = posix.waitpid(pid, 0)
    code = posix.waitstatus_to_exitcode(status)
    return (128 - code if code < 0 else code), b"".join(chunks)


def _exec(argv: list[str]) -> NoReturn:
    try:
        posix.execv(argv[0], argv)
    except OSError as err:
        raise DelegateError(f"cannot run {argv[0]}: {err.strerror}") from err
