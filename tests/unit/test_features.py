"""``hostjob features`` has the keys runc 1.3's document has (containerd 2.x's shim and
docker 28 read it), with hostjob's own answers."""

from __future__ import annotations

from typing import Any

from hostjob.spec.features import features

# The shape of `runc features` of runc 1.3.6 (Debian unstable), values left out.
RUNC_1_3 = {
    "ociVersionMin": None,
    "ociVersionMax": None,
    "hooks": None,
    "mountOptions": None,
    "linux": {
        "namespaces": None,
        "capabilities": None,
        "cgroup": {"v1": None, "v2": None, "systemd": None, "systemdUser": None, "rdma": None},
        "seccomp": {
            "enabled": None,
            "actions": None,
            "operators": None,
            "archs": None,
            "knownFlags": None,
            "supportedFlags": None,
        },
        "apparmor": {"enabled": None},
        "selinux": {"enabled": None},
        "intelRdt": {"enabled": None},
        "mountExtensions": {"idmap": {"enabled": None}},
    },
    "annotations": None,
    "potentiallyUnsafeConfigAnnotations": None,
}


def shape(document: dict[str, Any], like: dict[str, Any]) -> dict[str, Any]:
    """``document``'s keys, nested where ``like`` nests them."""
    return {
        k: shape(v, like[k]) if isinstance(like.get(k), dict) else None for k, v in document.items()
    }


def test_the_keys_are_runc_1_3s() -> None:
    assert shape(features(), RUNC_1_3) == RUNC_1_3


def test_what_containerd_2_reads_says_what_hostjob_gives() -> None:
    doc = features()
    # no recursive read-only mounts and no user namespaces: containerd refuses such pods
    assert "rro" not in doc["mountOptions"]
    assert doc["linux"]["mountExtensions"]["idmap"]["enabled"] is False
    assert doc["linux"]["namespaces"] == []
    # the systemd cgroup driver (--systemd-cgroup), not a user's systemd
    assert doc["linux"]["cgroup"]["systemd"] is True
    assert doc["linux"]["cgroup"]["systemdUser"] is False
    assert doc["linux"]["intelRdt"] == {"enabled": False}
