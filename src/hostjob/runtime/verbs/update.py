"""``update``: the job's limits changed live (runc's ``update``). The new limits are
merged into the ones the container has and kept in its record; under
``--systemd-cgroup`` systemd sets what it has properties for, and the rest is written
to the cgroup."""

from __future__ import annotations

from hostjob.runtime import status

TYPE_CHECKING = False
if TYPE_CHECKING:
    from hostjob.runtime.handle import Handle
    from hostjob.spec import resources as wire


def update(container: Handle, resources: wire.Resources) -> None:
    """Change the job's limits live; they are kept in the container's record."""
    from hostjob.specconv.jobconfig import merge_resources

    with container.store.lock(container.id):
        container.reload()
        status.require_signal(container.id, container.status())
        record = container.record
        assert record is not None
        merged = merge_resources(record.config.resources, resources)
        rest: wire.Resources | None = merged
        if record.systemd_scope:  # what systemd has properties for, it sets
            from hostjob.cgroups import systemd

            rest = systemd.set_properties(record.config.cgroups_path, resources)
        if rest is not None and rest.to_json():
            container.cgroup().update(rest)
        record.config.set_resources(merged)
        container.store.write(record)
