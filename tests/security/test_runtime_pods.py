"""A Kubernetes pod's author is a principal: a pod that runs as uid 1000 gets what uid 1000
may do on the host and nothing more.

containerd builds a pod's container's config, annotations included, from the pod
(``tests/security/pods.py``). Each annotation that only the operator may set is shown
first doing what it does where nothing stops it -- the same config as an operator's
bundle, whose choice it is: root with every capability, root's ``/etc/shadow``, the pod's
files at an empty host directory -- then refused for the pod at create with one line
naming the annotation and the operator's switch, nothing made; next to its control, the
same pod without the annotation, which runs as its uid; and with the operator's switch,
which lets a trusted handler's pods ask for it. And in bind mode, where the pod's volumes
lie over host paths in its own mount namespace, a setuid program of the host gives a
non-root pod nothing.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.helpers import make_bundle, new_id
from tests.security.pods import POD_UID, Node, bind_volume, pod_config, trusted_handler

ALLOW = "--allow-pod-annotations"
SHOW_ID = "id -u; grep -E '^(CapEff|NoNewPrivs):' /proc/self/status"


def own_capabilities() -> str:
    """This (root) process's effective capabilities: every one."""
    with open("/proc/self/status") as f:
        return next(line.split()[1] for line in f if line.startswith("CapEff:"))


def shown(output: str) -> tuple[str, str, str]:
    """(uid, CapEff, NoNewPrivs) of ``SHOW_ID``'s output."""
    uid, cap, nnp = output.splitlines()[:3]
    return uid, cap.split()[1], nnp.split()[1]


@pytest.mark.parametrize(
    "key", ["io.hostjob.inherit-user", "microsoft.com/hostprocess-inherit-user"]
)
def test_a_pod_cannot_run_itself_as_root(node: Node, open_tmp: Path, key: str) -> None:
    asked = {key: "true"}
    # Where nothing stops it: the annotation runs the job as its launcher -- root, every
    # capability -- whatever user the config names.
    operators = make_bundle(
        open_tmp / "operator", pod_config("sh", "-c", SHOW_ID, annotations=asked, cri=False)
    )
    assert shown(node.run_bundle(operators, new_id("o")))[:2] == ("0", own_capabilities())

    # The pod that asks for it: refused at create, one line naming it and the switch.
    attacker = make_bundle(open_tmp / "pod", pod_config("sh", "-c", SHOW_ID, annotations=asked))
    cid = new_id("p")
    error = node.fail("create", "-b", str(attacker), cid)
    assert f"annotations.{key}" in error and f"{ALLOW}=inherit-user" in error
    assert not (node.root / cid).exists()

    # The control: the same pod without the annotation runs as its uid, no capability.
    control = make_bundle(open_tmp / "control", pod_config("sh", "-c", SHOW_ID))
    assert shown(node.run_bundle(control, new_id("c")))[:2] == (str(POD_UID), "0000000000000000")

    # An operator who trusts a handler's pod authors says so per handler: the guide's
    # wrapper, that handler's BinaryName.
    trusting = node.through(trusted_handler(open_tmp))
    assert shown(trusting.run_bundle(attacker, new_id("t")))[0] == "0"


def test_a_pod_cannot_read_roots_files_as_a_secret(node: Node, open_tmp: Path) -> None:
    asked = {"io.hostjob.secrets": "/etc/shadow:/leak"}
    read = 'head -c 5 "$CONTAINER_SANDBOX_MOUNT_POINT/leak"'
    # Where nothing stops it: root reads the file the annotation names into the job's
    # files, the job's own (0400): root's password hashes for uid 1000.
    operators = make_bundle(
        open_tmp / "operator", pod_config("sh", "-c", read, annotations=asked, cri=False)
    )
    assert node.run_bundle(operators, new_id("o")) == "root:"

    attacker = make_bundle(open_tmp / "pod", pod_config("sh", "-c", read, annotations=asked))
    cid = new_id("p")
    error = node.fail("create", "-b", str(attacker), cid)
    assert "annotations.io.hostjob.secrets" in error and f"{ALLOW}=secrets" in error
    assert not (attacker / "rootfs" / "leak").exists() and not (node.root / cid).exists()
    # The guide's trusting handler lets its pods have it.
    trusting = node.through(trusted_handler(open_tmp))
    assert trusting.run_bundle(attacker, new_id("t")) == "root:"

    control = make_bundle(open_tmp / "control", pod_config("sh", "-c", f"{read} 2>&1 || echo none"))
    assert node.run_bundle(control, new_id("c")).endswith("none\n")


@pytest.mark.parametrize(
    "key", ["io.hostjob.rootfs-mount-point", "microsoft.com/hostprocess-rootfs-location"]
)
def test_a_pod_cannot_put_its_files_on_the_hosts_tree(node: Node, open_tmp: Path, key: str) -> None:
    """An empty directory a root service reads (a cron spool, stood for by ``spool``)
    would hold the pod's files: in host mode the rootfs is bound at the mount point."""
    spool = open_tmp / "spool"
    spool.mkdir(mode=0o755)
    asked = {"io.hostjob.mount-mode": "host", key: str(spool)}
    where = spool
    operators_id = new_id("o")
    if key.endswith("rootfs-location"):  # hcsshim's: <location>/<id>
        where = spool / operators_id
    operators = make_bundle(
        open_tmp / "operator", pod_config("sleep", "60", annotations=asked, cri=False)
    )
    operators_rootfs = operators / "rootfs"
    (operators_rootfs / "etc" / "crontab").write_text("* * * * * root /tmp/payload\n")
    node.ok("create", "-b", str(operators), operators_id)
    assert (where / "etc" / "crontab").read_text().startswith("* * * * * root")
    node.ok("delete", "--force", operators_id)
    assert list(spool.iterdir()) == []

    attacker = make_bundle(open_tmp / "pod", pod_config("sleep", "60", annotations=asked))
    (attacker / "rootfs" / "etc" / "crontab").write_text("* * * * * root /tmp/payload\n")
    cid = new_id("p")
    error = node.fail("create", "-b", str(attacker), cid)
    assert f"annotations.{key}" in error and f"{ALLOW}=mount-point" in error
    # The guide's trusting handler lets its pods ask for inherit-user and secrets, not this.
    trusting = node.through(trusted_handler(open_tmp))
    assert f"{ALLOW}=mount-point" in trusting.fail("create", "-b", str(attacker), cid)
    assert not any(spool.rglob("crontab")) and not (node.root / cid).exists()

    # The control: the mount mode is the pod's to choose; its files go where the operator
    # said, the handler's --default-rootfs-mount-point (the node fixture's).
    control = make_bundle(
        open_tmp / "control",
        pod_config(
            "sh",
            "-c",
            'echo "$CONTAINER_SANDBOX_MOUNT_POINT"',
            annotations={"io.hostjob.mount-mode": "host"},
        ),
    )
    assert node.run_bundle(control, new_id("c")) == f"{open_tmp / 'hpc'}\n"


def test_a_non_root_pod_in_bind_mode_gains_nothing_from_a_setuid_program(
    node: Node, open_tmp: Path, privileged_tree: Path
) -> None:
    """In bind mode a pod's volumes lie over host paths in its mount namespace (its own
    ``/etc/ld.so.preload``, ``/etc/shadow``), where a setuid-root program would read
    them as root: the pod's every process runs with no_new_privs."""
    program = privileged_tree / "bin" / "id"  # setuid root, on a suid file system
    probe = f"{program} -u; grep NoNewPrivs /proc/self/status"
    preload = open_tmp / "preload"
    preload.write_text("")  # an empty preload list: harmless, but the pod's
    volume = [bind_volume(preload, "/etc/ld.so.preload", readonly=True)]
    bind = {"io.hostjob.mount-mode": "bind"}
    # Where nothing stops it: uid 1000 in a private namespace runs it as root.
    operators = make_bundle(
        open_tmp / "operator",
        pod_config("sh", "-c", probe, annotations=bind, cri=False, mounts=volume),
    )
    assert node.run_bundle(operators, new_id("o")).split() == ["0", "NoNewPrivs:", "0"]

    attacker = make_bundle(
        open_tmp / "pod", pod_config("sh", "-c", f"{probe}; sleep 60", mounts=volume)
    )
    cid = new_id("p")
    node.start_detached(attacker, cid)
    log = (open_tmp / "hostjob.log").read_text()
    assert "noNewPrivileges is set for every process of this container" in log
    # ... and every exec, even one whose process.json (containerd's, from the pod's
    # allowPrivilegeEscalation) does not ask for it.
    process = {
        "args": ["sh", "-c", probe], "cwd": "/", "env": ["PATH=/usr/bin:/bin"],
        "user": {"uid": POD_UID, "gid": POD_UID}, "noNewPrivileges": False,
    }  # fmt: skip
    out = node.exec_process(cid, process, open_tmp / "process.json")
    assert out.split() == [str(POD_UID), "NoNewPrivs:", "1"]
    node.ok("delete", "--force", cid)

    # The controls: a root pod, and the pod in host mode (no namespace of its own).
    root_pod = make_bundle(
        open_tmp / "root-pod", pod_config("sh", "-c", probe, uid=0, mounts=volume)
    )
    assert node.run_bundle(root_pod, new_id("r")).split() == ["0", "NoNewPrivs:", "0"]
    host = {"io.hostjob.mount-mode": "host"}
    host_pod = make_bundle(open_tmp / "host-pod", pod_config("sh", "-c", probe, annotations=host))
    assert node.run_bundle(host_pod, new_id("h")).split() == ["0", "NoNewPrivs:", "0"]


def test_the_fixture_is_what_containerd_sends() -> None:
    """The pod's annotations are those containerd 1.6 put on a real pod's container
    (``tests/cri/fixtures``), the keys the refusals key on."""
    recorded = json.loads(
        (Path(__file__).parents[1] / "cri" / "fixtures" / "cri-container-config.json").read_text()
    )
    config = pod_config("true")
    cri_keys = {k for k in recorded["annotations"] if k.startswith("io.kubernetes.cri.")}
    assert cri_keys <= set(config["annotations"])
