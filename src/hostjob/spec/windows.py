"""The runtime-spec's ``windows`` section of config.json, as wire models.

hostjob runs no Windows container, but a job container's config may carry this
section: ``hostjob.specconv.convert`` maps ``resources`` onto Linux ones, takes
``jobContainer.rootfsMountPoint`` and refuses ``hyperv``. Field names are
runtime-spec's own.
"""

from __future__ import annotations

from hostjob.spec._decode import (
    Model,
    any_json,
    boolean,
    json_object,
    list_of,
    model,
    string,
    string_list,
    uint16,
    uint64,
)

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any


class WindowsMemory(Model):
    __slots__ = ("limit",)
    limit: int | None
    FIELDS = (("limit", "limit", uint64),)


class WindowsCPU(Model):
    __slots__ = ("count", "maximum", "shares")
    count: int | None
    shares: int | None
    maximum: int | None
    FIELDS = (
        ("count", "count", uint64),
        ("shares", "shares", uint16),
        ("maximum", "maximum", uint16),
    )


class WindowsStorage(Model):
    __slots__ = ("bps", "iops", "sandbox_size")
    iops: int | None
    bps: int | None
    sandbox_size: int | None
    FIELDS = (
        ("iops", "iops", uint64),
        ("bps", "bps", uint64),
        ("sandboxSize", "sandbox_size", uint64),
    )


class WindowsResources(Model):
    __slots__ = ("cpu", "memory", "storage")
    memory: WindowsMemory | None
    cpu: WindowsCPU | None
    storage: WindowsStorage | None
    FIELDS = (
        ("memory", "memory", model(WindowsMemory)),
        ("cpu", "cpu", model(WindowsCPU)),
        ("storage", "storage", model(WindowsStorage)),
    )


class JobContainer(Model):
    __slots__ = ("rootfs_mount_point",)
    rootfs_mount_point: str | None
    FIELDS = (("rootfsMountPoint", "rootfs_mount_point", string),)


class Windows(Model):
    __slots__ = (
        "credential_spec",
        "devices",
        "hyperv",
        "ignore_flushes_during_boot",
        "job_container",
        "layer_folders",
        "network",
        "resources",
        "servicing",
    )
    layer_folders: list[str] | None
    devices: list[Any] | None
    resources: WindowsResources | None
    credential_spec: object
    servicing: bool | None
    ignore_flushes_during_boot: bool | None
    hyperv: dict[str, Any] | None
    network: dict[str, Any] | None
    job_container: JobContainer | None
    FIELDS = (
        ("layerFolders", "layer_folders", string_list),
        ("devices", "devices", list_of(json_object)),
        ("resources", "resources", model(WindowsResources)),
        ("credentialSpec", "credential_spec", any_json),
        ("servicing", "servicing", boolean),
        ("ignoreFlushesDuringBoot", "ignore_flushes_during_boot", boolean),
        ("hyperv", "hyperv", json_object),
        ("network", "network", json_object),
        ("jobContainer", "job_container", model(JobContainer)),
    )
