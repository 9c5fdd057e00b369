"""Bad input gets a one-line error and changes nothing; ignored fields warn once each;
the log speaks logrus."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from tests.helpers import Hostjob, base_config, cgroup_dirs, new_id

RFC3339 = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(Z|[+-]\d\d:\d\d)$")


def assert_nothing_left(hj: Hostjob, cid: str) -> None:
    assert not (hj.root / cid).exists()
    assert cgroup_dirs(f"/hostjob/{cid}") == []


def test_malformed_json(hj: Hostjob, tmp_path: Path, bundle) -> None:
    b = bundle(base_config())
    (b / "config.json").write_text('{"process": ')
    cid = new_id()
    assert "config.json is not valid JSON" in hj.fail("create", "-b", str(b), cid)
    assert_nothing_left(hj, cid)


def test_missing_config(hj: Hostjob, tmp_path: Path) -> None:
    assert "config.json not found" in hj.fail("create", "-b", str(tmp_path), new_id())


@pytest.mark.parametrize(
    ("mutate", "path"),
    [
        (lambda c: c["process"].__setitem__("args", "sh"), "process.args"),
        (lambda c: c["process"]["args"].append(3), "process.args[1]"),
        (lambda c: c["process"]["user"].__setitem__("uid", "0"), "process.user.uid"),
        (lambda c: c["process"]["user"].__setitem__("uid", -1), "process.user.uid"),
        (lambda c: c["process"].__setitem__("terminal", "yes"), "process.terminal"),
        (lambda c: c.__setitem__("mounts", {}), "mounts"),
        (lambda c: c.__setitem__("linux", {"resources": {"memory": {"limit": "1G"}}}),
         "linux.resources.memory.limit"),
        (lambda c: c.__setitem__("linux", {"resources": {"blockIO": {"weight": True}}}),
         "linux.resources.blockIO.weight"),
        (lambda c: c.__setitem__("hooks", {"prestart": [{"path": 1}]}), "hooks.prestart[0].path"),
        (lambda c: c.__setitem__("annotations", {"a": 1}), "annotations.a"),
        (lambda c: c["process"].__setitem__("env", ["NOEQUALS"]), "process.env[0]"),
        (lambda c: c["process"].__setitem__("args", []), "process.args"),
        (lambda c: c.__delitem__("root"), "root.path"),
        (lambda c: c["process"].__setitem__("rlimits", [{"type": "RLIMIT_BOGUS"}]),
         "process.rlimits[0].type"),
    ],
)  # fmt: skip
def test_wrong_types_name_the_json_path(hj: Hostjob, bundle, mutate, path: str) -> None:  # type: ignore[no-untyped-def]
    config = base_config("true")
    mutate(config)
    cid = new_id()
    error = hj.fail("create", "-b", str(bundle(config)), cid)
    assert error.startswith(path + ":"), error
    assert_nothing_left(hj, cid)


def test_unknown_fields_tolerated(hj: Hostjob, bundle) -> None:
    config = base_config("true")
    config["futureField"] = {"x": 1}
    config["process"]["somethingNew"] = True
    config["linux"] = {"resources": {"memory": {"unknownKnob": 5}}}
    assert hj("run", "-b", str(bundle(config)), new_id()).returncode == 0


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        ("linux", {"sysctl": {"net.ipv4.ip_forward": "1"}}, "linux.sysctl"),
        ("vm", {"hypervisor": {"path": "/x"}}, "vm"),
        ("windows", {"hyperv": {}, "jobContainer": {}}, "windows.hyperv"),
    ],
)
def test_refused_fields(hj: Hostjob, bundle, field: str, value: object, message: str) -> None:
    config = base_config("true")
    config[field] = value
    cid = new_id()
    assert message in hj.fail("create", "-b", str(bundle(config)), cid)
    assert_nothing_left(hj, cid)


def test_ignored_fields_are_named_in_one_warning(hj: Hostjob, bundle, tmp_path: Path) -> None:
    config = base_config("true")
    config["hostname"] = "box"
    config["domainname"] = "example"
    config["linux"] = {
        "namespaces": [{"type": "pid"}, {"type": "mount"}],
        "uidMappings": [{"containerID": 0, "hostID": 1000, "size": 1}],
        "gidMappings": [{"containerID": 0, "hostID": 1000, "size": 1}],
        "seccomp": {"defaultAction": "SCMP_ACT_ALLOW"},
        "maskedPaths": ["/proc/kcore"],
        "readonlyPaths": ["/proc/sys"],
        "devices": [{"path": "/dev/fuse", "type": "c", "major": 10, "minor": 229}],
        "mountLabel": "system_u:object_r:container_file_t:s0",
    }
    config["process"]["apparmorProfile"] = "docker-default"
    config["process"]["selinuxLabel"] = "system_u:system_r:container_t:s0"
    result = hj("run", "-b", str(bundle(config)), new_id())
    assert result.returncode == 0
    assert result.stderr == ""  # warnings go to the log, never to stderr on success
    records = [json.loads(line) for line in (tmp_path / "hostjob.log").read_text().splitlines()]
    warnings = [r["msg"] for r in records if r["level"] == "warning"]
    expected = [
        "hostname", "domainname", "linux.namespaces", "linux.uidMappings", "linux.gidMappings",
        "linux.maskedPaths", "linux.readonlyPaths", "linux.devices",
        "linux.mountLabel", "process.apparmorProfile", "process.selinuxLabel",
    ]  # fmt: skip
    assert warnings == [
        ", ".join(expected) + " are ignored: job containers run in the host's namespaces"
    ]


def test_error_log_is_logrus_json(hj: Hostjob, tmp_path: Path) -> None:
    assert "container does not exist" in hj.fail("state", "nosuch")
    line = (tmp_path / "hostjob.log").read_text().splitlines()[-1]
    record = json.loads(line)
    assert record["level"] == "error"
    assert record["msg"] == "container does not exist"
    assert RFC3339.match(record["time"]), record["time"]


def test_text_log_format(tmp_path: Path) -> None:
    runner = Hostjob(tmp_path / "state")
    log = tmp_path / "text.log"
    result = runner("--log", str(log), "--log-format", "text", "state", "nosuch")
    assert result.returncode == 1
    line = log.read_text().splitlines()[-1]
    assert re.match(r'^time="[^"]+" level=error msg="container does not exist"$', line), line


def test_bad_flags(hj: Hostjob) -> None:
    assert "flag provided but not defined" in hj.fail("create", "--bogus", "x")
    assert "no such command" in hj.fail("frobnicate")
    assert "invalid log-format" in hj.fail("--log-format", "xml", "list")


def test_every_client_flag_is_accepted(hj: Hostjob, bundle, tmp_path: Path) -> None:
    """The flags containerd, podman/conmon and CRI-O pass to runc are accepted."""
    cid = new_id()
    b = bundle(base_config("sleep", "300"))
    pid = tmp_path / "pid"
    base = [
        "--systemd-cgroup=false",
        "--debug=false",
        "--rootless",
        "false",
        "--criu",
        "/usr/sbin/criu",
    ]
    hj.ok(*base, "create", "--bundle", str(b), "--pid-file", str(pid), "--no-pivot",
          "--no-new-keyring", "--preserve-fds", "0", cid)  # fmt: skip
    hj.ok(*base, "start", cid)
    hj.ok(*base, "kill", "--all", cid, "SIGKILL")
    hj.ok(*base, "delete", "--force", cid)
    hj.ok("-root", str(hj.root), "list", "-q")  # Go's single-dash long flags


def test_version_and_help() -> None:
    runner = Hostjob(Path("/nonexistent"))
    version = runner("--version").stdout.splitlines()
    assert version[0].startswith("hostjob version ")
    assert version[1].startswith("spec: 1.")
    assert "commands:" in runner("--help").stdout
    assert "--bundle" in runner("create", "--help").stdout


def test_spec_and_features(tmp_path: Path) -> None:
    runner = Hostjob(tmp_path / "state")
    runner.ok("spec", "--bundle", str(tmp_path))
    config = json.loads((tmp_path / "config.json").read_text())
    assert config["process"]["args"] == ["sh"]
    assert config["root"]["path"] == "rootfs"
    assert "jobContainer" in config["windows"]
    assert "exists" in runner.fail("spec", "--bundle", str(tmp_path))
    features = json.loads(runner.ok("features"))
    assert features["linux"]["namespaces"] == []
    assert features["linux"]["cgroup"] == {
        "v1": True, "v2": True, "systemd": True, "systemdUser": False, "rdma": False,
    }  # fmt: skip
    assert features["hooks"] == [
        "prestart", "createRuntime", "createContainer", "startContainer", "poststart", "poststop",
    ]  # fmt: skip
    assert features["linux"]["seccomp"]["enabled"] is True
    assert "SCMP_ACT_ERRNO" in features["linux"]["seccomp"]["actions"]
    assert "SCMP_ACT_NOTIFY" not in features["linux"]["seccomp"]["actions"]
    assert "CAP_SYS_ADMIN" in features["linux"]["capabilities"]
