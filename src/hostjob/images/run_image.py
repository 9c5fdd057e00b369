"""``hostjob run IMAGE``: a job container of an image in the store, as ``podman run``
runs one.

The image is resolved (and pulled, per ``--pull``) by ``Store.get`` first; here its
config and the command line become a runtime-spec config (``runspec``), converted as
any bundle's is (``hostjob.specconv.convert``), and the container is created with the image's
overlay as its rootfs (``rootfs.ImageRootfs``, the runtime's ``RootfsProvider``)
and run with the runtime's lifecycle (``hostjob.runtime.verbs.run``): the same create,
start, wait and delete as a bundle's, the overlay undone by delete like any mount. A
detached one is looked after by a watcher (``hostjob.supervisor.launch``).
"""

from __future__ import annotations

import os

from hostjob.images.rootfs import ImageRootfs
from hostjob.images.runspec import build_spec
from hostjob.runtime.record import StateStore
from hostjob.runtime.state_root import validate_id
from hostjob.runtime.verbs.create import CreateOptions

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable

    from hostjob.images.resolve import ResolvedImage
    from hostjob.images.runspec import RunFlags
    from hostjob.images.store import Store
    from hostjob.runtime.container import Container
    from hostjob.specconv.jobconfig import DaemonConfig, JobConfig


def run_image(
    store: Store,
    image: ResolvedImage,
    flags: RunFlags,
    *,
    root: str,
    name: str | None = None,
    options: CreateOptions | None = None,
    detach: bool = False,
    remove: bool = False,
    subreaper: bool = True,
    daemon: DaemonConfig | None = None,
    notify_socket: str | None = None,
) -> tuple[str, int]:
    """Run a job container of ``image``; returns (container ID, exit status).

    Without ``remove`` the stopped container stays, with its writable layer, until
    ``delete``. With ``detach`` (and ``daemon``: its log limits, restart policy, stop
    signal and timeout) a watcher runs it (``hostjob.supervisor.launch``): its output
    goes to its log in the store (``logs/<id>``), and with ``remove`` it is deleted
    once it has stopped for good. The image's ``StopSignal`` is the stop signal
    unless the flags chose one: data the image's own program asks for, used only to
    stop it.
    """
    container_id, job, options = image_job(
        store, image, flags, root=root, name=name, options=options
    )
    if detach and daemon is not None:
        daemon.log_dir = os.path.join(store.root, "logs", container_id)
        daemon.remove = remove
        if daemon.stop_signal is None:
            daemon.stop_signal = stop_signal(image.config.container().stop_signal)
        options.daemon = daemon
    if detach and daemon is not None:
        from hostjob.supervisor.launch import launch

        launch(container_id, job, root=root, options=options, keep=not remove)
        return container_id, 0
    from hostjob.runtime.verbs.run import run

    on_running: Callable[[], None] | None = None
    if notify_socket:
        from hostjob.supervisor.units import notify

        socket_path = notify_socket

        def tell_ready() -> None:
            notify(socket_path, "READY=1")

        on_running = tell_ready

    code = run(
        container_id, job, root=root, options=options, detach=detach, keep=not remove,
        subreaper=subreaper, on_running=on_running,
    )  # fmt: skip
    return container_id, code


def image_job(
    store: Store,
    image: ResolvedImage,
    flags: RunFlags,
    *,
    root: str,
    name: str | None = None,
    options: CreateOptions | None = None,
) -> tuple[str, JobConfig, CreateOptions]:
    """What a job container of ``image`` with ``flags`` is created from: its ID (``name``
    or a random one), its converted config, and create options with the image's
    overlay as its rootfs. Nothing is made yet."""
    from hostjob.spec import runtime as wire
    from hostjob.specconv import convert

    container_id = validate_id(name) if name else os.urandom(6).hex()
    flags.check()
    spec = build_spec(image.config.container(), flags)
    bundle = StateStore(root).dir(container_id)
    job = convert.to_job_config(wire.Spec.decode(spec), bundle, container_id)
    job.image = image.name
    options = options or CreateOptions()
    options.rootfs = ImageRootfs(store.gc, image)
    options.bundle_config = spec
    return container_id, job, options


def create_image(
    store: Store,
    image: ResolvedImage,
    flags: RunFlags,
    *,
    root: str,
    name: str | None = None,
    options: CreateOptions | None = None,
) -> Container:
    """A job container of ``image`` created, as ``podman create`` makes one: its
    process set up in its job, waiting for ``start``; ``delete`` undoes it all (the
    overlay and the writable layer too). The caller is the process's parent."""
    from hostjob.runtime.container import Container

    container_id, job, options = image_job(
        store, image, flags, root=root, name=name, options=options
    )
    container, child = Container.create_from_config(container_id, job, root=root, options=options)
    child.close()
    return container


def stop_signal(image_signal: str | None) -> int:
    """The image's ``StopSignal`` (``SIGQUIT``, ``QUIT``, ``3``) as a number; SIGTERM
    when it names none. One that is no signal is refused, as docker refuses it, rather
    than swapped for another the program never asked for: ``--stop-signal`` chooses."""
    from hostjob.errors import InvalidArgument
    from hostjob.linux import signals

    if not image_signal:
        return int(signals.SIGTERM)
    try:
        return signals.parse_signal(image_signal)
    except InvalidArgument as err:
        raise InvalidArgument(f"the image's StopSignal: {err} (--stop-signal chooses one)") from err
