"""What a Kubernetes pod needs of its job containers beyond the life cycle.

Containers created through the CRI run in bind mode by default: the kubelet's volumes are at
their ``mountPath`` for the job's processes (the service-account token where in-cluster clients
look, ``/etc/hosts``, emptyDirs), the termination message reaches the kubelet's file without
anything written to the host's ``/dev``, and each volume's mount propagation is honoured
(Bidirectional mounts reach the host, ordinary volumes pass nothing either way). The pod's
sandbox stays in host mode. Each test ends with the kubelet's pod deletion and the check that
nothing is left; the mount point bind mode made on the host is gone too, and a volume's
``mountPath`` the host lacks was never made there (it is made in the job's namespace).
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from cri_api.v1 import api_pb2 as cri

from tests.compat import harness

from .kubelet import CALL_TIMEOUT, SERVICE_ACCOUNT_DIR, TERMINATION_LOG, Container, Node, Pod
from .test_pods import IDLE, container_pid, delete_and_check, sandbox_pid, sh

SA = SERVICE_ACCOUNT_DIR
HOST_PATHS = ("/hpc", "/run/secrets")
"""The mount point, which bind mode makes on this host when it is missing and removes with the
last container; and the token volume's target (``/var/run`` being ``/run``), which it never
makes there."""


def host_paths() -> dict[str, bool]:
    return {p: os.path.lexists(p) for p in HOST_PATHS}


def paths_left(before: dict[str, bool]) -> list[str]:
    """The paths bind mode made on the host that outlived their containers: any of
    ``HOST_PATHS`` that was missing before and is there now, unless a job container of
    another test run on this machine (another state root) has a mount at or below it now --
    hostjob leaves a path alone while that is so."""
    in_use = {p for p, _fs, _src in harness.mountinfo()}
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                in_use |= {p for p, _fs, _src in harness.mountinfo(name)}
            except OSError:
                pass
    return [
        p
        for p, existed in before.items()
        if not existed
        and os.path.lexists(p)
        and not any(q == p or q.startswith(p + "/") for q in in_use)
    ]


def exec_sync(node: Node, c: Container, cmd: list[str]) -> cri.ExecSyncResponse:
    r = node.runtime.ExecSync(
        cri.ExecSyncRequest(container_id=c.id, cmd=cmd, timeout=60), timeout=CALL_TIMEOUT
    )
    assert r.exit_code == 0, (r.exit_code, r.stdout, r.stderr)
    return r


def texts(pod: Pod, c: Container, *wanted: str) -> list[str]:
    return [t for _, _, t in pod.wait_log(c, *wanted)]


def test_volumes_at_their_mount_path(kubelet_node: Node, tmp_path: Path) -> None:
    """Without the mount-mode annotation a CRI container runs in bind mode: its own mount
    namespace, the image at ``/hpc``, the token volume read-only at its absolute path, the
    kubelet's ``/etc/hosts`` (the host's unchanged), an emptyDir at a path the host lacks shared
    by an init and a main container. The sandbox stays in host mode. Afterwards nothing that
    bind mode made on the host is left."""
    node = kubelet_node
    before = host_paths()
    host_hosts = Path("/etc/hosts").read_text()
    pod = node.pod("bind-default")
    pod.run()
    assert os.readlink(f"/proc/{sandbox_pid(node, pod)}/ns/mnt") == os.readlink(
        "/proc/self/ns/mnt"
    ), "the sandbox is in host mode"

    work = tmp_path / "mnt" / "work"  # the emptyDir's mountPath: missing on the host
    empty_dir = pod.dir / "volumes" / "kubernetes.io~empty-dir" / "work"
    empty_dir.mkdir(parents=True)
    volume = [cri.Mount(container_path=str(work), host_path=str(empty_dir))]
    init = pod.run_container(
        "prepare", sh(f"echo prepared > {work}/state; echo init-done"), volumes=volume, init=True
    )
    status = pod.wait_exited(init)
    assert (status.exit_code, status.reason) == (0, "Completed"), status
    assert (empty_dir / "state").read_text() == "prepared\n"

    main = pod.run_container(
        "main",
        sh(
            'echo "mp=$CONTAINER_SANDBOX_MOUNT_POINT"; '
            f"echo token=$(cat {SA}/token); echo namespace=$(cat {SA}/namespace); "
            f"echo ca=$(head -n 1 {SA}/ca.crt); "
            f"touch {SA}/new 2>&1 || true; "
            "echo hosts=$(head -n 1 /etc/hosts); "
            f"echo main-read=$(cat {work}/state); "
            f"echo image=$(cat $CONTAINER_SANDBOX_MOUNT_POINT/etc/passwd | head -n 1); {IDLE}"
        ),
        volumes=volume,
    )
    lines = texts(pod, main, "ready")
    assert lines[:7] == [
        "mp=/hpc",
        f"token={pod.token}",
        "namespace=default",
        "ca=-----BEGIN CERTIFICATE-----",
        f"touch: {SA}/new: Read-only file system",
        "hosts=# Kubernetes-managed hosts file (host network).",
        "main-read=prepared",
    ], lines
    assert lines[7].startswith("image=root:"), lines
    pid = container_pid(node, main)
    assert os.readlink(f"/proc/{pid}/ns/mnt") != os.readlink("/proc/self/ns/mnt")
    assert os.readlink(f"/proc/{pid}/ns/net") == os.readlink("/proc/self/ns/net")
    # the host sees none of it: its /etc/hosts, nothing at the emptyDir's path nor the token's
    assert Path("/etc/hosts").read_text() == host_hosts
    assert not (tmp_path / "mnt").exists()
    assert before["/run/secrets"] or not os.path.lexists("/run/secrets")
    assert not harness.mounts_under(work) and not harness.mounts_under("/hpc")
    # an exec joins the job's mount namespace
    r = exec_sync(node, main, sh(f"cat {work}/state {SA}/namespace"))
    assert r.stdout == b"prepared\ndefault"

    delete_and_check(node, pod)
    assert not (tmp_path / "mnt").exists(), "the emptyDir's mount target outlived the pod"
    assert not paths_left(before)


IN_CLUSTER = """
import os
# client-go's rest.InClusterConfig: the service from the environment, the credentials from
# the files at their absolute paths; any missing one is an error
host, port = os.environ["KUBERNETES_SERVICE_HOST"], os.environ["KUBERNETES_SERVICE_PORT"]
root = "/var/run/secrets/kubernetes.io/serviceaccount/"
token = open(root + "token").read()
ca = open(root + "ca.crt").read()
namespace = open(root + "namespace").read()
assert ca.startswith("-----BEGIN CERTIFICATE-----"), ca
print(f"https://{host}:{port}", namespace, token)
"""


def test_in_cluster_client_follows_token_rotation(kubelet_node: Node) -> None:
    """An in-cluster client (the host's python3 doing what client-go's ``InClusterConfig``
    does) reads the service's address, the token, CA and namespace at their absolute paths;
    after the kubelet's atomic writer swaps in a new token, the job's processes -- its own loop
    and a new exec -- read the new one at the same path (kubernetes #104562 was symlinks under
    a mount point that stopped resolving)."""
    node = kubelet_node
    pod = node.pod("in-cluster")
    pod.run()
    watch = (
        'trap "exit 0" TERM; last=; echo ready; '
        f"while :; do t=$(cat {SA}/token); "
        '[ "$t" != "$last" ] && echo "token=$t" && last=$t; sleep 0.1; done'
    )
    main = pod.run_container("main", sh(watch))
    first = pod.token
    texts(pod, main, "ready", f"token={first}")
    r = exec_sync(node, main, ["/usr/bin/python3", "-c", IN_CLUSTER])
    assert r.stdout.decode().split() == ["https://127.0.0.1:6443", "default", first]

    pod.rotate_token("rotated-" + first)
    texts(pod, main, f"token=rotated-{first}")
    r = exec_sync(node, main, ["/usr/bin/python3", "-c", IN_CLUSTER])
    assert r.stdout.decode().split() == ["https://127.0.0.1:6443", "default", f"rotated-{first}"]
    delete_and_check(node, pod)


def dev_mounts() -> list[tuple[str, str, str]]:
    return sorted(m for m in harness.mountinfo() if m[0] == "/dev" or m[0].startswith("/dev/"))


def test_termination_message_never_touches_the_host_dev(kubelet_node: Node, tmp_path: Path) -> None:
    """The kubelet's ``/dev/termination-log`` is a file the host lacks: the job gets a private
    ``/dev`` (the host's devices, ``/dev/pts`` and ``/dev/shm`` still there) in which the
    message written at the absolute path reaches the kubelet's file; the host's ``/dev`` never
    gains the file, before, while or after the container runs."""
    node = kubelet_node
    assert not os.path.lexists(TERMINATION_LOG), "the host has a /dev/termination-log"
    host_dev = dev_mounts()
    go = tmp_path / "go"
    pod = node.pod("termination")
    pod.run()
    c = pod.run_container(
        "main",
        sh(
            f"echo 'bye from the job' > {TERMINATION_LOG}; "
            "test -c /dev/null && echo null-is-a-device; "
            "echo x > /dev/null && echo null-writable; "
            "test -c /dev/pts/ptmx && echo pts-mounted; "
            "grep -q ' /dev/shm ' /proc/self/mountinfo && echo shm-mounted; "
            f"echo ready; while [ ! -e {go} ]; do sleep 0.05; done; exit 3"
        ),
    )
    lines = texts(pod, c, "ready")
    assert lines == ["null-is-a-device", "null-writable", "pts-mounted", "shm-mounted", "ready"]
    assert not os.path.lexists(TERMINATION_LOG), "written into the host's /dev"
    assert dev_mounts() == host_dev
    go.touch()
    status = pod.wait_exited(c)
    assert (status.exit_code, status.reason) == (3, "Error"), status
    assert c.termination_log.read_text() == "bye from the job\n"  # what the kubelet reads
    delete_and_check(node, pod)
    assert not os.path.lexists(TERMINATION_LOG)
    assert dev_mounts() == host_dev


def test_mount_propagation(kubelet_node: Node, tmp_path: Path) -> None:
    """Each volume's propagation, in a privileged bind-mode container (a CSI node plugin):
    a mount the job makes under a Bidirectional volume reaches the host, one under an ordinary
    (None: ``rprivate``) volume does not; a mount the host makes later under a HostToContainer
    volume reaches the job, one under the ordinary volume does not. (containerd refuses
    Bidirectional and HostToContainer volumes whose source is not on a shared mount: the source
    is a shared tmpfs, as on a systemd host.)"""
    node = kubelet_node
    shared = tmp_path / "shared"
    shared.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "hostjob-cri-shared", str(shared)], check=True)
    try:
        subprocess.run(["mount", "--make-shared", str(shared)], check=True)
        for name in ("bidi", "plain", "h2c"):
            (shared / name).mkdir()
        inside = tmp_path / "volumes"  # the mountPaths: missing on the host
        modes = {
            "bidi": cri.PROPAGATION_BIDIRECTIONAL,
            "plain": cri.PROPAGATION_PRIVATE,
            "h2c": cri.PROPAGATION_HOST_TO_CONTAINER,
        }
        volumes = [
            cri.Mount(
                container_path=str(inside / name), host_path=str(shared / name), propagation=mode
            )
            for name, mode in modes.items()
        ]
        pod = node.pod("propagation", privileged=True)
        pod.run()
        c = pod.run_container(
            "csi",
            sh(
                f"mkdir {inside}/bidi/m {inside}/plain/m && "
                f"mount -t tmpfs job-bidi {inside}/bidi/m && "
                f"mount -t tmpfs job-plain {inside}/plain/m && {IDLE}"
            ),
            volumes=volumes,
            privileged=True,
        )
        texts(pod, c, "ready")
        on_host = {point: source for point, _fs, source in harness.mountinfo()}
        assert on_host.get(str(shared / "bidi" / "m")) == "job-bidi", "Bidirectional"
        assert str(shared / "plain" / "m") not in on_host, "the ordinary volume propagated"
        assert (shared / "plain" / "m").is_dir()  # the directory is the volume's, shared

        for name in ("plain", "h2c"):
            (shared / name / "h").mkdir()
            subprocess.run(
                ["mount", "-t", "tmpfs", f"host-{name}", str(shared / name / "h")], check=True
            )
        r = exec_sync(node, c, ["cat", "/proc/self/mountinfo"])
        in_job = {line.split()[4] for line in r.stdout.decode().splitlines()}
        assert str(inside / "h2c" / "h") in in_job, "HostToContainer"
        assert str(inside / "plain" / "h") not in in_job, "the ordinary volume received a mount"
        assert str(inside / "bidi" / "m") in in_job and str(inside / "plain" / "m") in in_job
        delete_and_check(node, pod)
        assert not inside.exists()
    finally:
        # Kubernetes leaves what a plugin mounted for the host to the plugin: here, the test
        harness.unmount_all_under(shared)
