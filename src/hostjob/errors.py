"""Every error hostjob raises, in one tree.

Each error carries the one-line message a user (or a client such as containerd,
podman or CRI-O) sees, and the exit code of the command that failed. The CLI
turns any ``HostjobError`` into that line on stderr, a logrus-style record in
``--log`` and the exit code; nothing else maps errors to output.

    HostjobError
    ├── ConfigError            malformed or unsupported config.json / process.json
    ├── InvalidArgument        a bad command-line value (signal name, flag, ID)
    ├── ContainerExists        ``container with given ID already exists``
    ├── ContainerNotFound      ``container does not exist``
    ├── ContainerNotRunning    ``container not running``
    ├── StateCorrupt           a container's state.json cannot be read back
    ├── InvalidState           an illegal state transition (start twice, delete running)
    ├── StartError             the container's program could not be set up or found
    ├── HookError              a lifecycle hook failed or timed out
    ├── MountError             the sandbox mount point or a volume could not be set up
    ├── CgroupError            cgroupfs refused something
    │   ├── MissingController  a limit needs a controller the host lacks
    │   └── CgroupExists       the job's cgroup exists already (hostjob never adopts one)
    ├── NotSupported           checkpoint/restore and friends
    ├── DelegateError          a container that is not a job container: its real OCI
    │   │                      runtime cannot be found, or it is asked of hostjob itself
    │   └── NotAJobContainer   the ID names a container a real OCI runtime runs (the
    │                          CLI hands the command over to it)
    ├── PermissionDenied       hostjob needs root for this
    └── ImageError             the image side: ``hostjob.images.errors``
"""

from __future__ import annotations


def one_line(text: str) -> str:
    """``text`` with every control character escaped (``\\n``, ``\\x1b``): a message
    quotes hostile input (a JSON key, a tar entry name) and must stay one line that
    cannot drive the terminal it is printed on."""
    if text.isprintable():
        return text
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)


class HostjobError(Exception):
    """Base of every error hostjob reports; ``str(err)`` is the user-facing line."""

    exit_code = 1

    def __init__(self, message: str) -> None:
        message = one_line(message)
        super().__init__(message)
        self.message = message

    def __str__(self) -> str:
        return self.message


class ConfigError(HostjobError):
    """The config is malformed: ``path`` is the JSON path of the offending value."""

    def __init__(self, message: str, path: str = "") -> None:
        super().__init__(f"{path}: {message}" if path else message)
        self.path = path


class InvalidArgument(HostjobError):
    pass


class ContainerExists(HostjobError):
    def __init__(self, container_id: str = "") -> None:
        super().__init__("container with given ID already exists")
        self.container_id = container_id


class ContainerNotFound(HostjobError):
    def __init__(self, container_id: str = "") -> None:
        super().__init__("container does not exist")
        self.container_id = container_id


class ContainerNotRunning(HostjobError):
    def __init__(self, container_id: str = "") -> None:
        super().__init__("container not running")
        self.container_id = container_id


class InvalidState(HostjobError):
    pass


class StateCorrupt(HostjobError):
    def __init__(self, container_id: str, reason: str) -> None:
        super().__init__(
            f"state of container {container_id} is corrupt ({reason});"
            " delete --force removes what is left of it"
        )
        self.container_id = container_id


class StartError(HostjobError):
    pass


class HookError(HostjobError):
    pass


class MountError(HostjobError):
    pass


class CgroupError(HostjobError):
    pass


class MissingController(CgroupError):
    def __init__(self, controller: str, needed_for: str) -> None:
        super().__init__(
            f"cgroup controller {controller!r} is not available on this host"
            f" but {needed_for} needs it"
        )
        self.controller = controller


class CgroupExists(CgroupError):
    """A job's cgroup must be made by hostjob for that job: one that exists already
    (made by someone else, or holding someone else's processes) is never adopted."""

    def __init__(self, path: str, where: str = "", pids: list[int] | None = None) -> None:
        if pids:
            shown = ", ".join(map(str, pids[:5])) + (", ..." if len(pids) > 5 else "")
            what = f"already holds processes ({shown})"
        else:
            what = "already exists" + (f" ({where})" if where else "")
        super().__init__(
            f"cgroup {path} {what} and was not created by hostjob for this container:"
            " a job container needs a cgroup of its own"
        )
        self.path = path


class NotSupported(HostjobError):
    pass


class DelegateError(HostjobError):
    """About a container that is not a job container (mixed pods), which hostjob hands
    to a real OCI runtime."""


class NotAJobContainer(DelegateError):
    """The container is not a job container (its annotations say so): a real OCI runtime
    runs it -- ``runtime``, its absolute path, once ``create`` handed it over. The library
    stops here; the ``hostjob`` command hands the command over
    (``hostjob.runtime.delegate``: ``create``, ``handover``)."""

    def __init__(self, message: str, runtime: str | None = None) -> None:
        super().__init__(message)
        self.runtime = runtime


class PermissionDenied(HostjobError):
    pass
