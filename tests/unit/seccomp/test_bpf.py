"""``linux.seccomp``: the profile checked (pure), compiled by the host's libseccomp,
and -- in a forked child that sets no_new_privs, no root needed -- applied by the kernel."""

from __future__ import annotations

import errno
import os
from typing import Any

import pytest

from hostjob.errors import ConfigError
from hostjob.seccomp import bpf

ARCHES = ["SCMP_ARCH_X86_64", "SCMP_ARCH_X86", "SCMP_ARCH_X32"]


def profile(
    *rules: dict[str, Any], default: str = "SCMP_ACT_ALLOW", **extra: Any
) -> dict[str, Any]:
    return {"defaultAction": default, "architectures": ARCHES, "syscalls": list(rules), **extra}


@pytest.mark.parametrize(
    ("document", "path", "words"),
    [
        ({}, "linux.seccomp.defaultAction", "unknown action None"),
        ({"defaultAction": "SCMP_ACT_BOGUS"}, "linux.seccomp.defaultAction", "unknown action"),
        ({"defaultAction": {}}, "linux.seccomp.defaultAction", "unknown action {}"),
        ({"defaultAction": ["x"]}, "linux.seccomp.defaultAction", "unknown action"),
        ({"defaultAction": "SCMP_ACT_NOTIFY"}, "linux.seccomp.defaultAction", "seccomp agent"),
        (
            profile(listenerPath="/run/agent.sock"),
            "linux.seccomp.listenerPath",
            "seccomp agent",
        ),
        (profile(architectures=["SCMP_ARCH_Z80"]), "linux.seccomp.architectures[0]", "Z80"),
        (profile(flags=["SECCOMP_FILTER_FLAG_NOPE"]), "linux.seccomp.flags[0]", "NOPE"),
        (profile({"names": [], "action": "SCMP_ACT_ERRNO"}), "syscalls[0].names", "names"),
        (profile({"names": ["read"], "action": "X"}), "syscalls[0].action", "unknown action"),
        (profile({"names": ["read"], "action": {}}), "syscalls[0].action", "unknown action"),
        (
            profile({"names": ["read"], "action": "SCMP_ACT_ERRNO", "errnoRet": -1}),
            "syscalls[0].errnoRet",
            "errno",
        ),
        (
            profile({"names": ["read"], "action": "SCMP_ACT_ERRNO", "args": [{"index": 6}]}),
            "syscalls[0].args[0].index",
            "0-5",
        ),
        (
            profile(
                {"names": ["read"], "action": "SCMP_ACT_ERRNO", "args": [{"index": 0, "op": "LT"}]}
            ),
            "syscalls[0].args[0].op",
            "unknown operator",
        ),
        (
            profile(
                {
                    "names": ["read"],
                    "action": "SCMP_ACT_ERRNO",
                    "args": [{"index": 0, "value": 2**64, "op": "SCMP_CMP_EQ"}],
                }
            ),
            "syscalls[0].args[0].value",
            "64-bit",
        ),
    ],
)
def test_a_bad_profile_is_refused_naming_the_field(
    document: dict[str, Any], path: str, words: str
) -> None:
    with pytest.raises(ConfigError) as caught:
        bpf.check(document)
    assert path in str(caught.value) and words in str(caught.value), str(caught.value)


def test_a_good_profile_passes_and_compiles() -> None:
    document = profile(
        {"names": ["mkdir", "mkdirat"], "action": "SCMP_ACT_ERRNO", "errnoRet": 13},
        {
            "names": ["personality"],
            "action": "SCMP_ACT_ERRNO",
            "args": [{"index": 0, "value": 8, "op": "SCMP_CMP_EQ"}],
        },
        flags=["SECCOMP_FILTER_FLAG_LOG", "SECCOMP_FILTER_FLAG_SPEC_ALLOW"],
    )
    bpf.check(document)
    compiled = bpf.build(document)
    assert compiled.program and len(compiled.program) % 8 == 0
    assert compiled.flags == 2 | 4
    assert compiled.syscall_nr > 0


def test_an_unknown_syscall_that_would_be_denied_is_an_error() -> None:
    document = profile({"names": ["read", "no_such_call"], "action": "SCMP_ACT_ERRNO"})
    with pytest.raises(ConfigError) as caught:
        bpf.build(document)
    message = str(caught.value)
    assert message.startswith("linux.seccomp.syscalls[0].names: syscall 'no_such_call' is unknown")
    assert "it cannot be given SCMP_ACT_ERRNO" in message


def test_an_unknown_syscall_in_an_allow_rule_is_skipped() -> None:
    """It then meets the default action: nothing the profile denies gets through."""
    document = profile(
        {"names": ["read", "no_such_call"], "action": "SCMP_ACT_ALLOW"}, default="SCMP_ACT_ERRNO"
    )
    assert bpf.build(document).program


def test_a_rule_with_the_default_action_is_left_out() -> None:
    document = profile({"names": ["read"], "action": "SCMP_ACT_ALLOW"})
    with_rule = bpf.build(document).program
    assert with_rule == bpf.build(profile()).program


def run_under(document: dict[str, Any], action: Any) -> tuple[str, int]:
    """Fork; in the child set no_new_privs, install the compiled profile, run ``action``
    (its result, or the errno it raised, written back). Returns (result, wait status)."""
    from hostjob.linux import syscalls

    compiled = bpf.build(document)
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(read_end)
        code = 0
        try:
            syscalls.set_no_new_privs()
            bpf.install(compiled)
            try:
                result = str(action())
            except OSError as err:
                result = f"errno {err.errno}"
            os.write(write_end, result.encode())
        except BaseException as err:
            os.write(write_end, repr(err).encode())
            code = 1
        os._exit(code)
    os.close(write_end)
    chunks = []
    while chunk := os.read(read_end, 4096):
        chunks.append(chunk)
    os.close(read_end)
    _, status = os.waitpid(pid, 0)
    return b"".join(chunks).decode(), status


def priority(which: int) -> Any:
    return lambda: os.getpriority(which, 0) is not None


def test_errno_rules_and_argument_comparisons_are_applied(tmp_path: Any) -> None:
    document = profile(
        {"names": ["mkdir", "mkdirat"], "action": "SCMP_ACT_ERRNO", "errnoRet": errno.EROFS},
        {
            # getpriority(PRIO_USER, ...) is refused, PRIO_PROCESS is not
            "names": ["getpriority"],
            "action": "SCMP_ACT_ERRNO",
            "args": [{"index": 0, "value": os.PRIO_USER, "op": "SCMP_CMP_EQ"}],
        },
    )
    assert run_under(document, lambda: os.mkdir(tmp_path / "x"))[0] == f"errno {errno.EROFS}"
    assert not (tmp_path / "x").exists()
    assert run_under(document, priority(os.PRIO_USER))[0] == f"errno {errno.EPERM}"
    assert run_under(document, priority(os.PRIO_PROCESS))[0] == "True"


def test_the_same_argument_twice_is_either_condition() -> None:
    """runc's rule: two conditions on one argument are two rules (OR), not an AND that
    libseccomp cannot express."""
    document = profile(
        {
            "names": ["getpriority"],
            "action": "SCMP_ACT_ERRNO",
            "args": [
                {"index": 0, "value": os.PRIO_USER, "op": "SCMP_CMP_EQ"},
                {"index": 0, "value": os.PRIO_PGRP, "op": "SCMP_CMP_EQ"},
            ],
        }
    )
    assert run_under(document, priority(os.PRIO_USER))[0] == f"errno {errno.EPERM}"
    assert run_under(document, priority(os.PRIO_PGRP))[0] == f"errno {errno.EPERM}"
    assert run_under(document, priority(os.PRIO_PROCESS))[0] == "True"


def test_masked_equality() -> None:
    document = profile(
        {
            "names": ["getpriority"],
            "action": "SCMP_ACT_ERRNO",
            "errnoRet": errno.EINVAL,
            "args": [{"index": 0, "value": 2, "valueTwo": 2, "op": "SCMP_CMP_MASKED_EQ"}],
        }
    )
    assert os.PRIO_USER & 2 and not os.PRIO_PGRP & 2
    assert run_under(document, priority(os.PRIO_USER))[0] == f"errno {errno.EINVAL}"
    assert run_under(document, priority(os.PRIO_PGRP))[0] == "True"


def test_a_default_errno_with_its_errno_ret() -> None:
    document = profile(
        {"names": ["getpid", "exit_group", "exit"], "action": "SCMP_ACT_ALLOW"},
        default="SCMP_ACT_ERRNO",
        defaultErrnoRet=errno.ENOSYS,
    )
    # everything but those fails with ENOSYS, a write() to a pipe too: the exit status says
    from hostjob.linux import syscalls

    compiled = bpf.build(document)
    pid = os.fork()
    if pid == 0:
        try:
            syscalls.set_no_new_privs()
            bpf.install(compiled)
            ok = os.getpid() > 0
            try:
                os.getcwd()
                ok = False
            except OSError as err:
                ok = ok and err.errno == errno.ENOSYS
        except BaseException:
            ok = False
        os._exit(7 if ok else 1)
    _, status = os.waitpid(pid, 0)
    assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 7, status


def test_kill_process_and_trap_end_the_process() -> None:
    for action in ("SCMP_ACT_KILL_PROCESS", "SCMP_ACT_KILL", "SCMP_ACT_TRAP"):
        document = profile({"names": ["mkdir", "mkdirat"], "action": action})
        _, status = run_under(document, lambda: os.mkdir("/nonexistent/x"))
        assert os.WIFSIGNALED(status), (action, status)
        assert os.WTERMSIG(status) == 31, (action, status)  # SIGSYS, whichever of the three


def test_log_lets_it_through() -> None:
    document = profile({"names": ["getpriority"], "action": "SCMP_ACT_LOG"})
    assert run_under(document, priority(os.PRIO_USER))[0] == "True"


def test_the_flags_are_given_to_the_kernel() -> None:
    document = profile(
        {"names": ["mkdir"], "action": "SCMP_ACT_ERRNO"},
        flags=[
            "SECCOMP_FILTER_FLAG_TSYNC",
            "SECCOMP_FILTER_FLAG_LOG",
            "SECCOMP_FILTER_FLAG_SPEC_ALLOW",
        ],
    )

    def status() -> str:
        with open("/proc/self/status") as f:
            lines = dict(line.split(":", 1) for line in f.read().splitlines() if ":" in line)
        return f"{lines['Seccomp'].strip()} {lines['Seccomp_filters'].strip()}"

    assert run_under(document, status)[0] == "2 1"


def test_the_compiled_filter_is_kept_for_exec(tmp_path: Any) -> None:
    compiled = bpf.build(
        profile({"names": ["mkdir"], "action": "SCMP_ACT_ERRNO"}, flags=["SECCOMP_FILTER_FLAG_LOG"])
    )
    path = str(tmp_path / "seccomp.bpf")
    bpf.save(compiled, path)
    assert os.stat(path).st_mode & 0o777 == 0o600
    again = bpf.load(path)
    assert again is not None
    assert (again.program, again.flags, again.syscall_nr) == (
        compiled.program,
        compiled.flags,
        compiled.syscall_nr,
    )


@pytest.mark.parametrize("damage", ["missing", "empty", "garbage", "truncated"])
def test_a_kept_filter_that_is_not_whole_is_compiled_again(tmp_path: Any, damage: str) -> None:
    compiled = bpf.build(profile({"names": ["mkdir"], "action": "SCMP_ACT_ERRNO"}))
    path = tmp_path / "seccomp.bpf"
    bpf.save(compiled, str(path))
    data = path.read_bytes()
    if damage == "missing":
        path.unlink()
    elif damage == "empty":
        path.write_bytes(b"")
    elif damage == "garbage":
        path.write_bytes(b"x" * len(data))
    else:
        path.write_bytes(data[:-3])
    assert bpf.load(str(path)) is None


def test_a_flag_the_kernel_lacks_is_an_error(monkeypatch: pytest.MonkeyPatch) -> None:
    """The kernel is asked (seccomp(2) with no program: EINVAL for an unknown flag)."""
    assert bpf._kernel_has_flag(bpf.build(profile()).syscall_nr, 2)
    assert not bpf._kernel_has_flag(bpf.build(profile()).syscall_nr, 1 << 30)
    monkeypatch.setitem(bpf.FLAGS, "SECCOMP_FILTER_FLAG_LOG", 1 << 30)
    with pytest.raises(ConfigError, match=r"flags\[0\]: this kernel lacks SECCOMP_FILTER_FLAG_LOG"):
        bpf.build(profile(flags=["SECCOMP_FILTER_FLAG_LOG"]))
