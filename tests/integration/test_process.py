"""A process's start against real processes: environment, substitution, PATH, cwd, program, user,
limits and privileges."""

from __future__ import annotations

import json
import os
import pwd
import stat
import subprocess
from pathlib import Path

import pytest

from tests.helpers import Hostjob, base_config, hostjob_env, new_id


def run_output(hj: Hostjob, bundle, config: dict, name: str = "bundle") -> str:  # type: ignore[no-untyped-def]
    result = hj("run", "-b", str(bundle(config, name)), new_id())
    assert result.returncode == 0, result.stderr
    return result.stdout


def env_of(output: str) -> dict[str, str]:
    return dict(line.split("=", 1) for line in output.splitlines() if "=" in line)


def test_environment_base_and_overrides(hj: Hostjob, bundle, tmp_path: Path) -> None:
    config = base_config("env")
    config["process"]["env"] = [
        "FOO=one",
        "FOO=two",
        "CONTAINER_SANDBOX_MOUNT_POINT=/not/allowed",
        "HOME=/custom-home",
    ]
    env = env_of(run_output(hj, bundle, config))
    rootfs = str(tmp_path / "bundle" / "rootfs")
    assert env["FOO"] == "two"  # last wins
    assert env["HOME"] == "/custom-home"
    assert env["USER"] == "root" and env["LOGNAME"] == "root"
    assert env["SHELL"] == pwd.getpwuid(0).pw_shell
    assert env["CONTAINER_SANDBOX_MOUNT_POINT"] == rootfs  # set last, not overridable


def test_default_env_without_process_env(hj: Hostjob, bundle, tmp_path: Path) -> None:
    config = base_config("env")
    del config["process"]["env"]
    env = env_of(run_output(hj, bundle, config))
    rootfs = str(tmp_path / "bundle" / "rootfs")
    default = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
    copies = ":".join(f"{rootfs}{p}" for p in default.split(":"))
    assert env["PATH"] == f"{default}:{rootfs}:{copies}"
    assert env["HOME"] == "/root"


def test_path_appends_mount_point_copies(hj: Hostjob, bundle, tmp_path: Path) -> None:
    config = base_config("env")
    config["process"]["env"] = ["PATH=/usr/bin:/bin:relative"]
    env = env_of(run_output(hj, bundle, config))
    mp = str(tmp_path / "bundle" / "rootfs")
    assert env["PATH"] == f"/usr/bin:/bin:relative:{mp}:{mp}/usr/bin:{mp}/bin"


@pytest.mark.parametrize(
    "form",
    [
        "$CONTAINER_SANDBOX_MOUNT_POINT",
        "${CONTAINER_SANDBOX_MOUNT_POINT}",
        "%CONTAINER_SANDBOX_MOUNT_POINT%",
        "$env:CONTAINER_SANDBOX_MOUNT_POINT",
        "$(CONTAINER_SANDBOX_MOUNT_POINT)",  # Kubernetes', which the kubelet passes on
    ],
)
def test_substitution_forms(hj: Hostjob, bundle, tmp_path: Path, form: str) -> None:
    mp = str(tmp_path / "bundle" / "rootfs")
    config = base_config("/bin/echo", f"arg={form}/x")
    config["process"]["env"] = [f"VALUE={form}/etc"]
    assert run_output(hj, bundle, config) == f"arg={mp}/x\n"
    config = base_config("env")
    config["process"]["env"] = [f"VALUE={form}/etc", "PATH=/bin"]
    mp2 = str(tmp_path / "b2" / "rootfs")
    assert env_of(run_output(hj, bundle, config, "b2"))["VALUE"] == f"{mp2}/etc"


def test_the_hosts_etc_environment_is_a_logins_base(hj: Hostjob, bundle, tmp_path: Path) -> None:
    """The host's /etc/environment (here: a file bound over it in a mount namespace of the
    test's own, so the host's stays as it is) is the base of the process's environment;
    the config's own variables win."""
    etc = tmp_path / "environment"
    etc.write_text('https_proxy=http://proxy.example:3128\nexport LANG="C.UTF-8"\nKEEP=etc\n')
    config = base_config("env")
    config["process"]["env"] = ["PATH=/bin", "KEEP=config"]
    path = bundle(config)
    script = f'mount --bind "{etc}" /etc/environment && exec "$@"'
    done = subprocess.run(
        ["unshare", "--mount", "--propagation", "private", "sh", "-c", script, "sh",
         *hj.argv("run", "-b", str(path), new_id())],
        capture_output=True, text=True, timeout=60, env=hostjob_env(),
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    env = env_of(done.stdout)
    assert env["https_proxy"] == "http://proxy.example:3128"
    assert env["LANG"] == "C.UTF-8"
    assert env["KEEP"] == "config"


def test_scheduler_and_io_priority_are_applied(hj: Hostjob, bundle) -> None:
    """process.scheduler and process.ioPriority, as runc applies them: to the process
    and what it starts (the job's children inherit both)."""
    config = base_config("sh", "-c", "ionice -p $$; cut -d' ' -f19,41 /proc/$$/stat")
    config["process"]["scheduler"] = {"policy": "SCHED_BATCH", "nice": 7}
    config["process"]["ioPriority"] = {"class": "IOPRIO_CLASS_IDLE", "priority": 7}
    lines = run_output(hj, bundle, config).splitlines()
    assert lines == ["idle", "7 3"]  # nice 7, policy 3 (SCHED_BATCH)
    config["process"]["scheduler"] = {"policy": "SCHED_IDLE"}
    config["process"]["ioPriority"] = {"class": "IOPRIO_CLASS_BE", "priority": 2}
    lines = run_output(hj, bundle, config, "b2").splitlines()
    assert lines == ["best-effort: prio 2", "0 5"]


def test_a_scheduler_the_kernel_refuses_fails_create(hj: Hostjob, bundle) -> None:
    config = base_config("true")
    # A deadline task's runtime must not exceed its deadline: the kernel says EINVAL.
    config["process"]["scheduler"] = {
        "policy": "SCHED_DEADLINE", "runtime": 2000000, "deadline": 1000000, "period": 1000000
    }  # fmt: skip
    cid = new_id()
    err = hj.fail("create", "-b", str(bundle(config)), cid)
    assert err.startswith("cannot set the scheduler (process.scheduler: SCHED_DEADLINE")
    assert not (hj.root / cid).exists()


def test_no_other_expansion(hj: Hostjob, bundle) -> None:
    config = base_config(
        "/bin/echo", "$HOME", "${PATH}", "%PATH%", "$CONTAINER_SANDBOX_MOUNT_POINTX"
    )
    assert (
        run_output(hj, bundle, config) == "$HOME ${PATH} %PATH% $CONTAINER_SANDBOX_MOUNT_POINTX\n"
    )


def test_cwd_rules(hj: Hostjob, bundle, tmp_path: Path) -> None:
    mp = tmp_path / "bundle" / "rootfs"
    config = base_config("pwd")
    assert run_output(hj, bundle, config) == f"{mp}\n"  # "/" -> the mount point

    config["process"]["cwd"] = "/work/dir"
    assert run_output(hj, bundle, config) == f"{mp}/work/dir\n"
    created = mp / "work" / "dir"
    assert stat.S_IMODE(created.stat().st_mode) == 0o700

    config["process"]["cwd"] = "$CONTAINER_SANDBOX_MOUNT_POINT/etc"
    assert run_output(hj, bundle, config) == f"{mp}/etc\n"

    config["process"]["cwd"] = str(mp / "bin")  # already under the mount point
    assert run_output(hj, bundle, config) == f"{mp}/bin\n"


def test_relative_program_against_cwd(hj: Hostjob, bundle, tmp_path: Path) -> None:
    b = bundle(base_config("./tool"))
    tool = b / "rootfs" / "opt" / "tool"
    tool.parent.mkdir()
    tool.write_text("#!/bin/sh\necho relative-tool $0\n")
    tool.chmod(0o755)
    config = base_config("./tool")
    config["process"]["cwd"] = "/opt"
    (b / "config.json").write_text(__import__("json").dumps(config))
    result = hj("run", "-b", str(b), new_id())
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("relative-tool")


def test_program_under_mount_point_variable(hj: Hostjob, bundle) -> None:
    config = base_config("$CONTAINER_SANDBOX_MOUNT_POINT/bin/busybox", "echo", "from-image")
    assert run_output(hj, bundle, config) == "from-image\n"


def test_absolute_program_falls_back_to_image(hj: Hostjob, bundle) -> None:
    b = bundle(base_config("/opt/only-in-image/hello"))
    tool = b / "rootfs" / "opt" / "only-in-image" / "hello"
    tool.parent.mkdir(parents=True)
    tool.write_text("#!/bin/sh\necho image-copy\n")
    tool.chmod(0o755)
    result = hj("run", "-b", str(b), new_id())
    assert result.returncode == 0, result.stderr
    assert result.stdout == "image-copy\n"


def test_host_tools_win_and_image_tools_are_found(hj: Hostjob, bundle) -> None:
    b = bundle(base_config("image-only-tool"))
    tool = b / "rootfs" / "bin" / "image-only-tool"
    tool.write_text("#!/bin/sh\necho found-in-image\n")
    tool.chmod(0o755)
    result = hj("run", "-b", str(b), new_id())
    assert result.stdout == "found-in-image\n", result.stderr


def test_a_bare_name_is_the_images_own_program_first(hj: Hostjob, bundle) -> None:
    """critest's busybox ``top``: the host has a ``uname`` too, and an absolute symlink in
    the image names a path the host has (``/bin/busybox``): the image's runs, for the init
    and for exec, while the process's PATH stays host-first."""
    config = base_config("uname")
    b = bundle(config)
    rootfs = b / "rootfs"
    (rootfs / "opt").mkdir()
    (rootfs / "opt" / "uname").write_text('#!/bin/sh\necho image-uname "$PATH"\n')
    (rootfs / "opt" / "uname").chmod(0o755)
    (rootfs / "bin" / "uname").symlink_to("/opt/uname")  # absolute: /opt/uname of the image
    assert os.path.exists("/bin/uname") or os.path.exists("/usr/bin/uname")
    out = hj.ok("run", "-b", str(b), new_id())
    word, path = out.split()
    assert word == "image-uname"
    assert path.startswith("/usr/sbin:/usr/bin:/sbin:/bin:"), path
    config = base_config("sleep", "300")
    b = bundle(config, "running")
    (b / "rootfs" / "opt").mkdir()
    (b / "rootfs" / "opt" / "uname").write_text("#!/bin/sh\necho exec-image-uname\n")
    (b / "rootfs" / "opt" / "uname").chmod(0o755)
    (b / "rootfs" / "bin" / "uname").symlink_to("/opt/uname")
    cid = new_id()
    hj.ok("create", "-b", str(b), cid)
    hj.ok("start", cid)
    try:
        assert hj.ok("exec", cid, "uname") == "exec-image-uname\n"
    finally:
        hj.ok("delete", "--force", cid)


def test_a_bare_name_the_image_lacks_is_the_hosts(hj: Hostjob, bundle) -> None:
    host_uname = subprocess.run(["uname", "-s"], capture_output=True, text=True).stdout
    assert run_output(hj, bundle, base_config("uname", "-s")) == host_uname


@pytest.mark.parametrize(
    ("make", "message"), [("dir", "is a directory"), ("file", "permission denied")]
)
def test_an_unusable_image_program_fails_create(
    hj: Hostjob, bundle, make: str, message: str, no_leaks
) -> None:
    b = bundle(base_config("image-tool"))
    target = b / "rootfs" / "bin" / "image-tool"
    if make == "dir":
        target.mkdir()
    else:
        target.write_text("#!/bin/sh\n")
        target.chmod(0o644)
    cid = new_id()
    assert f'exec: "image-tool": {message}' in hj.fail("create", "-b", str(b), cid)
    no_leaks(cid)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["no-such-program"], 'exec: "no-such-program": executable file not found in $PATH'),
        (["/no/such/file"], "no such file or directory"),
        (["/etc"], "is a directory"),
        (["/etc/image-release"], "permission denied"),  # in the image, not executable
        (["./missing"], "no such file or directory"),
    ],
)
def test_bad_programs_fail_create(
    hj: Hostjob, bundle, args: list[str], message: str, no_leaks
) -> None:
    cid = new_id()
    error = hj.fail("create", "-b", str(bundle(base_config(*args))), cid)
    assert message in error
    assert not (hj.root / cid).exists()
    no_leaks(cid)


def test_a_failed_create_leaves_no_pid_file(hj: Hostjob, bundle, tmp_path: Path, no_leaks) -> None:
    """The pid file is written while the child sets itself up (off create's critical
    path); a set-up that then fails takes it back, as if it had never been written."""
    cid = new_id()
    pid_file = tmp_path / "init.pid"
    error = hj.fail(
        "create",
        "-b",
        str(bundle(base_config("no-such-program"))),
        "--pid-file",
        str(pid_file),
        cid,
    )
    assert "executable file not found" in error
    assert not pid_file.exists()
    no_leaks(cid)
    cid = new_id()
    hj.ok(
        "create", "-b", str(bundle(base_config("sleep", "300"))), "--pid-file", str(pid_file), cid
    )
    assert int(pid_file.read_text()) == json.loads(hj.ok("state", cid))["pid"]
    hj.ok("delete", "--force", cid)


def test_numeric_user_and_groups(hj: Hostjob, bundle) -> None:
    config = base_config("id")
    config["process"]["user"] = {"uid": 1234, "gid": 2345, "additionalGids": [3456, 4567]}
    out = run_output(hj, bundle, config)
    assert "uid=1234" in out and "gid=2345" in out
    assert "3456" in out and "4567" in out


def test_username_from_passwd(hj: Hostjob, bundle) -> None:
    nobody = pwd.getpwnam("nobody")
    config = base_config("sh", "-c", "id -u; id -g; echo $HOME $USER")
    config["process"]["user"] = {"username": "nobody"}
    lines = run_output(hj, bundle, config).split()
    assert lines[:2] == [str(nobody.pw_uid), str(nobody.pw_gid)]
    assert lines[2:] == [nobody.pw_dir, "nobody"]


def test_group_name_gives_a_uid_of_its_own_in_that_group(hj: Hostjob, bundle) -> None:
    """hcsshim's account per container: a uid and gid of the container's own (the
    ``--user auto`` range), the group as its supplementary group -- never the one overflow
    uid every such job would share (tests/security/test_runtime_identity.py)."""
    import grp

    from hostjob.runtime.users import DEFAULT_RANGE

    group = grp.getgrnam("nogroup")
    config = base_config("sh", "-c", "id -u; id -g; id -G")
    config["process"]["user"] = {"username": "nogroup"}
    uid, gid, *groups = run_output(hj, bundle, config).split()
    assert DEFAULT_RANGE[0] <= int(uid) <= DEFAULT_RANGE[1] and gid == uid
    assert groups == [uid, str(group.gr_gid)]


def test_unknown_username_is_refused(hj: Hostjob, bundle) -> None:
    config = base_config("id")
    config["process"]["user"] = {"username": "no-such-user-or-group"}
    assert "neither a user nor a group" in hj.fail("run", "-b", str(bundle(config)), new_id())


def test_inherit_user_keeps_launcher_env(hj: Hostjob, bundle) -> None:
    config = base_config("env")
    config["process"]["user"] = {"uid": 1234, "gid": 1234}
    config["annotations"] = {"io.hostjob.inherit-user": "true"}
    result = hj("run", "-b", str(bundle(config)), new_id(), env={"LAUNCHER_MARK": "yes"})
    env = env_of(result.stdout)
    assert env["LAUNCHER_MARK"] == "yes"
    config["process"]["args"] = ["id", "-u"]
    config["annotations"] = {"microsoft.com/hostprocess-inherit-user": "true"}
    assert run_output(hj, bundle, config, "b2") == "0\n"


def test_rlimits_umask_nnp_oom(hj: Hostjob, bundle) -> None:
    script = (
        "ulimit -n; umask; grep NoNewPrivs /proc/self/status | tr -d ' \t';"
        " cat /proc/self/oom_score_adj"
    )
    config = base_config("sh", "-c", script)
    config["process"]["rlimits"] = [{"type": "RLIMIT_NOFILE", "soft": 512, "hard": 1024}]
    config["process"]["user"]["umask"] = 0o027
    config["process"]["noNewPrivileges"] = True
    config["process"]["oomScoreAdj"] = 321
    assert run_output(hj, bundle, config).split() == ["512", "0027", "NoNewPrivs:1", "321"]


def test_rlimit_above_hard_limit_fails_create(hj: Hostjob, bundle) -> None:
    hard = os.sysconf("SC_OPEN_MAX")
    config = base_config("true")
    config["process"]["rlimits"] = [
        {"type": "RLIMIT_NOFILE", "soft": 2**40, "hard": 2**40 + max(hard, 1)}
    ]
    assert "RLIMIT_NOFILE" in hj.fail("create", "-b", str(bundle(config)), new_id())


@pytest.mark.parametrize(
    ("setting", "dropped", "message"),
    [
        (
            {"oomScoreAdj": -1000},
            "sys_resource",
            "cannot write /proc/self/oom_score_adj (oomScoreAdj -1000): Permission denied",
        ),
        ({"user": {"uid": 1234, "gid": 1234}}, "setuid", "cannot set uid 1234: Operation not"),
        (
            {"capabilities": {"bounding": ["CAP_KILL"], "effective": ["CAP_KILL"]}},
            "setpcap",
            "cannot drop CAP_CHOWN from the bounding set: Operation not permitted",
        ),
    ],
    ids=["oom_score_adj", "setuid", "bounding"],
)
def test_setup_errors_name_the_file_or_setting(
    hj: Hostjob,
    bundle,
    setting: dict,
    dropped: str,
    message: str,  # type: ignore[type-arg]
) -> None:
    """A failed step of the child's set-up names the file or setting (as runc
    does), not a bare `[Errno 13] Permission denied`. hostjob runs here without the
    capability the step needs (dropped from its bounding set by setpriv)."""
    config = base_config("true")
    config["process"].update(setting)
    cid = new_id()
    argv = [
        "setpriv",
        f"--bounding-set=-{dropped}",
        *hj.argv("create", "-b", str(bundle(config)), cid),
    ]
    result = subprocess.run(argv, capture_output=True, text=True, env=hostjob_env(), timeout=60)
    assert result.returncode == 1, result
    assert message in result.stderr, result.stderr
    assert len(result.stderr.strip().splitlines()) == 1
    assert not (hj.root / cid).exists()


def test_capabilities_applied(hj: Hostjob, bundle) -> None:
    config = base_config("sh", "-c", "grep -E '^Cap(Eff|Bnd|Prm|Amb)' /proc/self/status")
    caps = ["CAP_KILL", "CAP_NET_BIND_SERVICE"]
    config["process"]["capabilities"] = {
        "bounding": caps,
        "effective": caps,
        "permitted": caps,
        "inheritable": caps,
        "ambient": caps,
    }
    mask = (1 << 5) | (1 << 10)
    status = dict(line.split(":\t") for line in run_output(hj, bundle, config).splitlines())
    for key in ("CapEff", "CapBnd", "CapPrm", "CapAmb"):
        assert int(status[key], 16) == mask, (key, status[key])


def test_ambient_capabilities_without_inheritable_are_skipped(hj: Hostjob, bundle) -> None:
    """`runc spec`'s own config asks for ambient capabilities that are not inheritable, which
    the kernel refuses to raise: runc and crun run it with an empty ambient set, so do we."""
    config = base_config("sh", "-c", "grep -E '^Cap(Eff|Amb)' /proc/self/status")
    caps = ["CAP_AUDIT_WRITE", "CAP_KILL", "CAP_NET_BIND_SERVICE"]
    config["process"]["capabilities"] = {
        "bounding": caps,
        "effective": caps,
        "permitted": caps,
        "inheritable": ["CAP_KILL"],
        "ambient": caps,
    }
    status = dict(line.split(":\t") for line in run_output(hj, bundle, config).splitlines())
    assert int(status["CapEff"], 16) == (1 << 29) | (1 << 5) | (1 << 10)
    assert int(status["CapAmb"], 16) == 1 << 5  # only the inheritable one


def test_capabilities_for_non_root_user(hj: Hostjob, bundle) -> None:
    config = base_config("sh", "-c", "id -u; grep -E '^CapEff' /proc/self/status")
    config["process"]["user"] = {"uid": 1000, "gid": 1000}
    caps = ["CAP_NET_BIND_SERVICE"]
    config["process"]["capabilities"] = {
        key: caps for key in ("bounding", "effective", "permitted", "inheritable", "ambient")
    }
    uid, _, value = run_output(hj, bundle, config).split()
    assert uid == "1000"
    assert int(value, 16) == 1 << 10


def test_unknown_capability_is_a_config_error(hj: Hostjob, bundle) -> None:
    config = base_config("true")
    config["process"]["capabilities"] = {"bounding": ["CAP_NOPE"]}
    error = hj.fail("create", "-b", str(bundle(config)), new_id())
    assert "process.capabilities.bounding[0]" in error and "CAP_NOPE" in error


def test_inherited_fds_are_closed(hj: Hostjob, bundle, tmp_path: Path) -> None:
    config = base_config("ls", "/proc/self/fd")
    leak_r, leak_w = os.pipe()
    os.set_inheritable(leak_w, True)
    try:
        result = hj("run", "-b", str(bundle(config)), new_id(), pass_fds=(leak_w,))
    finally:
        os.close(leak_r)
        os.close(leak_w)
    fds = sorted(int(x) for x in result.stdout.split())
    assert fds == [0, 1, 2, 3], fds  # 3 is ls's own directory fd
