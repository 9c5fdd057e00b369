"""hostjob: job containers (HostProcess containers) for Linux.

The public API, importable by any Python program::

    import hostjob
    c = hostjob.Container.create("job1", bundle="/path/to/bundle")
    c.start()
    print(c.state().status)
    c.kill("TERM")
    c.delete(force=True)

Names are resolved lazily (PEP 562) so that ``import hostjob`` costs nothing on a
runtime command's start-up path; everything listed in ``__all__`` is public and
pinned by ``tests/unit/test_public_api.py``.
"""

from __future__ import annotations

__version__ = "0.1.0"

TYPE_CHECKING = False
if TYPE_CHECKING:
    from hostjob.errors import (
        CgroupError,
        ConfigError,
        ContainerExists,
        ContainerNotFound,
        ContainerNotRunning,
        DigestMismatch,
        HookError,
        HostjobError,
        ImageError,
        ImageNotFound,
        InvalidArgument,
        InvalidState,
        MissingController,
        MountError,
        NotSupported,
        PermissionDenied,
        ReferenceError,
        RegistryError,
        StartError,
        UnpackError,
    )
    from hostjob.runtime.container import Container, Status

# name -> module that defines it
_EXPORTS = {
    "Container": "hostjob.runtime.container",
    "Status": "hostjob.runtime.container",
    "HostjobError": "hostjob.errors",
    "ConfigError": "hostjob.errors",
    "InvalidArgument": "hostjob.errors",
    "ContainerExists": "hostjob.errors",
    "ContainerNotFound": "hostjob.errors",
    "ContainerNotRunning": "hostjob.errors",
    "InvalidState": "hostjob.errors",
    "StartError": "hostjob.errors",
    "HookError": "hostjob.errors",
    "MountError": "hostjob.errors",
    "CgroupError": "hostjob.errors",
    "MissingController": "hostjob.errors",
    "NotSupported": "hostjob.errors",
    "PermissionDenied": "hostjob.errors",
    "ImageError": "hostjob.errors",
    "ReferenceError": "hostjob.errors",
    "RegistryError": "hostjob.errors",
    "DigestMismatch": "hostjob.errors",
    "UnpackError": "hostjob.errors",
    "ImageNotFound": "hostjob.errors",
}

__all__ = ["__version__", *_EXPORTS]


def __getattr__(name: str) -> object:
    module_name = _EXPORTS.get(name)
    if module_name is None:
        raise AttributeError(f"module 'hostjob' has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(module_name), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(__all__)
