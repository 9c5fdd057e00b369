"""``start``: a created container's process released into its program.

Two ways in: ``start`` writes the start byte into the ``exec.fifo`` that the process
reads (runc's handshake: any process may start it, once); ``start_child`` writes into
the release pipe of a process its caller created and holds (``run``: nothing to look
up, nobody else can start it). Either way, ``poststart`` hooks run once the program
runs, and a failed one takes the container down with it, as runc's does.
"""

from __future__ import annotations

import errno
import posix
import select

from hostjob import faults
from hostjob.errors import HookError, InvalidState
from hostjob.runtime import status
from hostjob.runtime.status import Status

TYPE_CHECKING = False
if TYPE_CHECKING:
    from hostjob.runtime.handle import Handle
    from hostjob.runtime.launch.spawn import Child
    from hostjob.specconv.jobconfig import Hook


def start(container: Handle) -> None:
    """Release the created container's process into its program."""
    with container.store.lock(container.id):
        container.reload()
        status.require_start(container.id, container.status())
        poststart = container.config.hooks_for("poststart")
        # poststart hooks run once the program runs, so then wait for its exec.
        _release(container, wait_for_exec=bool(poststart))
        faults.point("start:after-release")
        try:
            posix.unlink(container.store.fifo(container.id))
        except FileNotFoundError:
            pass
    if poststart:
        _run_poststart(container, poststart)


def start_child(container: Handle, child: Child) -> None:
    """``start`` by the process that created the container with a release pipe and
    holds its handle (``run``)."""
    poststart = container.config.hooks_for("poststart")
    child.release()
    faults.point("start:after-release")
    if poststart:
        child.wait_exec()  # poststart hooks run once the program runs
        _run_poststart(container, poststart)


def _run_poststart(container: Handle, poststart: list[Hook]) -> None:
    from hostjob.runtime.launch import hooks

    try:
        hooks.run_hooks("poststart", poststart, container.hook_state(Status.RUNNING, container.pid))
    except HookError:
        if container.owns_cgroup():
            from hostjob.linux import signals

            container.cgroup().kill_all(signals.SIGKILL)
        raise


def _release(container: Handle, *, wait_for_exec: bool) -> None:
    """Write the start byte into the exec fifo, which the container process reads (and,
    if asked, wait for its exec). With no reader (ENXIO) it has gone."""
    try:
        fd = posix.open(
            container.store.fifo(container.id),
            posix.O_WRONLY | posix.O_NONBLOCK | posix.O_CLOEXEC,
        )
    except OSError as err:
        if err.errno in (errno.ENXIO, errno.ENOENT):
            raise InvalidState("cannot start a container that has stopped") from err
        raise
    try:
        posix.write(fd, b"0")
        if wait_for_exec:
            # The process keeps its read end open until it execs (close-on-exec): this
            # returns once startContainer hooks ran and the program runs.
            poller = select.poll()
            poller.register(fd, select.POLLERR)
            poller.poll()
    finally:
        posix.close(fd)
