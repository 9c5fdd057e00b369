"""hostjob's public API, pinned: adding or removing a name is a deliberate change."""

from __future__ import annotations

import inspect

import hostjob

PUBLIC = [
    "__version__",
    "Container",
    "Status",
    "HostjobError",
    "ConfigError",
    "InvalidArgument",
    "ContainerExists",
    "ContainerNotFound",
    "ContainerNotRunning",
    "InvalidState",
    "StateCorrupt",
    "StartError",
    "HookError",
    "MountError",
    "CgroupError",
    "MissingController",
    "NotSupported",
    "PermissionDenied",
    "ImageError",
    "InvalidReference",
    "RegistryError",
    "DigestMismatch",
    "UnpackError",
    "ImageNotFound",
]


def test_all_is_pinned() -> None:
    assert sorted(hostjob.__all__) == sorted(PUBLIC)
    for name in PUBLIC:
        assert getattr(hostjob, name) is not None


def test_container_verbs() -> None:
    verbs = {"create", "load", "load_all", "start", "kill", "delete", "delete_by_id", "state"}
    assert verbs <= {n for n, _ in inspect.getmembers(hostjob.Container)}


def test_errors_form_one_tree() -> None:
    for name in PUBLIC:
        obj = getattr(hostjob, name)
        if inspect.isclass(obj) and name.endswith(
            (
                "Error",
                "Exists",
                "NotFound",
                "NotRunning",
                "State",
                "Supported",
                "Denied",
                "Argument",
                "Controller",
                "Mismatch",
                "Reference",
            )
        ):
            assert issubclass(obj, hostjob.HostjobError), name
            assert obj.exit_code == 1


def test_client_error_texts() -> None:
    assert str(hostjob.ContainerExists("x")) == "container with given ID already exists"
    assert str(hostjob.ContainerNotFound("x")) == "container does not exist"
    assert str(hostjob.ContainerNotRunning("x")) == "container not running"
