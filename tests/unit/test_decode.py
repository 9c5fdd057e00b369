"""The wire decoder: JSON paths in errors, tolerance of unknown fields, round trips."""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from hostjob.errors import ConfigError
from hostjob.spec import resources
from hostjob.spec import runtime as wire
from tests.helpers import base_config


def test_full_config_round_trip() -> None:
    config = base_config("sh", "-c", "true")
    config["linux"] = {
        "cgroupsPath": "/a/b",
        "resources": {
            "memory": {"limit": 1 << 30, "swap": -1, "disableOOMKiller": True, "kernelTCP": 5},
            "cpu": {"shares": 512, "quota": 50000, "period": 100000, "cpus": "0-1"},
            "blockIO": {
                "weight": 500,
                "throttleReadBpsDevice": [{"major": 8, "minor": 0, "rate": 1}],
            },
            "pids": {"limit": 10},
            "hugepageLimits": [{"pageSize": "2MB", "limit": 0}],
            "unified": {"memory.high": "max"},
        },
        "uidMappings": [{"containerID": 0, "hostID": 1000, "size": 1}],
    }
    config["windows"] = {
        "jobContainer": {"rootfsMountPoint": "/mnt/x"},
        "resources": {"cpu": {"count": 2}, "memory": {"limit": 10}, "storage": {"iops": 5}},
    }
    spec = wire.Spec.decode(config)
    assert spec.linux.resources.memory.disable_oom_killer is True
    assert spec.linux.resources.memory.kernel_tcp == 5
    assert spec.linux.resources.block_io.throttle_read_bps_device[0].rate == 1
    assert spec.linux.uid_mappings[0].container_id == 0
    assert spec.windows.job_container.rootfs_mount_point == "/mnt/x"
    assert spec.to_json() == config


def test_explicit_field_names() -> None:
    names = {
        key
        for cls in (resources.Memory, resources.Resources, wire.IDMapping)
        for key, _a, _d in cls.FIELDS
    }
    assert {"disableOOMKiller", "kernelTCP", "blockIO", "containerID", "hugepageLimits"} <= names


@pytest.mark.parametrize(
    ("data", "path", "expected"),
    [
        ({"process": {"args": "x"}}, "process.args", "expected an array, got string"),
        (
            {"process": {"user": {"uid": True}}},
            "process.user.uid",
            "expected an integer, got boolean",
        ),
        ({"process": {"user": {"uid": 2**32}}}, "process.user.uid", "out of range"),
        ({"root": []}, "root", "expected an object, got array"),
        ({"linux": {"resources": {"cpu": {"cpus": 1}}}}, "linux.resources.cpu.cpus", "string"),
        ({"annotations": {"k": None}}, "annotations.k", "got null"),
    ],
)
def test_type_errors_carry_path(data: dict, path: str, expected: str) -> None:  # type: ignore[type-arg]
    with pytest.raises(ConfigError) as err:
        wire.Spec.decode(data)
    assert err.value.path == path
    assert expected in str(err.value)


def test_null_reads_as_absent_and_unknown_is_tolerated() -> None:
    spec = wire.Spec.decode({"process": None, "hostname": None, "x-future": {"y": 1}})
    assert spec.process is None and spec.hostname is None


def test_top_level_must_be_object() -> None:
    with pytest.raises(ConfigError, match="expected an object, got array"):
        wire.Spec.decode([1])


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(),
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(), children, max_size=4)
    ),
    max_leaves=20,
)


@given(
    st.dictionaries(
        st.sampled_from(
            [
                "ociVersion",
                "process",
                "root",
                "linux",
                "mounts",
                "hooks",
                "annotations",
                "windows",
                "x",
            ]
        ),
        json_values,
    )
)
def test_decode_never_crashes(data: dict) -> None:  # type: ignore[type-arg]
    try:
        spec = wire.Spec.decode(data)
    except ConfigError as err:
        assert "\n" not in str(err)
        return
    json.dumps(spec.to_json())
