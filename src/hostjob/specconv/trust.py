"""Who chooses what of a job container: the operator, or a Kubernetes pod's author.

What the operator passes is theirs to choose: flags, ``--annotation``, a bundle's
config.json from ``run``, ctr, podman or docker. A container that Kubernetes' runtime
creates for a pod (``pods.is_cri``) is another matter: containerd builds its config
from the pod, so the pod's author chooses its user (within the cluster's policy), its
volumes, arguments, environment and working directory, and every annotation the
handler's ``pod_annotations`` lets through (``io.hostjob.*`` and
``microsoft.com/hostprocess-*`` in the operators' guide). Such a pod may choose what
keeps it at its own uid: the mount mode, ``io.hostjob.user: auto``, which of its
containers are job containers, joining the pod's namespaces. What would give it more
is the operator's alone (``OPERATOR_ONLY``):

* ``inherit-user``: run as the launcher -- root with every capability, for containerd;
* ``secrets``: root reads each host file it names (``/etc/shadow``) into the job's
  files;
* ``mount-point``: root makes the directory and mounts the pod's files on it -- in host
  mode anywhere on the host's tree (an empty directory that root's services read, such
  as a cron spool, would become the pod's).

A CRI container whose annotations ask for one is refused at create with one line naming
the annotation and the operator's switch, ``--allow-pod-annotations=CHOICE[,CHOICE...]``
(or ``all``): a global flag the operator gives the hostjob of a runtime handler whose
pod authors they trust (its ``BinaryName`` wrapper), as ``--default-mount-mode``.
Without it the guide's containerd configuration is safe as written. The operator's own
defaults (``--default-inherit-user``, ``--default-rootfs-mount-point``) are not the
pod's: only what the config itself asks is checked, and asking for less
(``io.hostjob.inherit-user: "false"``) is always allowed.

In bind mode a pod's volumes lie over host paths in the job's mount namespace, where a
setuid program of the host would read them as root (a volume at
``/etc/ld.so.preload`` or ``/etc/shadow``): a CRI container in bind mode that does not
run as root runs every process with ``no_new_privs`` (``confined``).

Pure, as the conversion is: it reads no file.
"""

from __future__ import annotations

from hostjob import log
from hostjob.errors import ConfigError, InvalidArgument
from hostjob.specconv.annotations import (
    ANNOTATION_INHERIT_USER,
    ANNOTATION_MOUNT_POINT,
    HCS_INHERIT_USER,
    HCS_ROOTFS_LOCATION,
    truthy,
)
from hostjob.specconv.isolation import ANNOTATION_SECRETS

TYPE_CHECKING = False
if TYPE_CHECKING:
    from hostjob.spec import runtime as wire
    from hostjob.specconv.jobconfig import ProcessConfig

# The operator's switch, a global flag; also its key in the operator's defaults that the
# conversion takes (``convert.to_job_config``), its value as the flag's.
ALLOW_FLAG = "--allow-pod-annotations"
ALL = "all"

# choice -> (the annotations that ask for it, what it would give a pod)
OPERATOR_ONLY = {
    "inherit-user": (
        (ANNOTATION_INHERIT_USER, HCS_INHERIT_USER),
        "it would run as the launcher, root",
    ),
    "secrets": ((ANNOTATION_SECRETS,), "root would read the host files it names"),
    "mount-point": (
        (ANNOTATION_MOUNT_POINT, HCS_ROOTFS_LOCATION),
        "root would make and mount the directory it names on the host",
    ),
}
# A config field that names a mount point as the annotations do (hcsshim's).
WINDOWS_MOUNT_POINT = "windows.jobContainer.rootfsMountPoint"


def parse_allowed(text: str | None) -> frozenset[str]:
    """``--allow-pod-annotations``'s value: choices of ``OPERATOR_ONLY``, comma-separated,
    or ``all``; an unknown word is an InvalidArgument naming the known ones."""
    words = frozenset(w.strip() for w in (text or "").split(",") if w.strip())
    if ALL in words:
        return frozenset(OPERATOR_ONLY)
    unknown = sorted(words - OPERATOR_ONLY.keys())
    if unknown:
        known = ", ".join([*OPERATOR_ONLY, ALL])
        raise InvalidArgument(f"{ALLOW_FLAG}: unknown choice {unknown[0]!r} (known: {known})")
    return words


def refuse_operator_only(spec: wire.Spec, annotations: dict[str, str], allow: str | None) -> None:
    """For a container Kubernetes' runtime created: a ConfigError naming the first
    operator-only annotation it asks for that the operator's switch (``allow``, the
    value of ``ALLOW_FLAG``) does not let a pod choose."""
    allowed = parse_allowed(allow)
    job = spec.windows.job_container if spec.windows is not None else None
    for choice, (keys, gives) in OPERATOR_ONLY.items():
        if choice in allowed:
            continue
        asked = [f"annotations.{k}" for k in keys if _asks(k, annotations.get(k))]
        if choice == "mount-point" and job is not None and job.rootfs_mount_point:
            asked.append(WINDOWS_MOUNT_POINT)
        if asked:
            raise ConfigError(
                f"only the operator may ask for this ({gives}), not a pod: refused for a"
                " container created through Kubernetes' CRI unless the runtime handler's"
                f" hostjob runs with {ALLOW_FLAG}={choice}",
                asked[0],
            )


def _asks(key: str, value: str | None) -> bool:
    """Whether the annotation ``key`` asks for more than the pod's own uid gives."""
    if value is None:
        return False
    if key in (ANNOTATION_INHERIT_USER, HCS_INHERIT_USER):
        return truthy(value)
    return bool(value.strip())


def confined(cri: bool, mount_mode: str, process: ProcessConfig) -> bool:
    """Whether every process of the job must run with ``no_new_privs`` although its own
    config does not ask for it: a CRI container in bind mode whose user is not root. Its
    mount namespace shows the pod's volumes at host paths (``/etc/shadow``,
    ``/etc/ld.so.preload``), which a setuid program of the host would otherwise read as
    root; with it the kernel grants no setuid bit and no file capability. Named once in
    the log."""
    if not cri or mount_mode != "bind" or process.no_new_privileges:
        return False
    if process.uid == 0 or (process.uid is None and not process.username):
        return False  # root: nothing to gain
    log.warning(
        "noNewPrivileges is set for every process of this container: in bind mode a pod's"
        " volumes lie over host paths in its mount namespace, where a setuid program would"
        " read them as root"
    )
    return True
