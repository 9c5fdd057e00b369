"""``hostjob run IMAGE``: the runtime-spec config a job container gets from its image
and the command line, as podman builds one from an image and its flags.

The result is an ordinary config.json (written into the container's state
directory, its bundle), so it goes through the same one conversion step
(``hostjob.specconv.convert.to_job_config``) as any bundle.

* process: ``Entrypoint`` + ``Cmd`` (arguments replace ``Cmd``; ``--entrypoint``
  replaces ``Entrypoint`` and drops ``Cmd``), the image's ``Env``, then
  ``--env-file`` and ``--env``; ``WorkingDir`` (always a path inside the image) or
  ``--cwd``; the user, first of: ``--user``, an inherit-user ``--annotation``, the
  image's ``User``, and else the launcher's own identity (inherit mode); ``--user
  auto`` is the ``io.hostjob.user: auto`` annotation (a uid of the container's own).
* annotations: ``--annotation``, the mount mode and point, ``--loader``, ``--user auto``, and
  ``--secret SRC:DST`` (``io.hostjob.secrets``) — only flags.
* mounts: each ``--volume SRC:DST[:ro]`` as a bind mount.
* linux.resources: ``--memory``, ``--cpus``, ``--pids-limit``.

The image is untrusted data (SECURITY.md): its config chooses what runs and with which
environment, never how hostjob runs it. Its labels stay in the store (``inspect``
shows them) and never become annotations, which steer the runtime (mount mode and
point, inherit-user, the hcsshim keys); its ``WorkingDir`` cannot leave the image
with ``..``; its ``Volumes``, ``ExposedPorts`` and ``Healthcheck`` are ignored, and
its ``StopSignal`` only says how ``stop`` asks its own program to end
(``hostjob.images.run.stop_signal``), never part of the config.
"""

from __future__ import annotations

import os

from hostjob import log
from hostjob.boot import jsonio
from hostjob.errors import ConfigError, InvalidArgument
from hostjob.spec.runtime import OCI_VERSION
from hostjob.specconv.annotations import (
    ANNOTATION_INHERIT_USER,
    ANNOTATION_MOUNT_MODE,
    ANNOTATION_MOUNT_POINT,
    HCS_INHERIT_USER,
    truthy,
)
from hostjob.specconv.execution import ANNOTATION_LOADER
from hostjob.specconv.isolation import ANNOTATION_SECRETS, ANNOTATION_USER, AUTO, check_secret

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

    from hostjob.images.imagespec import ContainerConfig

CFS_PERIOD = 100_000


class RunFlags:
    """What the command line says about the container (``hostjob run``'s flags)."""

    __slots__ = (
        "annotations",
        "args",
        "cpus",
        "cwd",
        "entrypoint",
        "env",
        "env_files",
        "loader",
        "memory",
        "mount_mode",
        "mount_point",
        "pids_limit",
        "secrets",
        "tty",
        "user",
        "volumes",
    )

    def __init__(self, **values: Any) -> None:
        self.args: list[str] = values.pop("args", [])
        self.entrypoint: str | None = values.pop("entrypoint", None)
        self.env: list[str] = values.pop("env", [])
        self.env_files: list[str] = values.pop("env_files", [])
        self.user: str | None = values.pop("user", None)
        self.cwd: str | None = values.pop("cwd", None)
        self.tty: bool = values.pop("tty", False)
        self.memory: int | None = values.pop("memory", None)
        self.cpus: float | None = values.pop("cpus", None)
        self.pids_limit: int | None = values.pop("pids_limit", None)
        self.mount_point: str | None = values.pop("mount_point", None)
        self.mount_mode: str | None = values.pop("mount_mode", None)
        self.loader: str | None = values.pop("loader", None)  # io.hostjob.loader
        self.volumes: list[str] = values.pop("volumes", [])
        self.annotations: list[str] = values.pop("annotations", [])
        self.secrets: list[str] = values.pop("secrets", [])
        if values:
            raise TypeError(f"unknown run flags: {sorted(values)}")

    def check(self) -> None:
        """Refuse bad flags before anything is pulled or made."""
        build_spec(None, self, need_command=False)


def build_spec(
    image: ContainerConfig | None, flags: RunFlags, *, need_command: bool = True
) -> dict[str, Any]:
    """The config.json for a job container of ``image`` run with ``flags``."""
    from hostjob.images.imagespec import ContainerConfig

    config = image or ContainerConfig()
    # Only the operator's flags make annotations: the image's labels are data.
    annotations: dict[str, str] = {}
    for entry in flags.annotations:
        key, sep, value = entry.partition("=")
        if not sep or not key:
            raise InvalidArgument(f"--annotation {entry!r} is not KEY=VALUE")
        annotations[key] = value
    if flags.mount_mode:
        annotations[ANNOTATION_MOUNT_MODE] = flags.mount_mode
    if flags.mount_point:
        annotations[ANNOTATION_MOUNT_POINT] = flags.mount_point
    if flags.loader:
        annotations[ANNOTATION_LOADER] = flags.loader
    if flags.secrets:
        given = annotations.get(ANNOTATION_SECRETS)
        annotations[ANNOTATION_SECRETS] = ",".join(
            [*([given] if given else []), *(_secret(entry) for entry in flags.secrets)]
        )
    process: dict[str, Any] = {
        "terminal": flags.tty,
        "args": _argv(config, flags) if need_command else [],
        "env": _env(_image_env(config.env or []), flags),
        "cwd": flags.cwd or _image_path(config.working_dir or "/"),
    }
    inherit_keys = [k for k in (ANNOTATION_INHERIT_USER, HCS_INHERIT_USER) if k in annotations]
    if flags.user:
        # An explicit --user always wins, also over an inherit-user
        # annotation given with it: the annotation is dropped, not the flag.
        for key in inherit_keys:
            log.warning(f"--user {flags.user} wins over --annotation {key}={annotations[key]}")
            del annotations[key]
        if flags.user == AUTO:
            annotations[ANNOTATION_USER] = AUTO  # create allocates the uid and gid
        else:
            annotations.pop(ANNOTATION_USER, None)
            process["user"] = _user(flags.user, "--user")
    elif ANNOTATION_USER in annotations:
        pass  # --annotation io.hostjob.user=auto: as --user auto
    elif any(truthy(annotations[key]) for key in inherit_keys):
        pass  # the operator asked for the launcher's identity: the image's User is moot
    elif config.user:
        process["user"] = _user(config.user, "the image's User")
    else:
        # Neither the image nor --user names a user: the launcher's own identity.
        annotations[ANNOTATION_INHERIT_USER] = "true"
    spec: dict[str, Any] = {
        "ociVersion": OCI_VERSION,
        "process": process,
        "root": {"path": "rootfs"},
        "mounts": [_volume(v) for v in flags.volumes],
        "annotations": annotations,
    }
    resources = _resources(flags)
    if resources:
        spec["linux"] = {"resources": resources}
    return spec


def _argv(config: ContainerConfig, flags: RunFlags) -> list[str]:
    if flags.entrypoint is not None:
        entrypoint = _words(flags.entrypoint)
        cmd = list(flags.args)
    else:
        entrypoint = list(config.entrypoint or [])
        cmd = list(flags.args) if flags.args else list(config.cmd or [])
    argv = entrypoint + cmd
    if not argv:
        raise ConfigError("the image has no Entrypoint or Cmd: give a command to run")
    return argv


def _image_path(path: str) -> str:
    """A path of the image (``WorkingDir``), wherever the mode puts the image; its
    ``..`` resolved against the image's root, so it never names a host directory."""
    return "$CONTAINER_SANDBOX_MOUNT_POINT/" + os.path.normpath("/" + path).lstrip("/")


def _words(entrypoint: str) -> list[str]:
    """``--entrypoint``: a JSON array (``'["/bin/app", "-v"]'``) or one program."""
    if entrypoint.startswith("["):
        try:
            words = jsonio.loads(entrypoint)
        except ValueError as err:
            raise InvalidArgument(f"--entrypoint {entrypoint!r} is not a JSON array") from err
        if not isinstance(words, list) or not all(isinstance(w, str) for w in words):
            raise InvalidArgument("--entrypoint: the JSON array must hold strings")
        return words
    return [entrypoint] if entrypoint else []


def _env(image_env: list[str], flags: RunFlags) -> list[str]:
    return [*image_env, *flag_env(flags)]


def flag_env(flags: RunFlags) -> list[str]:
    """The environment the command line gives: each ``--env-file``'s entries, then each
    ``-e`` (a later one wins), ``KEY`` alone taking the launcher's value."""
    env: list[str] = []
    for path in flags.env_files:
        try:
            with open(path) as f:
                lines = f.read().splitlines()
        except OSError as err:
            raise InvalidArgument(f"--env-file {path}: {err.strerror}") from err
        env += [
            _env_entry(line.strip())
            for line in lines
            if line.strip() and not line.lstrip().startswith("#")
        ]
    env += [_env_entry(entry) for entry in flags.env]
    return env


def _env_entry(entry: str) -> str:
    """``KEY=VALUE``, or ``KEY`` alone for the launcher's value (docker's rule)."""
    key, sep, _value = entry.partition("=")
    if not key:
        raise InvalidArgument(f"environment entry {entry!r} has no name")
    if sep:
        return entry
    return f"{key}={os.environ.get(key, '')}"


def _image_env(entries: list[str]) -> list[str]:
    """The image's ``Env``, each entry ``NAME=VALUE`` (else an error naming it: the
    runtime would name a ``process.env`` nobody wrote)."""
    for i, entry in enumerate(entries):
        if not entry.partition("=")[0] or "=" not in entry:
            raise ConfigError(f"the image's Env[{i}] {entry!r} is not NAME=VALUE")
    return entries


def _user(user: str, what: str) -> dict[str, Any]:
    """``process.user`` of the image-spec's forms of a user (``uid``, ``uid:gid``,
    ``name``, ``name:group``, ``uid:group``, ``name:gid``), on the host's accounts: a
    group given by name is resolved here, and without a group a uid gets its passwd
    entry's groups (gid 0 when it has none, as docker does); a user name is left to
    the runtime, which resolves it as it does any ``username``."""
    name, sep, group = user.partition(":")
    if not name or (sep and not group):
        raise _bad(what, f"{what} {user!r}: expected user[:group]")
    gid = _group_id(group, user, what) if sep else None
    if not _is_id(name):
        named: dict[str, Any] = {"username": name}
        if gid is not None:
            named["gid"] = gid
        return named
    uid = _id(name, user, what)
    if gid is not None:
        return {"uid": uid, "gid": gid}
    import pwd

    try:
        entry = pwd.getpwuid(uid)
    except KeyError:
        return {"uid": uid, "gid": 0}
    groups = sorted(set(os.getgrouplist(entry.pw_name, entry.pw_gid)) - {entry.pw_gid})
    resolved: dict[str, Any] = {"uid": uid, "gid": entry.pw_gid}
    if groups:
        resolved["additionalGids"] = groups
    return resolved


def _is_id(text: str) -> bool:
    return text.isdigit() and text.isascii()  # "²" is a digit to isdigit, not to int


def _id(text: str, user: str, what: str) -> int:
    from hostjob.units import parse_id

    value = parse_id(text)
    if value is None:
        raise _bad(what, f"{what} {user!r}: {text[:12]} is out of range for an ID")
    return value


def _group_id(group: str, user: str, what: str) -> int:
    if _is_id(group):
        return _id(group, user, what)
    import grp

    try:
        return grp.getgrnam(group).gr_gid
    except (KeyError, ValueError, UnicodeError) as err:
        raise _bad(what, f"{what} {user!r}: no group {group!r} on this host") from err


def _bad(what: str, message: str) -> ConfigError | InvalidArgument:
    """A flag's bad value, or the image's."""
    return InvalidArgument(message) if what.startswith("--") else ConfigError(message)


def _secret(text: str) -> str:
    """``--secret SRC:DST``: SRC an existing file (made absolute), DST a path of the
    container's view, as the annotation holds them."""
    source, sep, destination = text.partition(":")
    if "," in text or not sep or not source:
        raise InvalidArgument(f"--secret {text!r}: expected SRC:DST (paths without commas)")
    source, destination = check_secret(f"{os.path.abspath(source)}:{destination}")
    if not os.path.isfile(source):
        raise InvalidArgument(f"--secret {text!r}: {source} is not a file")
    return f"{source}:{destination}"


def _volume(text: str) -> dict[str, Any]:
    parts = text.split(":")
    if len(parts) not in (2, 3) or not parts[0] or not parts[1]:
        raise InvalidArgument(f"--volume {text!r}: expected SRC:DST[:ro|rw]")
    source, destination = parts[0], parts[1]
    mode = parts[2] if len(parts) == 3 else "rw"
    if mode not in ("ro", "rw"):
        raise InvalidArgument(f"--volume {text!r}: the mode must be ro or rw")
    if not destination.startswith("/"):
        raise InvalidArgument(f"--volume {text!r}: the destination must be absolute")
    source = os.path.abspath(source)
    if not os.path.exists(source):
        raise InvalidArgument(f"--volume {text!r}: {source} does not exist")
    return {
        "destination": destination,
        "type": "bind",
        "source": source,
        "options": ["rbind", mode],
    }


def _resources(flags: RunFlags) -> dict[str, Any]:
    resources: dict[str, Any] = {}
    if flags.memory is not None:
        resources["memory"] = {"limit": flags.memory}
    if flags.cpus is not None:
        if flags.cpus <= 0:
            raise InvalidArgument(f"--cpus {flags.cpus}: must be more than 0")
        resources["cpu"] = {"quota": max(1000, int(flags.cpus * CFS_PERIOD)), "period": CFS_PERIOD}
    if flags.pids_limit is not None:
        resources["pids"] = {"limit": flags.pids_limit}
    return resources
