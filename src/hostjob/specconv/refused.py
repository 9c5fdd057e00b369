"""The runtime-spec 1.1-1.3 fields hostjob does not apply, refused with one line each.

Newer clients (containerd 2.x, podman 5, runc 1.2 and 1.3's configs) can send a process's
scheduling policy, I/O priority and CPU affinity, an execution domain, Intel RDT classes,
a NUMA memory policy and idmapped mounts. A job container could honour some of them (they
need no namespace), but hostjob does not set them yet, and a limit asked for and silently
not applied is worse than a create that fails saying why: so each is refused, naming its
JSON path. The one exception is an execution domain that asks for nothing: ``LINUX``
without flags is every process's own, so it is given as it is.

Pure, like the conversion that calls it; on the runtime path (no imports beyond errors).
"""

from __future__ import annotations

from hostjob.errors import ConfigError

TYPE_CHECKING = False
if TYPE_CHECKING:
    from hostjob.spec import runtime as wire

_NOT_YET = "is not applied by hostjob: remove it to run this container as a job container"


def refuse_process_fields(process: wire.Process, path: str) -> None:
    """A process's (config.json's or ``exec --process``'s) fields hostjob does not apply."""
    if process.scheduler is not None:
        raise ConfigError(f"a scheduling policy {_NOT_YET}", f"{path}.scheduler")
    if process.io_priority is not None:
        raise ConfigError(f"an I/O priority {_NOT_YET}", f"{path}.ioPriority")
    if process.exec_cpu_affinity is not None:
        raise ConfigError(f"a CPU affinity {_NOT_YET}", f"{path}.execCPUAffinity")


def refuse_linux_fields(linux: wire.Linux, mounts: list[wire.Mount]) -> None:
    """``linux``'s fields and mount extensions hostjob does not apply."""
    if linux.intel_rdt is not None:
        raise ConfigError(
            "Intel RDT is not supported by hostjob (`hostjob features`: intelRdt disabled)",
            "linux.intelRdt",
        )
    personality = linux.personality
    if personality is not None and (
        personality.get("domain") != "LINUX" or personality.get("flags")
    ):
        raise ConfigError(
            f"only the LINUX domain without flags (every process's own) is given: {personality}",
            "linux.personality",
        )
    if linux.memory_policy is not None:
        raise ConfigError(f"a NUMA memory policy {_NOT_YET}", "linux.memoryPolicy")
    for i, mount in enumerate(mounts):
        if mount.uid_mappings or mount.gid_mappings:
            raise ConfigError(
                "idmapped mounts are not supported by hostjob (`hostjob features`: idmap disabled)",
                f"mounts[{i}].uidMappings" if mount.uid_mappings else f"mounts[{i}].gidMappings",
            )
