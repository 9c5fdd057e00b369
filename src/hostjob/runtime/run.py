"""``run``: create + start + wait + delete in one process, as ``runc run`` does.

The runtime stays the container process's parent (``foreground``): it forwards
signals, proxies the terminal when there is no console socket, returns the
program's exit status (128+N when killed by signal N), ends the rest of the job
(SIGTERM, then SIGKILL after the grace period) and deletes the container.
``detach`` returns once the program runs.
"""

from __future__ import annotations

import os

from hostjob.runtime import proc
from hostjob.runtime.container import Container, CreateOptions, stop_grace
from hostjob.runtime.foreground import TerminalPair, ignore_signals, reap_orphans, wait_attached

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Any

    from hostjob.images.runspec import RunFlags
    from hostjob.job import JobConfig


def run(
    container_id: str,
    job: JobConfig,
    *,
    root: str,
    options: CreateOptions,
    detach: bool = False,
    keep: bool = False,
    subreaper: bool = True,
    on_created: Callable[[Container], None] | None = None,
) -> int:
    """Run the job container to completion (or until it runs, with ``detach``)."""
    terminal = None
    if job.process.terminal and not detach and options.console_socket is None:
        terminal = TerminalPair()
        options.console_socket = terminal.child_fd
    if subreaper and not detach:
        from hostjob import linux

        # Orphans of the job are re-parented to us, so that we reap them at the end.
        linux.set_child_subreaper()
    try:
        container, child = Container.create_from_config(
            container_id, job, root=root, options=options
        )
    except BaseException:
        if terminal is not None:
            terminal.close()
        raise
    master = -1
    try:
        if terminal is not None:
            terminal.spawned()
            master = terminal.receive_master()
        if on_created is not None:
            on_created(container)
        container.start()
        if detach:
            child.close()
            return 0
        wait_status = wait_attached(child, master)
    except BaseException:
        ignore_signals()
        child.close()
        if not keep:
            container.delete(force=True)
        reap_orphans()
        raise
    finally:
        if master >= 0:
            os.close(master)
    container.cgroup().terminate(stop_grace())  # the rest of the job: TERM, then KILL
    reap_orphans()
    if not keep:
        container.delete(force=True)
    return proc.exit_code(wait_status)


def run_image(
    ref: str,
    flags: RunFlags,
    *,
    root: str,
    store_root: str | None = None,
    name: str | None = None,
    pull: str = "missing",
    pull_options: dict[str, Any] | None = None,
    quiet: bool = False,
    options: CreateOptions | None = None,
    detach: bool = False,
    remove: bool = False,
    subreaper: bool = True,
) -> tuple[str, int]:
    """``hostjob run IMAGE``: pull (per ``pull``) and run a job container of an image.

    Returns (container ID, exit status). Without ``remove`` the stopped container
    stays, with its writable layer, until ``delete``; with ``detach`` and ``remove``
    a small remover process deletes it once its program exits.
    """
    from hostjob import config
    from hostjob.images import progress
    from hostjob.images.runspec import build_spec
    from hostjob.images.store import Store
    from hostjob.runtime.state_dir import StateStore, validate_id
    from hostjob.spec import runtime as wire

    container_id = validate_id(name) if name else os.urandom(6).hex()
    flags.check()
    store = Store(store_root)
    render = progress.renderer(quiet=quiet)
    try:
        image = store.get(ref, pull=pull, progress=render, **(pull_options or {}))
    finally:
        progress.close(render)
    spec = build_spec(image.config.config, flags)
    bundle = StateStore(root).dir(container_id)
    job = config.to_job_config(wire.Spec.decode(spec), bundle, container_id)
    job.image = image.name
    options = options or CreateOptions()
    options.image = image
    options.image_store = store.root
    options.bundle_config = spec
    code = run(
        container_id, job, root=root, options=options, detach=detach, keep=not remove,
        subreaper=subreaper,
    )  # fmt: skip
    if detach and remove:
        _spawn_remover(container_id, root)
    return container_id, code


def _spawn_remover(container_id: str, root: str) -> None:
    """A detached ``--rm`` container: a process that deletes it when its program exits."""
    pid = os.fork()
    if pid:
        os.waitpid(pid, 0)
        return
    try:
        os.setsid()
        if os.fork():
            os._exit(0)
        null = os.open("/dev/null", os.O_RDWR)
        for fd in (0, 1, 2):
            os.dup2(null, fd)
        container = Container.load(container_id, root=root)
        record = container.record
        if record is not None:
            pidfd = proc.open_pidfd(record.pid, record.start_time)
            if pidfd is not None:
                proc.wait_pidfd(pidfd, None)
        container.delete(force=True)
    finally:
        os._exit(0)
