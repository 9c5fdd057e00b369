"""The runtime-spec features document (``hostjob features``): what hostjob
honours, stated honestly — no namespaces, seccomp but no AppArmor/SELinux, both
cgroup versions and the systemd driver — with the keys runc 1.3's has. containerd
2.x's shim reads the document: its CRI offers recursive read-only mounts only to a
runtime whose ``mountOptions`` has ``rro``, user namespaces only to one with ``idmap``
enabled and a ``user`` namespace, and hostjob lists neither."""

from __future__ import annotations

from hostjob.linux.syscalls import CAP_NAMES
from hostjob.seccomp import bpf
from hostjob.spec.runtime import HOOK_POINTS, OCI_VERSION

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any


def features() -> dict[str, Any]:
    return {
        "ociVersionMin": "1.0.0",
        "ociVersionMax": OCI_VERSION,
        "hooks": list(HOOK_POINTS),
        # Host mode links bind mounts; bind mode binds them, read-only on "ro", with the
        # propagation asked (rprivate by default).
        "mountOptions": [
            "bind",
            "rbind",
            "ro",
            "rw",
            "private",
            "rprivate",
            "slave",
            "rslave",
            "shared",
            "rshared",
            "unbindable",
            "runbindable",
        ],
        "linux": {
            # Job containers run in the host's namespaces; configs that list
            # namespaces are accepted with a warning.
            "namespaces": [],
            "capabilities": list(CAP_NAMES),
            # --systemd-cgroup: the job is a transient scope systemd knows (not as a user's
            # manager: no systemdUser)
            "cgroup": {
                "v1": True,
                "v2": True,
                "systemd": True,
                "systemdUser": False,
                "rdma": False,
            },
            # libseccomp's, applied to every process of the job (SCMP_ACT_NOTIFY needs a
            # seccomp agent, which hostjob does not have)
            "seccomp": {
                "enabled": True,
                "actions": sorted(bpf.ACTIONS),
                "operators": sorted(bpf.OPERATORS),
                "archs": list(bpf.ARCHES),
                "knownFlags": list(bpf.FLAGS),
                "supportedFlags": list(bpf.FLAGS),
            },
            "apparmor": {"enabled": False},
            "selinux": {"enabled": False},
            "intelRdt": {"enabled": False},
            "mountExtensions": {"idmap": {"enabled": False}},
        },
        "annotations": {
            "io.hostjob.mount-mode": "host|bind (default: bind for a Kubernetes pod's containers)",
            "io.hostjob.job-container": "true|false (false: run by a real OCI runtime)",
            "io.hostjob.job-container.<container name>": "true|false (a pod annotation)",
            "io.hostjob.rootfs-mount-point": "absolute path",
            "io.hostjob.inherit-user": "true|false",
            "io.hostjob.pod-namespaces": "join (a pod annotation: join the sandbox's"
            " network, IPC and UTS namespaces)",
            "io.hostjob.user": "auto (a uid and gid of the container's own)",
            "io.hostjob.secrets": "SRC:DST[,SRC:DST...] (host files, 0400, the job user's)",
            "microsoft.com/hostprocess-container": "accepted",
            "microsoft.com/hostprocess-rootfs-location": "absolute path",
            "microsoft.com/hostprocess-inherit-user": "true|false",
        },
        "potentiallyUnsafeConfigAnnotations": [
            "io.hostjob.rootfs-mount-point",
            "io.hostjob.inherit-user",
            "io.hostjob.secrets",
            "microsoft.com/hostprocess-rootfs-location",
            "microsoft.com/hostprocess-inherit-user",
        ],
    }
