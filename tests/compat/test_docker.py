"""docker 20.10 (Debian's docker.io, a private dockerd) drives each runtime:
``docker run --runtime NAME --network host IMAGE ...``.

Every case runs with ``runc`` (the harness's sanity check: what docker users expect),
``hostjob`` (host mode) and ``hostjob-bind`` (bind mode, given by the operator's
``--default-mount-mode=bind`` in ``daemon.json``'s ``runtimeArgs``), on a busybox image made
locally with ``docker import``. After each test the ``docker`` fixture checks that nothing
its containers made is left (mounts under the daemon's dir, cgroups, runtime state, shims,
what bind mode made on the host), and the session checks the host's ``/etc/hosts``,
``/etc/resolv.conf``, ``/etc/hostname`` and ``/dev``.

What cannot work for a job container by design is at the end (``CANNOT``): each with its
reason and the clear error docker shows instead.

Paths differ by what a container sees: runc's process sees the image at ``/``; a job
container's sees it at ``$CONTAINER_SANDBOX_MOUNT_POINT`` (``image``), and its volumes
there too in host mode (the links, or a read-only bind), at their real path in bind mode
(``volume``).
"""

from __future__ import annotations

import concurrent.futures
import os
import pty
import select
import subprocess
import time
from pathlib import Path

import pytest

from tests.helpers import wait_for

from . import harness
from .docker import MARKER, SCRATCH, Docker, DockerRuntime
from .image import IMAGE_REF

MP = "$CONTAINER_SANDBOX_MOUNT_POINT"
LOOP = 'trap "exit 0" TERM; while :; do sleep 1; done'


def image(rt: DockerRuntime, path: str) -> str:
    """``path`` of the image, as the container's process reaches it (shell text)."""
    if not rt.is_job_container:
        return path
    return MP if path == "/" else f"{MP}{path}"


def volume(rt: DockerRuntime, destination: str) -> str:
    """A volume's ``destination``, as the container's process reaches it (shell text)."""
    return f"{MP}{destination}" if rt.mode == "host" else destination


def run(
    dk: Docker, rt: DockerRuntime, *args: str, timeout: float = 90
) -> subprocess.CompletedProcess[str]:
    return dk.docker("run", "--runtime", rt.name, "--network", "host", *args, timeout=timeout)


def detached(dk: Docker, rt: DockerRuntime, name: str, *args: str) -> str:
    """``docker run -d``: the container's full ID."""
    cp = run(dk, rt, "-d", "--name", name, *args)
    assert cp.returncode == 0, cp.stderr
    return cp.stdout.strip().splitlines()[-1]


def with_pty(argv: list[str], env: dict[str, str], timeout: float = 60) -> tuple[int, str]:
    """Run ``argv`` with a terminal (``pty.openpty``) as its stdin, stdout and stderr, as a
    user at a terminal would: docker's ``-it`` needs one. (exit status, what it printed)."""
    master, slave = pty.openpty()
    proc = subprocess.Popen(
        argv, stdin=slave, stdout=slave, stderr=slave, env=env, start_new_session=True
    )
    os.close(slave)
    out = b""
    deadline = time.monotonic() + timeout
    try:
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                proc.kill()
                raise AssertionError(f"{argv} still running after {timeout}s: {out!r}")
            ready, _, _ = select.select([master], [], [], left)
            if not ready:
                continue
            try:
                data = os.read(master, 4096)
            except OSError:  # EIO: every writer of the terminal is gone
                break
            if not data:
                break
            out += data
        return proc.wait(30), out.decode(errors="replace").replace("\r\n", "\n")
    finally:
        os.close(master)


# The v1 file a test reads, and its cgroup v2 counterpart (a unified host: the VM lane's)
V2_FILES = {"memory.limit_in_bytes": "memory.max", "cpu.cfs_quota_us": "cpu.max"}


def cgroup_value(dk: Docker, cid: str, name: str) -> str:
    """A control file of the container's cgroup, from the host's side; on a unified host
    the v2 file of a v1 name (``cpu.max``'s quota for ``cpu.cfs_quota_us``)."""
    if harness.cgroup_mode() == "unified" and name in V2_FILES:
        value = cgroup_value(dk, cid, V2_FILES[name])
        return value.split()[0] if name == "cpu.cfs_quota_us" else value
    for folder in harness.cgroup_dirs(dk.cgroup_path(cid)):
        if (folder / name).exists():
            return (folder / name).read_text().strip()
    raise AssertionError(f"no {name} in the cgroup {dk.cgroup_path(cid)}")


@pytest.fixture
def scratch() -> Path:
    """Volumes and tmpfs mounts go under ``SCRATCH``: the test leaves nothing there."""
    return Path(SCRATCH)


# ---- run: exit codes, environment, working directory, user -----------------------------------


def test_run_exit_codes_and_output(docker: Docker, docker_runtime: DockerRuntime) -> None:
    rt = docker_runtime
    cp = run(docker, rt, "--rm", IMAGE_REF, "sh", "-c", "echo out; echo err >&2; exit 7")
    assert (cp.returncode, cp.stdout, cp.stderr) == (7, "out\n", "err\n")
    assert run(docker, rt, "--rm", IMAGE_REF, "false").returncode == 1
    missing = run(docker, rt, "--rm", IMAGE_REF, "no-such-program")
    assert missing.returncode == 127, missing.stderr
    assert 'exec: "no-such-program": executable file not found in $PATH' in missing.stderr
    seen = run(docker, rt, "--rm", IMAGE_REF, "sh", "-c", f"cat {image(rt, '/etc/compat-image')}")
    assert seen.stdout == f"{MARKER}\n", seen.stderr


def test_run_environment(docker: Docker, docker_runtime: DockerRuntime) -> None:
    rt = docker_runtime
    docker.env["FROM_CLIENT"] = "passed"
    try:
        cp = run(docker, docker_runtime, "--rm", "-e", "A=1", "--env", "B=two words", "-e",
                 "FROM_CLIENT", IMAGE_REF, "sh", "-c", 'echo "$A|$B|$FROM_CLIENT|$PATH"')  # fmt: skip
    finally:
        del docker.env["FROM_CLIENT"]
    assert cp.returncode == 0, cp.stderr
    a, b, client, path = cp.stdout.strip().split("|")
    assert (a, b, client) == ("1", "two words", "passed")
    assert "/usr/bin" in path.split(":")
    if rt.is_job_container:
        probe = run(docker, rt, "--rm", IMAGE_REF, "sh", "-c", harness.PROBE_SH)
        assert not harness.probe_problems(rt.runtime, probe.stdout), probe.stdout


def test_run_working_directory(
    docker: Docker, docker_runtime: DockerRuntime, scratch: Path, tmp_path: Path
) -> None:
    """``-w`` is a path of the container's view: the image's ``/etc``, a directory made
    in the writable layer, a volume's destination (bind mode: at its real path)."""
    rt = docker_runtime
    script = "pwd; [ -f compat-image ] && echo image-etc; [ -f mark ] && echo volume; true"
    cp = run(docker, rt, "--rm", "-w", "/etc", IMAGE_REF, "sh", "-c", f'[ "$(pwd)" = "{image(rt, "/etc")}" ] && echo same; {script}')  # fmt: skip
    assert cp.stdout.splitlines()[0] == "same" and "image-etc" in cp.stdout, (cp.stdout, cp.stderr)
    made = run(docker, rt, "--rm", "-w", "/made/here", IMAGE_REF, "sh", "-c", f'[ "$(pwd)" = "{image(rt, "/made/here")}" ] && echo made')  # fmt: skip
    assert made.stdout == "made\n", made.stderr
    data = tmp_path / "data"
    data.mkdir()
    (data / "mark").touch()
    dest = f"{SCRATCH}/data"
    # host mode's link leads to the source: that is the directory the process is in
    seen = str(data) if rt.mode == "host" else volume(rt, dest)
    on = run(docker, rt, "--rm", "-v", f"{data}:{dest}", "-w", dest, IMAGE_REF, "sh", "-c",
             f'[ "$(pwd)" = "{seen}" ] && echo same; {script}')  # fmt: skip
    assert on.stdout.splitlines()[0] == "same" and "volume" in on.stdout, (on.stdout, on.stderr)
    assert not scratch.exists()


def test_run_as_another_user(docker: Docker, docker_runtime: DockerRuntime) -> None:
    """``-u 1000:1000``: docker's data root is root-only (0710); the init enters its
    working directory as root, as runc does, then becomes the user."""
    rt = docker_runtime
    # docker makes a missing -w directory itself (root's), as it does for runc. In host
    # mode the user reaches the image from there: the mount point's parents are root's.
    script = f'id -u; id -g; [ "$(pwd)" = "{image(rt, "/work")}" ] && echo in-work;'
    script += " touch ../tmp/by-user && echo made"
    cp = run(docker, rt, "--rm", "-u", "1000:1000", "-w", "/work", IMAGE_REF, "sh", "-c", script)
    assert cp.stdout.split() == ["1000", "1000", "in-work", "made"], cp.stderr
    at = run(docker, rt, "--rm", "-u", "1000:1000", IMAGE_REF, "sh", "-c",
             f'[ "$(pwd)" = "{image(rt, "/")}" ] && echo at-the-root')  # fmt: skip
    assert at.stdout == "at-the-root\n", (at.stdout, at.stderr)


# ---- volumes and tmpfs ------------------------------------------------------------------------


def test_volumes_read_write_and_read_only(
    docker: Docker, docker_runtime: DockerRuntime, scratch: Path, tmp_path: Path
) -> None:
    rt = docker_runtime
    rw, ro = tmp_path / "rw", tmp_path / "ro"
    rw.mkdir()
    ro.mkdir()
    (ro / "f").write_text("read only\n")
    rw_at, ro_at = f"{SCRATCH}/rw", f"{SCRATCH}/ro"
    script = (
        f"cat {volume(rt, ro_at)}/f; touch {volume(rt, ro_at)}/new 2>/dev/null && echo ro-written"
        f" || echo ro-refused; echo from-container > {volume(rt, rw_at)}/new && echo rw-written"
    )
    cp = run(docker, rt, "--rm", "-v", f"{rw}:{rw_at}", "-v", f"{ro}:{ro_at}:ro", IMAGE_REF, "sh", "-c", script)  # fmt: skip
    assert cp.stdout.splitlines() == ["read only", "ro-refused", "rw-written"], cp.stderr
    assert (rw / "new").read_text() == "from-container\n"
    assert sorted(os.listdir(ro)) == ["f"]
    assert not scratch.exists()


def test_tmpfs(docker: Docker, docker_runtime: DockerRuntime, scratch: Path) -> None:
    rt = docker_runtime
    at = f"{SCRATCH}/scratch"
    script = (
        f"grep -F ' {volume(rt, at)} ' /proc/self/mounts | cut -d' ' -f3,4;"
        f" echo x > {volume(rt, at)}/f && echo written"
    )
    cp = run(docker, rt, "--rm", "--tmpfs", f"{at}:size=1m,mode=1777", IMAGE_REF, "sh", "-c", script)  # fmt: skip
    lines = cp.stdout.splitlines()
    assert len(lines) == 2 and lines[1] == "written", (cp.stdout, cp.stderr)
    fstype, options = lines[0].split()
    assert fstype == "tmpfs" and "size=1024k" in options and "noexec" in options.split(","), lines
    assert not scratch.exists()


def test_copy_in_and_out(docker: Docker, docker_runtime: DockerRuntime, tmp_path: Path) -> None:
    rt = docker_runtime
    name = docker.new_name("cp")
    detached(docker, rt, name, IMAGE_REF, "sh", "-c", LOOP)
    given = tmp_path / "given.txt"
    given.write_text("from the host\n")
    assert docker.docker("cp", given, f"{name}:/tmp/given.txt").returncode == 0
    seen = docker.docker("exec", name, "sh", "-c", f"cat {image(rt, '/tmp/given.txt')}")
    assert seen.stdout == "from the host\n", seen.stderr
    out = tmp_path / "out"
    cp = docker.docker("cp", f"{name}:/etc/compat-image", out)
    assert cp.returncode == 0 and out.read_text() == f"{MARKER}\n", cp.stderr


# ---- limits -------------------------------------------------------------------------------------


def test_limits_and_update(docker: Docker, docker_runtime: DockerRuntime) -> None:
    rt = docker_runtime
    name = docker.new_name("limits")
    cid = detached(docker, rt, name, "--memory", "64m", "--cpus", "0.5", "--pids-limit", "50", IMAGE_REF, "sh", "-c", LOOP)  # fmt: skip
    assert cgroup_value(docker, cid, "memory.limit_in_bytes") == str(64 << 20)
    assert cgroup_value(docker, cid, "cpu.cfs_quota_us") == "50000"
    assert cgroup_value(docker, cid, "pids.max") == "50"
    up = docker.docker("update", "--memory", "96m", "--cpus", "0.25", "--pids-limit", "77", name)
    assert up.returncode == 0, up.stderr
    assert cgroup_value(docker, cid, "memory.limit_in_bytes") == str(96 << 20)
    assert cgroup_value(docker, cid, "cpu.cfs_quota_us") == "25000"
    assert cgroup_value(docker, cid, "pids.max") == "77"
    assert (
        docker.inspect(name, "{{.HostConfig.Memory}} {{.HostConfig.PidsLimit}}") == f"{96 << 20} 77"
    )
    stats = docker.docker("stats", "--no-stream", "--format", "{{.Name}};{{.MemUsage}};{{.PIDs}}", name)  # fmt: skip
    assert stats.returncode == 0, stats.stderr
    seen_name, usage, pids = stats.stdout.strip().split(";")
    assert seen_name == name and usage.endswith("96MiB") and int(pids) >= 1, stats.stdout


def test_oom_kill_is_shown(docker: Docker, docker_runtime: DockerRuntime) -> None:
    rt = docker_runtime
    name = docker.new_name("oom")
    # containerd's shim watches a cgroup v1 job for OOM only once the runtime's start has
    # returned: an OOM in the first moments of a loaded machine can precede the watch (it
    # did once in a full run, for hostjob; runc and crun run the same race), so the
    # program waits a second before it fills its memory.
    cp = run(docker, rt, "--name", name, "--memory", "32m", "--memory-swap", "32m", IMAGE_REF,
             "sh", "-c", "sleep 1; head -c 200m /dev/zero | tail")  # fmt: skip
    assert cp.returncode == 137, cp.stderr
    assert docker.inspect(name, "{{.State.OOMKilled}} {{.State.ExitCode}}") == "true 137"


# ---- a running container: logs, exec, top, inspect, pause -----------------------------------


def test_detached_logs(docker: Docker, docker_runtime: DockerRuntime) -> None:
    rt = docker_runtime
    name = docker.new_name("logs")
    detached(docker, rt, name, IMAGE_REF, "sh", "-c", "for i in 1 2 3 4 5; do echo line$i; done; sleep 2; echo last")  # fmt: skip
    assert wait_for(lambda: "line5" in docker.docker("logs", name).stdout, 15, 0.1)
    assert docker.docker("logs", "--tail", "2", name).stdout == "line4\nline5\n"
    follow = docker.docker("logs", "-f", name, timeout=30)  # until the container exits
    assert follow.stdout.split() == ["line1", "line2", "line3", "line4", "line5", "last"]
    assert docker.inspect(name, "{{.State.Status}} {{.State.ExitCode}}") == "exited 0"


def test_exec_top_inspect_pause(docker: Docker, docker_runtime: DockerRuntime) -> None:
    rt = docker_runtime
    name = docker.new_name("running")
    cid = detached(docker, rt, name, IMAGE_REF, "sh", "-c", LOOP)
    assert docker.inspect(name, "{{.State.Status}} {{.HostConfig.Runtime}}") == f"running {rt.name}"
    pid = int(docker.inspect(name, "{{.State.Pid}}"))
    assert all(p.rstrip("/").endswith(cid) for p in harness.process_cgroups(pid))
    ex = docker.docker(
        "exec", "-e", "X=exec", name, "sh", "-c", f"echo $X; {harness.PROBE_SH}; exit 3"
    )
    assert ex.returncode == 3 and ex.stdout.splitlines()[0] == "exec", ex.stderr
    if rt.is_job_container:  # runc's container has the host's network too (--network host)
        assert not harness.probe_problems(rt.runtime, ex.stdout), ex.stdout
    # the loop's sleep comes and goes (a slow guest: seconds between two): look again
    top = docker.docker("top", name)
    for _ in range(10):
        if "sleep" in top.stdout:
            break
        time.sleep(0.5)
        top = docker.docker("top", name)
    assert top.returncode == 0 and str(pid) in top.stdout and "sleep" in top.stdout, top.stdout
    assert docker.docker("pause", name).returncode == 0
    assert docker.inspect(name, "{{.State.Status}}") == "paused"
    assert harness.cgroup_frozen(docker.cgroup_path(cid)) is True
    assert docker.docker("unpause", name).returncode == 0
    assert docker.inspect(name, "{{.State.Status}}") == "running"
    assert harness.cgroup_frozen(docker.cgroup_path(cid)) is False


def test_exec_with_a_terminal(docker: Docker, docker_runtime: DockerRuntime) -> None:
    rt = docker_runtime
    name = docker.new_name("exec-it")
    detached(docker, rt, name, IMAGE_REF, "sh", "-c", LOOP)
    code, out = with_pty(docker.argv("exec", "-it", name, "sh", "-c", "tty; echo ex-$((6*7)); exit 4"), docker.env)  # fmt: skip
    assert code == 4, out
    assert "/dev/pts/" in out and "ex-42" in out, out


def test_run_with_a_terminal(docker: Docker, docker_runtime: DockerRuntime) -> None:
    rt = docker_runtime
    argv = docker.argv("run", "-it", "--rm", "--runtime", rt.name, "--network", "host", IMAGE_REF,
                       "sh", "-c", "tty; stty size; echo it-$((6*7))")  # fmt: skip
    code, out = with_pty(argv, docker.env)
    assert code == 0, out
    assert "/dev/pts/" in out and "it-42" in out, out


def test_init(docker: Docker, docker_runtime: DockerRuntime) -> None:
    """``--init``: docker's tini (bound into the container) is the process's parent."""
    cp = run(
        docker, docker_runtime, "--rm", "--init", IMAGE_REF, "sh", "-c", "cat /proc/$PPID/comm"
    )
    assert cp.returncode == 0 and cp.stdout == "docker-init\n", (cp.stdout, cp.stderr)


# ---- lifecycle: stop, kill, start, restart, wait, rm -f, restart policy, health, events ----


def test_stop_kill_start_restart(docker: Docker, docker_runtime: DockerRuntime) -> None:
    rt = docker_runtime
    name = docker.new_name("lifecycle")
    detached(docker, rt, name, IMAGE_REF, "sh", "-c", LOOP)
    started = time.monotonic()
    assert docker.docker("stop", "-t", "10", name, timeout=60).returncode == 0
    assert time.monotonic() - started < 8  # the TERM trap ended it, not the kill
    assert docker.inspect(name, "{{.State.Status}} {{.State.ExitCode}}") == "exited 0"
    assert docker.docker("start", name).returncode == 0
    first = docker.inspect(name, "{{.State.Pid}}")
    assert docker.docker("restart", "-t", "5", name, timeout=60).returncode == 0
    assert docker.inspect(name, "{{.State.Status}}") == "running"
    assert docker.inspect(name, "{{.State.Pid}}") != first
    assert docker.docker("kill", name).returncode == 0
    assert wait_for(lambda: docker.inspect(name, "{{.State.Status}}") == "exited", 15, 0.1)
    assert docker.inspect(name, "{{.State.ExitCode}}") == "137"


def test_wait_and_rm_force(docker: Docker, docker_runtime: DockerRuntime) -> None:
    rt = docker_runtime
    name = docker.new_name("wait")
    detached(docker, rt, name, IMAGE_REF, "sh", "-c", "sleep 1; exit 5")
    waited = docker.docker("wait", name, timeout=30)
    assert waited.stdout.strip() == "5", waited.stderr
    busy = docker.new_name("busy")
    detached(docker, rt, busy, IMAGE_REF, "sh", "-c", f"sleep 300 & {LOOP}")
    assert docker.docker("rm", "-f", busy, timeout=60).returncode == 0
    listed = docker.docker("ps", "-a", "--format", "{{.Names}}").stdout.split()
    assert busy not in listed


def test_restart_on_failure(docker: Docker, docker_runtime: DockerRuntime) -> None:
    rt = docker_runtime
    name = docker.new_name("restarts")
    detached(docker, rt, name, "--restart", "on-failure:3", IMAGE_REF, "sh", "-c", "exit 1")

    def given_up() -> bool:
        seen = docker.inspect(name, "{{.RestartCount}} {{.State.Status}}")
        return seen == "3 exited"

    assert wait_for(given_up, 60, 0.2), docker.inspect(name, "{{.RestartCount}} {{.State.Status}}")
    assert docker.inspect(name, "{{.State.ExitCode}}") == "1"


def test_healthchecks(docker: Docker, docker_runtime: DockerRuntime) -> None:
    rt = docker_runtime
    good, bad = docker.new_name("healthy"), docker.new_name("unhealthy")
    health = ["--health-interval", "1s", "--health-retries", "1", "--health-timeout", "5s"]
    detached(docker, rt, good, *health, "--health-cmd", f"test -f {image(rt, '/etc/compat-image')}", IMAGE_REF, "sh", "-c", LOOP)  # fmt: skip
    detached(docker, rt, bad, *health, "--health-cmd", "exit 1", IMAGE_REF, "sh", "-c", LOOP)
    status = "{{.State.Health.Status}}"
    assert wait_for(lambda: docker.inspect(good, status) == "healthy", 30, 0.2)
    assert wait_for(lambda: docker.inspect(bad, status) == "unhealthy", 30, 0.2)


def test_events(docker: Docker, docker_runtime: DockerRuntime) -> None:
    rt = docker_runtime
    since = docker.docker(
        "system", "info", "--format", "{{.SystemTime}}", check=True
    ).stdout.strip()
    name = docker.new_name("events")
    assert run(docker, rt, "--rm", "--name", name, IMAGE_REF, "true").returncode == 0
    until = docker.docker(
        "system", "info", "--format", "{{.SystemTime}}", check=True
    ).stdout.strip()
    events = docker.docker("events", "--since", since, "--until", until, "--filter",
                           f"container={name}", "--format", "{{.Action}}", timeout=30)  # fmt: skip
    actions = events.stdout.split()
    for action in ("create", "start", "die", "destroy"):
        assert action in actions, actions


def test_twenty_containers_at_once(docker: Docker, docker_runtime: DockerRuntime) -> None:
    rt = docker_runtime
    names = [docker.new_name("many") for _ in range(20)]
    with concurrent.futures.ThreadPoolExecutor(20) as pool:
        results = list(pool.map(lambda n: run(docker, rt, "-d", "--name", n, IMAGE_REF, "sh", "-c", LOOP, timeout=180), names))  # fmt: skip
    assert [r.returncode for r in results] == [0] * 20, [r.stderr for r in results if r.returncode]
    running = docker.docker("ps", "--filter", "status=running", "--format", "{{.Names}}").stdout
    assert set(names) <= set(running.split())
    gone = docker.docker("rm", "-f", *names, timeout=180)
    assert gone.returncode == 0, gone.stderr


# ---- an image's own loader and libraries ---------------------------------------------------

TRIXIE = "localhost/hostjob-compat/trixie:13"
PY_VERSION = "import sys; print(sys.version_info[:2])"


def trixie_image(dk: Docker) -> str:
    """Debian 13's root (tests/distro) as an image, by ``docker import``."""
    if TRIXIE not in dk.docker("images", "--format", "{{.Repository}}:{{.Tag}}").stdout.split():
        from tests import distro

        path = f"ENV PATH={distro.IMAGE_PATH}"
        dk.docker("import", "--change", path, "--change", 'CMD ["sh"]',
                  distro.distro_tar(), TRIXIE, timeout=300, check=True)  # fmt: skip
    return TRIXIE


def test_an_images_programs_with_its_own_libraries(
    docker: Docker, docker_runtime: DockerRuntime
) -> None:
    """A Debian 13 image on this older host: its python3 and jq are its own, whole (runc
    gives them the image as /; hostjob the image's loader and libraries), in `run` and in
    `exec`; what the job's shell starts is the host's."""
    rt = docker_runtime
    ref = trixie_image(docker)
    cp = run(docker, rt, "--rm", ref, "python3", "-c", PY_VERSION)
    assert (cp.returncode, cp.stdout) == (0, "(3, 13)\n"), cp.stderr
    cp = run(docker, rt, "--rm", ref, "jq", "--version")
    assert (cp.returncode, cp.stdout) == (0, "jq-1.7\n"), cp.stderr
    cp = run(docker, rt, "--rm", ref, "sh", "-c", f'python3 -c "{PY_VERSION}"')
    assert cp.returncode == 0, cp.stderr
    assert (cp.stdout == "(3, 13)\n") is not rt.is_job_container  # a job's: the host's
    name = docker.new_name("libs")
    detached(docker, rt, name, ref, "sleep", "300")
    try:
        got = docker.docker("exec", name, "python3", "-c", PY_VERSION, timeout=60)
        assert (got.returncode, got.stdout) == (0, "(3, 13)\n"), got.stderr
    finally:
        docker.docker("rm", "-f", name, timeout=90)


# ---- what cannot work for a job container, by design ---------------------------------------

# (docker's flags, why a job container cannot have it, the error docker shows instead)
CANNOT = [
    (
        ["--network", "none"],
        "a job container has the host's network; docker asks any other network for a"
        " sysctl (net.ipv4.ip_unprivileged_port_start), which would change the host's",
        "run it with --network host",
    ),
    (
        ["--sysctl", "kernel.msgmax=65536"],
        "a sysctl changes the host's kernel: a job container has no namespace of its own",
        "sysctls would change the host",
    ),
]


@pytest.mark.parametrize(("flags", "why", "error"), CANNOT, ids=[c[0][0] for c in CANNOT])
def test_what_a_job_container_cannot_have(
    docker: Docker, docker_runtime: DockerRuntime, flags: list[str], why: str, error: str
) -> None:
    rt = docker_runtime
    args = ["run", "--rm", "--runtime", rt.name, *flags]
    if "--network" not in flags:
        args += ["--network", "host"]
    cp = docker.docker(*args, IMAGE_REF, "true", timeout=90)
    if not rt.is_job_container:
        assert cp.returncode == 0, cp.stderr  # runc gives the container a namespace for it
        return
    assert cp.returncode == 125, (why, cp.stderr)
    assert error in cp.stderr, (why, cp.stderr)
    assert len([line for line in cp.stderr.splitlines() if "OCI runtime" in line]) == 1
