"""``hostjob update``: change a container's limits live (runc's flags)."""

from __future__ import annotations

from hostjob.cli.args import INT, VALUE, Command, Option
from hostjob.errors import InvalidArgument, NotSupported
from hostjob.runtime.container import Container
from hostjob.units import parse_size

TYPE_CHECKING = False
if TYPE_CHECKING:
    from hostjob.cli.args import Args
    from hostjob.cli.main import Context
    from hostjob.spec import resources as wire

COMMAND = Command(
    "update",
    "Change the job's limits: --resources FILE|- (a LinuxResources JSON) or single values.",
    options=(
        Option("resources,r", VALUE, "LinuxResources JSON file, - for stdin", metavar="path"),
        Option("memory", VALUE, "memory limit (e.g. 512m)"),
        Option("memory-reservation", VALUE, "memory soft limit"),
        Option("memory-swap", VALUE, "memory+swap limit (-1: unlimited)"),
        Option("kernel-memory", VALUE, "kernel memory limit (deprecated by the kernel)"),
        Option("kernel-memory-tcp", VALUE, "kernel TCP buffer limit"),
        Option("cpu-share", INT, "CPU shares (relative weight)"),
        Option("cpu-quota", INT, "CFS quota in microseconds per period (-1: none)"),
        Option("cpu-period", INT, "CFS period in microseconds"),
        Option("cpu-rt-runtime", INT, "realtime runtime in microseconds"),
        Option("cpu-rt-period", INT, "realtime period in microseconds"),
        Option("cpuset-cpus", VALUE, "CPUs the job may use (e.g. 0-1)"),
        Option("cpuset-mems", VALUE, "memory nodes the job may use"),
        Option("cpu-idle", INT, "1: SCHED_IDLE for the job"),
        Option("blkio-weight", INT, "block IO weight (10-1000)"),
        Option("pids-limit", INT, "maximum number of processes (-1: unlimited)"),
        Option("l3-cache-schema", VALUE, "Intel RDT (not supported)"),
        Option("mem-bw-schema", VALUE, "Intel RDT (not supported)"),
    ),
    positionals=("container_id",),
)


def _size(text: str | None, what: str) -> int | None:
    if text is None:
        return None
    if text.strip() == "-1":
        return -1
    return parse_size(text, what)


def run(args: Args, ctx: Context) -> int:
    container = Container.load(args.container_id, root=ctx.root)
    if args.l3_cache_schema or args.mem_bw_schema:
        raise NotSupported("Intel RDT (--l3-cache-schema, --mem-bw-schema) is not supported")
    values = resources_from_values(
        memory=_size(args.memory, "--memory"),
        memory_reservation=_size(args.memory_reservation, "--memory-reservation"),
        memory_swap=_size(args.memory_swap, "--memory-swap"),
        kernel_memory=_size(args.kernel_memory, "--kernel-memory"),
        kernel_memory_tcp=_size(args.kernel_memory_tcp, "--kernel-memory-tcp"),
        cpu_shares=args.cpu_share,
        cpu_quota=args.cpu_quota,
        cpu_period=args.cpu_period,
        cpu_rt_runtime=args.cpu_rt_runtime,
        cpu_rt_period=args.cpu_rt_period,
        cpuset_cpus=args.cpuset_cpus,
        cpuset_mems=args.cpuset_mems,
        cpu_idle=args.cpu_idle,
        blkio_weight=args.blkio_weight,
        pids_limit=args.pids_limit,
    )
    if args.resources:
        if values.to_json():
            raise InvalidArgument("update takes --resources or single-value flags, not both")
        from hostjob.runtime.bundle import load_resources

        values = load_resources(args.resources)
    elif not values.to_json():
        raise InvalidArgument("update needs --resources or at least one limit flag")
    container.update(values)
    return 0


def resources_from_values(
    *,
    memory: int | None = None,
    memory_reservation: int | None = None,
    memory_swap: int | None = None,
    kernel_memory: int | None = None,
    kernel_memory_tcp: int | None = None,
    cpu_shares: int | None = None,
    cpu_quota: int | None = None,
    cpu_period: int | None = None,
    cpu_rt_runtime: int | None = None,
    cpu_rt_period: int | None = None,
    cpuset_cpus: str | None = None,
    cpuset_mems: str | None = None,
    cpu_idle: int | None = None,
    blkio_weight: int | None = None,
    pids_limit: int | None = None,
) -> wire.Resources:
    """runc's single-value ``update`` flags as LinuxResources."""
    from hostjob.spec import resources as wire

    out = wire.Resources()
    mem = wire.Memory(
        limit=memory,
        reservation=memory_reservation,
        swap=memory_swap,
        kernel=kernel_memory,
        kernel_tcp=kernel_memory_tcp,
    )
    if mem.to_json():
        out.memory = mem
    cpu = wire.CPU(
        shares=cpu_shares,
        quota=cpu_quota,
        period=cpu_period,
        realtime_runtime=cpu_rt_runtime,
        realtime_period=cpu_rt_period,
        cpus=cpuset_cpus,
        mems=cpuset_mems,
        idle=cpu_idle,
    )
    if cpu.to_json():
        out.cpu = cpu
    if blkio_weight is not None:
        out.block_io = wire.BlockIO(weight=blkio_weight)
    if pids_limit is not None:
        out.pids = wire.Pids(limit=pids_limit)
    return out
