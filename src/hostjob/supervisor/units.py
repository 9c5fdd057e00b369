"""systemd: a unit that runs a ``run -d IMAGE`` container at boot, and ``sd_notify``.

``unit_file`` writes what ``hostjob generate systemd NAME`` prints: a ``Type=notify``
service whose ``ExecStart`` is the same ``hostjob run`` (same image, flags and name)
in the foreground, with ``--rm``. So systemd is the watcher: the program's output
goes to the journal, its exit status is the unit's (``hostjob run`` exits with it),
``Restart=`` carries the restart policy, and ``systemctl stop`` runs ``hostjob stop``
(the stop signal, then SIGKILL to the job after the timeout). The unit delegates its
cgroup (``Delegate=yes``): ``hostjob run`` makes the job's cgroup inside it
(``runtime.verbs.create``), so ``journalctl -u`` shows the job's output and
``systemctl status`` its processes. ``KillMode=mixed``: systemd signals only ``hostjob
run``, which passes signals on and ends the job itself (SIGKILL to what is left only at
the end of the timeout);
``ExecStopPost`` deletes whatever a killed ``hostjob run`` left. ``ExecStartPre``
deletes a container of the same name first: the unit replaces the detached one it
was generated from.

The environment the command line gave (``-e``, ``--env-file``) is never in the unit:
a unit file is world-readable, ``systemctl show`` prints its command lines, and the
``hostjob run`` it starts lives as long as the job, its arguments in
``/proc/PID/cmdline`` for every user. ``generate`` writes those entries, as the
container's record keeps them, to ``<store>/units/<name>.env`` (root's, 0600), and the
unit's ``hostjob run`` reads them from there (``--env-file``). Credentials are never
written anywhere.

``notify`` sends a datagram to ``$NOTIFY_SOCKET`` (``READY=1`` once the program
runs) through ``_socket``, the C module under ``socket`` (whose import is ~10x
dearer).
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

from hostjob.errors import ContainerNotFound, InvalidArgument, InvalidState

if TYPE_CHECKING:
    from hostjob.runtime.container import Container
    from hostjob.specconv.jobconfig import DaemonConfig

# The unit's stop timeout beyond ``stop -t``: hostjob run's own end of the job
# (HOSTJOB_STOP_GRACE, 5 s) and the delete.
STOP_SLACK = 15
_SPECIAL = frozenset(" \t\"'\\;")


def notify(socket_path: str, message: str) -> None:
    """``sd_notify``: a datagram to systemd's notification socket (an abstract one
    when the path starts with ``@``). Errors are ignored, as sd_notify's callers do."""
    import _socket

    address = "\0" + socket_path[1:] if socket_path.startswith("@") else socket_path
    try:
        sock = _socket.socket(_socket.AF_UNIX, _socket.SOCK_DGRAM | _socket.SOCK_CLOEXEC)
        try:
            sock.sendto(message.encode(), address)
        finally:
            sock.close()
    except OSError:
        pass


def quote(word: str) -> str:
    """One word of a unit's command line: ``%`` and ``$`` doubled (specifiers and
    variables stay literal), quoted when it holds blanks, quotes, backslashes or
    ``;``. A control character cannot be written: refused."""
    if any(ord(c) < 32 or ord(c) == 127 for c in word):
        raise InvalidArgument(f"{word!r} holds a control character: it cannot go in a unit file")
    word = word.replace("%", "%%").replace("$", "$$")
    if word and not _SPECIAL.intersection(word):
        return word
    return '"' + word.replace("\\", "\\\\").replace('"', '\\"') + '"'


def command_line(words: list[str]) -> str:
    return " ".join(quote(w) for w in words)


def unit_for(container: Container, hostjob: list[str]) -> str:
    """``generate systemd``: the unit of a ``run -d IMAGE`` container. The environment
    its command line gave goes into a root-only file the unit names (``env_file``),
    written now; never into the unit."""
    record = container.record
    if record is None:
        raise ContainerNotFound(container.id)
    daemon = record.daemon
    if daemon is None or not daemon.command:
        raise InvalidState(
            f"container {container.id} was not made by `hostjob run -d IMAGE`: no command to run"
        )
    if daemon.env is None and any(w in ENV_WORDS for w in daemon.command):
        raise InvalidState(
            f"container {container.id} was made by an older hostjob, which keeps its -e"
            " values in the command a unit would show: run it again with run -d"
        )
    image = record.config.image or "an image"
    env_path = env_file(container.id, daemon)
    return unit_file(container.id, image, daemon, hostjob, container.store.root, env_path)


# How a command of an older record may name environment values.
ENV_WORDS = ("-e", "--env", "--env-file")


def env_file(name: str, daemon: DaemonConfig) -> str | None:
    """Write the container's environment entries to ``<store>/units/<name>.env`` (the
    store is root's, 0700; the directory 0700, the file 0600, written whole), where only
    root reads them, and return its path; None (and any earlier such file removed) when
    it has none. A value the file cannot hold exactly (a line break, blanks around it
    that its reader strips) is refused with one line."""
    from hostjob.linux import fsutil

    # The log directory is <store>/logs/<id> (hostjob.images.run_image).
    folder = os.path.join(os.path.dirname(os.path.dirname(daemon.log_dir)), "units")
    path = os.path.join(folder, f"{name}.env")
    if not daemon.env:
        try:
            os.unlink(path)
        except FileNotFoundError:
            pass
        return None
    for entry in daemon.env:
        if any(c in entry for c in "\n\r\0") or entry != entry.strip() or entry.startswith("#"):
            key = entry.partition("=")[0]
            raise InvalidArgument(
                f"-e {key}: its value cannot be kept exactly in the unit's environment file"
                " (a line break, or blanks at its ends)"
            )
    fsutil.ensure_dir(folder, 0o700)
    fsutil.write_atomic(path, "".join(f"{e}\n" for e in daemon.env).encode(), mode=0o600)
    return path


def unit_file(
    name: str,
    image: str,
    daemon: DaemonConfig,
    hostjob: list[str],
    root: str,
    env_path: str | None = None,
) -> str:
    """The service unit for container ``name`` (see the module docstring).

    ``hostjob`` is how to run hostjob (an absolute path); ``root`` the state root;
    ``env_path`` the container's environment file (``env_file``)."""
    base = [*hostjob, "--root", root]
    run = ["run", "--rm", "--name", name, *(["--env-file", env_path] if env_path else [])]
    timeout = daemon.stop_timeout
    signum = daemon.stop_signal
    signal = str(signum)
    restart = daemon.restart or "no"
    unit = [
        f"# hostjob generate systemd {name}: the container {name} in the foreground under",
        "# systemd (its output in the journal, its exit status the unit's).",
        f"# Install as /etc/systemd/system/hostjob-{name}.service, then",
        f"# systemctl daemon-reload && systemctl enable --now hostjob-{name}",
        "[Unit]",
        f"Description=hostjob container {name} ({image})",
        "Wants=network-online.target",
        "After=network-online.target",
    ]
    if restart == "on-failure" and daemon.max_retries is not None:
        # on-failure:N: N restarts, then systemd gives up (N+1 starts, ever).
        unit += ["StartLimitIntervalSec=infinity", f"StartLimitBurst={daemon.max_retries + 1}"]
    unit += [
        "",
        "[Service]",
        "Type=notify",
        "NotifyAccess=main",
        f"ExecStartPre={command_line([*base, 'delete', '--force', name])}",
        f"ExecStart={command_line([*base, *run, *daemon.command])}",
        # The signal given: the unit's container runs in the foreground, whose record
        # keeps no stop signal of its own (the image's, or run -d's --stop-signal).
        f"ExecStop={command_line([*base, 'stop', '-t', str(timeout), '-s', signal, name])}",
        f"ExecStopPost={command_line([*base, 'delete', '--force', name])}",
        "Delegate=yes",
        "KillMode=mixed",
        f"TimeoutStopSec={timeout + STOP_SLACK}",
        # hostjob run exits with 128+N when its program dies of signal N: the stop
        # signal's, and SIGTERM's, which systemd counts as clean for any service.
        f"SuccessExitStatus={' '.join(sorted({str(128 + signum), '143'}))}",
        f"Restart={restart}",
        "RestartSec=100ms",
        "",
        "[Install]",
        "WantedBy=multi-user.target",
    ]
    return "\n".join(unit) + "\n"
