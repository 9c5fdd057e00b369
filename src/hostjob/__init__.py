"""hostjob: job containers (HostProcess containers) for Linux.

The public API, importable by any Python program::

    import hostjob
    c = hostjob.Container.create("job1", bundle="/path/to/bundle")
    c.start()
    print(c.state().status)
    c.kill(15)                  # a signal number (hostjob.linux.signals.SIGTERM)
    c.delete(force=True)

Names are resolved lazily (PEP 562) so that ``import hostjob`` costs nothing on a
runtime command's start-up path; everything listed in ``__all__`` is public and
pinned by ``tests/unit/test_public_api.py``.
"""

# No ``from __future__ import annotations``: nothing here needs it, and every runtime
# command imports this module.
__version__ = "0.1.0"

TYPE_CHECKING = False
if TYPE_CHECKING:
    from hostjob.errors import (
        CgroupError,
        ConfigError,
        ContainerExists,
        ContainerNotFound,
        ContainerNotRunning,
        HookError,
        HostjobError,
        InvalidArgument,
        InvalidState,
        MissingController,
        MountError,
        NotSupported,
        PermissionDenied,
        StartError,
        StateCorrupt,
    )
    from hostjob.images.errors import (
        DigestMismatch,
        ImageError,
        ImageNotFound,
        InvalidReference,
        RegistryError,
        UnpackError,
    )
    from hostjob.runtime.container import Container
    from hostjob.runtime.status import Status

__all__ = [
    "CgroupError",
    "ConfigError",
    "Container",
    "ContainerExists",
    "ContainerNotFound",
    "ContainerNotRunning",
    "DigestMismatch",
    "HookError",
    "HostjobError",
    "ImageError",
    "ImageNotFound",
    "InvalidArgument",
    "InvalidReference",
    "InvalidState",
    "MissingController",
    "MountError",
    "NotSupported",
    "PermissionDenied",
    "RegistryError",
    "StartError",
    "StateCorrupt",
    "Status",
    "UnpackError",
    "__version__",
]

# Where each public name lives (everything else in __all__ is an error class of
# hostjob.errors).
_MODULES = {
    "Container": "hostjob.runtime.container",
    "Status": "hostjob.runtime.status",
    "DigestMismatch": "hostjob.images.errors",
    "ImageError": "hostjob.images.errors",
    "ImageNotFound": "hostjob.images.errors",
    "InvalidReference": "hostjob.images.errors",
    "RegistryError": "hostjob.images.errors",
    "UnpackError": "hostjob.images.errors",
}


def __getattr__(name: str) -> object:
    if name not in __all__:
        raise AttributeError(f"module 'hostjob' has no attribute {name!r}")
    module_name = _MODULES.get(name, "hostjob.errors")
    import importlib

    value = getattr(importlib.import_module(module_name), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(__all__)
