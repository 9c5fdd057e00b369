"""The config.json template ``hostjob spec`` writes: a job container running ``sh``.

Like ``runc spec`` it asks for a terminal and runs ``sh``; unlike it, it has no
namespaces, masked paths or container-internal mounts, which would mean nothing
for a process that runs on the host.
"""

from __future__ import annotations

import posix

from hostjob.boot import jsonio, paths
from hostjob.errors import ConfigError
from hostjob.spec.runtime import OCI_VERSION

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any


def job_container_template() -> dict[str, Any]:
    return {
        "ociVersion": OCI_VERSION,
        "process": {
            "terminal": True,
            "user": {"uid": 0, "gid": 0},
            "args": ["sh"],
            "env": ["TERM=xterm"],
            "cwd": "/",
            "noNewPrivileges": False,
        },
        "root": {"path": "rootfs", "readonly": False},
        "mounts": [],
        "annotations": {"io.hostjob.mount-mode": "host"},
        "linux": {"cgroupsPath": "", "resources": {}},
        "windows": {"jobContainer": {}},
    }


def write_template(bundle: str) -> str:
    """Write ``<bundle>/config.json``; refuses to overwrite one."""
    path = paths.join(bundle, "config.json")
    data = jsonio.dumps(job_container_template(), 2) + "\n"
    try:
        fd = posix.open(
            path, posix.O_WRONLY | posix.O_CREAT | posix.O_EXCL | posix.O_CLOEXEC, 0o644
        )
    except FileExistsError as err:
        raise ConfigError(f"{path} exists; remove it first") from err
    except OSError as err:
        raise ConfigError(f"cannot write {path}: {err.strerror}") from err
    try:
        posix.write(fd, data.encode())
    finally:
        posix.close(fd)
    return path
