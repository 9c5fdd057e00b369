"""``linux.seccomp`` through the command line: every process of the job -- the init
and each exec -- runs under the profile, with or without noNewPrivileges, as root or as a
user; what the host's libseccomp cannot apply fails create and leaves nothing."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.helpers import Hostjob, base_config, new_id

ARCHES = ["SCMP_ARCH_X86_64", "SCMP_ARCH_X86", "SCMP_ARCH_X32"]
DENY_MKDIR = {
    "defaultAction": "SCMP_ACT_ALLOW",
    "architectures": ARCHES,
    "syscalls": [{"names": ["mkdir", "mkdirat"], "action": "SCMP_ACT_ERRNO", "errnoRet": 30}],
}
STATUS = "grep -E '^(Seccomp|NoNewPrivs):' /proc/self/status | tr -s '\\t' ' '"


def with_profile(args: list[str], profile: dict[str, Any] | None, **process: Any) -> dict[str, Any]:
    config = base_config(*args)
    config["process"].update(process)
    if profile is not None:
        config["linux"] = {"seccomp": profile}
    return config


@pytest.mark.parametrize("nnp", [True, False], ids=["noNewPrivileges", "privileged-load"])
@pytest.mark.parametrize("uid", [0, 1000])
def test_the_init_and_exec_run_under_the_profile(
    hj: Hostjob, bundle, tmp_path: Path, nnp: bool, uid: int
) -> None:
    target = tmp_path / "shared"
    target.mkdir(mode=0o777)
    target.chmod(0o777)
    script = f"{STATUS}; mkdir {target}/by-init 2>&1; sleep 300"
    config = with_profile(
        ["sh", "-c", script],
        DENY_MKDIR,
        noNewPrivileges=nnp,
        user={"uid": uid, "gid": uid},
    )
    cid = new_id()
    b = bundle(config)
    hj.ok("create", "-b", str(b), cid)
    try:
        hj.ok("start", cid)
        got = hj.ok("exec", cid, "sh", "-c", f"{STATUS}; mkdir {target}/by-exec 2>&1; true")
        assert sorted(got.splitlines()[:2]) == [f"NoNewPrivs: {int(nnp)}", "Seccomp: 2"], got
        init = Path(f"/proc/{hj.state(cid)['pid']}/status").read_text()
        assert "\nSeccomp:\t2\n" in init and f"\nNoNewPrivs:\t{int(nnp)}\n" in init
        assert "Read-only file system" in got  # errno 30, the profile's errnoRet
        assert not (target / "by-exec").exists()
        assert not (target / "by-init").exists()
    finally:
        hj.ok("delete", "--force", cid)


def test_without_a_profile_there_is_no_filter(hj: Hostjob, bundle) -> None:
    out = hj.ok("run", "-b", str(bundle(with_profile(["sh", "-c", STATUS], None))), new_id())
    assert "Seccomp: 0" in out.splitlines()


def test_a_profile_libseccomp_cannot_apply_fails_create(hj: Hostjob, bundle, no_leaks) -> None:
    profile = dict(DENY_MKDIR, syscalls=[{"names": ["no_such_call"], "action": "SCMP_ACT_KILL"}])
    cid = new_id()
    error = hj.fail("create", "-b", str(bundle(with_profile(["true"], profile))), cid)
    assert error.startswith(
        "linux.seccomp.syscalls[0].names: syscall 'no_such_call' is unknown to this host's"
        " libseccomp 2."
    ), error
    assert "\n" not in error.strip()
    assert not (hj.root / cid).exists()
    no_leaks(cid)


def test_an_unknown_action_fails_create(hj: Hostjob, bundle, no_leaks) -> None:
    profile = dict(DENY_MKDIR, defaultAction="SCMP_ACT_NOTIFY")
    cid = new_id()
    error = hj.fail("create", "-b", str(bundle(with_profile(["true"], profile))), cid)
    assert "linux.seccomp.defaultAction: SCMP_ACT_NOTIFY needs a seccomp agent" in error
    no_leaks(cid)


def test_a_denied_execve_is_create_s_error(hj: Hostjob, bundle, no_leaks) -> None:
    """The filter is the last step: the program's own execve is the first call under it."""
    profile = dict(
        DENY_MKDIR,
        syscalls=[{"names": ["execve", "execveat"], "action": "SCMP_ACT_ERRNO", "errnoRet": 1}],
    )
    config = with_profile(["true"], profile, noNewPrivileges=True)
    cid = new_id()
    result = hj("run", "-b", str(bundle(config)), cid)
    assert result.returncode != 0
    assert 'exec: "true": Operation not permitted' in result.stderr, result.stderr
    no_leaks(cid)


def test_the_record_keeps_the_profile_for_exec(hj: Hostjob, bundle) -> None:
    cid = new_id()
    hj.ok("create", "-b", str(bundle(with_profile(["sleep", "300"], DENY_MKDIR))), cid)
    try:
        state = json.loads((hj.root / cid / "state.json").read_text())
        assert state["config"]["seccomp"] == DENY_MKDIR
    finally:
        hj.ok("delete", "--force", cid)


def test_exec_installs_the_filter_create_compiled(hj: Hostjob, bundle, tmp_path: Path) -> None:
    """exec does not compile the profile again: it installs the filter kept in the
    container's state directory (here swapped for one returning another errno)."""
    from hostjob.seccomp import bpf

    target = tmp_path / "t"
    target.mkdir()
    cid = new_id()
    hj.ok("create", "-b", str(bundle(with_profile(["sleep", "300"], DENY_MKDIR))), cid)
    try:
        kept = hj.root / cid / "seccomp.bpf"
        assert kept.stat().st_mode & 0o777 == 0o600
        other = dict(DENY_MKDIR, syscalls=[dict(DENY_MKDIR["syscalls"][0], errnoRet=28)])
        bpf.save(bpf.build(other), str(kept))
        out = hj("exec", cid, "mkdir", str(target / "x")).stderr
        assert "No space left on device" in out, out  # errno 28: the kept filter's
        kept.unlink()  # none kept (a record from before): compiled from the profile
        out = hj("exec", cid, "mkdir", str(target / "x")).stderr
        assert "Read-only file system" in out, out
    finally:
        hj.ok("delete", "--force", cid)
    assert not (hj.root / cid).exists()


def test_a_create_takes_the_program_an_earlier_create_compiled(
    hj: Hostjob, bundle, tmp_path: Path
) -> None:
    """The program compiled for a profile is kept in the state root's ``.seccomp`` and the
    next create with the same profile installs it without compiling (here: the kept one
    swapped for a program that returns another errno, which the next container shows)."""
    from hostjob.seccomp import bpf

    target = tmp_path / "t"
    target.mkdir()
    config = with_profile(["sh", "-c", f"mkdir {target}/x"], DENY_MKDIR)
    first = hj("run", "-b", str(bundle(config)), new_id())
    assert "Read-only file system" in first.stderr, first.stderr
    cache = hj.root / ".seccomp"
    [entry] = cache.glob("*.bpf")
    assert cache.stat().st_mode & 0o777 == 0o700 and entry.stat().st_mode & 0o777 == 0o600
    other = dict(DENY_MKDIR, syscalls=[dict(DENY_MKDIR["syscalls"][0], errnoRet=28)])
    data = entry.read_bytes()
    program = bpf.build(other).program
    entry.write_bytes(data[: len(data) - len(program)] + program)
    second = hj("run", "-b", str(bundle(config)), new_id())
    assert "No space left on device" in second.stderr, second.stderr  # the kept program
    assert [p.name for p in cache.iterdir()] == [entry.name]
    assert hj.ok("list", "-q").split() == []  # the cache is no container
    error = hj.fail("create", "-b", str(bundle(config)), ".seccomp")
    assert "invalid container ID format" in error


def test_a_create_that_fails_keeps_no_program(hj: Hostjob, bundle, no_leaks) -> None:
    cid = new_id()
    config = with_profile(["/nonexistent/program"], DENY_MKDIR)
    error = hj.fail("create", "-b", str(bundle(config)), cid)
    assert "/nonexistent/program" in error
    assert not (hj.root / ".seccomp").exists()
    no_leaks(cid)
