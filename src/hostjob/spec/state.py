"""The runtime-spec state document (``hostjob state``, ``list --format json``).

A module of its own so that printing a state does not load the config models of
``hostjob.spec.runtime``.
"""

from __future__ import annotations

from hostjob.spec import OCI_VERSION as OCI_VERSION
from hostjob.spec._decode import Model, boolean, integer, string, string_map


class State(Model):
    """The runtime-spec state document, as ``hostjob state`` prints it: runc's shape,
    plus the job container's mount mode and sandbox mount point as extra fields, and
    for a container whose process has ended (foreground ``run`` that keeps it, or
    ``run -d IMAGE``) how it ended; for ``run -d IMAGE`` its restart policy, how often
    it was restarted and whether its watcher runs."""

    __slots__ = (
        "annotations",
        "bundle",
        "created",
        "exit_code",
        "exit_signal",
        "finished_at",
        "id",
        "mount_mode",
        "mount_point",
        "oci_version",
        "oom_killed",
        "owner",
        "pid",
        "restart_count",
        "restart_policy",
        "rootfs",
        "status",
        "watcher",
    )
    oci_version: str | None
    id: str | None
    pid: int | None
    status: str | None
    bundle: str | None
    rootfs: str | None
    created: str | None
    annotations: dict[str, str] | None
    owner: str | None
    mount_mode: str | None
    mount_point: str | None
    exit_code: int | None  # 128+N for signal N; absent when unknown
    exit_signal: str | None  # "SIGKILL"
    finished_at: str | None
    oom_killed: bool | None
    restart_policy: str | None  # "no", "on-failure", "on-failure:3", "always"
    restart_count: int | None
    watcher: str | None  # "running" or "gone"
    FIELDS = (
        ("ociVersion", "oci_version", string),
        ("id", "id", string),
        ("pid", "pid", integer),
        ("status", "status", string),
        ("bundle", "bundle", string),
        ("rootfs", "rootfs", string),
        ("created", "created", string),
        ("annotations", "annotations", string_map),
        ("owner", "owner", string),
        ("mountMode", "mount_mode", string),
        ("mountPoint", "mount_point", string),
        ("exitCode", "exit_code", integer),
        ("exitSignal", "exit_signal", string),
        ("finishedAt", "finished_at", string),
        ("oomKilled", "oom_killed", boolean),
        ("restartPolicy", "restart_policy", string),
        ("restartCount", "restart_count", integer),
        ("watcher", "watcher", string),
    )
