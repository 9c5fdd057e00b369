"""How a detached image container is to be looked after (``run -d``): its log limits,
restart policy, stop signal and timeout, and ``--rm``, checked and made into the
``DaemonConfig`` its record keeps."""

from __future__ import annotations

from hostjob.errors import InvalidArgument
from hostjob.specconv.jobconfig import DEFAULT_STOP_TIMEOUT, DaemonConfig

# The flags that only a detached container takes, as ``daemon_config``'s keywords.
DAEMON_ONLY = ("restart", "log_max_size", "log_max_files", "stop_signal", "stop_timeout")


def daemon_config(
    *,
    detach: bool,
    remove: bool = False,
    restart: str | None = None,
    log_max_size: str | None = None,
    log_max_files: int | None = None,
    stop_signal: str | None = None,
    stop_timeout: int | None = None,
) -> DaemonConfig | None:
    """The watcher's settings of a ``run -d`` container (None without ``detach``, where
    any of them is refused: a foreground run keeps its own stdio and exit status).
    Each bad value is a one-line ``InvalidArgument`` naming its flag."""
    from hostjob.linux import signals
    from hostjob.supervisor.crilog import DEFAULT_MAX_FILES, DEFAULT_MAX_SIZE, MIN_MAX_SIZE
    from hostjob.supervisor.restart import parse_restart
    from hostjob.units import parse_size

    given = {
        "restart": restart,
        "log_max_size": log_max_size,
        "log_max_files": log_max_files,
        "stop_signal": stop_signal,
        "stop_timeout": stop_timeout,
    }
    if not detach:
        named = [name for name in DAEMON_ONLY if given[name] is not None]
        if named:
            flag = "--" + named[0].replace("_", "-")
            raise InvalidArgument(f"{flag} applies to detached containers (run -d)")
        return None
    policy, retries = parse_restart(restart or "no")
    if remove and policy != "no":
        raise InvalidArgument(f"--rm and --restart {restart} contradict each other")
    size = DEFAULT_MAX_SIZE
    if log_max_size is not None:
        size = parse_size(log_max_size, "--log-max-size")
        if size < MIN_MAX_SIZE:
            raise InvalidArgument(f"--log-max-size {log_max_size}: at least 1k")
    files = DEFAULT_MAX_FILES if log_max_files is None else log_max_files
    if files < 1:
        raise InvalidArgument(f"--log-max-files {files}: at least 1")
    timeout = DEFAULT_STOP_TIMEOUT if stop_timeout is None else stop_timeout
    if timeout < 0:
        raise InvalidArgument(f"--stop-timeout {timeout}: not negative")
    return DaemonConfig(
        log_dir="",
        log_max_size=size,
        log_max_files=files,
        restart=policy,
        max_retries=retries,
        stop_signal=signals.parse_signal(stop_signal) if stop_signal else None,
        stop_timeout=timeout,
        remove=remove,
        command=[],
    )
