"""The systemd cgroup driver (``--systemd-cgroup``; containerd's ``SystemdCgroup = true``,
kubeadm's default): the job is a transient ``<prefix>-<name>.scope`` in the slice the
``slice:prefix:name`` path names, which systemd itself starts, knows and shows
(``systemctl status``), as runc's systemd driver makes one.

The scope is started over D-Bus (``hostjob.cgroups.dbus``, loaded only here) with the container's
init as its one process and ``Delegate=yes`` (the job's subtree is hostjob's to manage:
exec'd processes, the freezer, kill-all), and with the limits systemd has properties for
as unit properties (``MemoryMax``, ``TasksMax``, ``CPUWeight``, ...): a unit's own
properties are what systemd writes back to its cgroup whenever it reloads, so a limit
written to the files behind its back would not last. What systemd has no property for
(``unified``, hugepages, cpu.idle, cpu.max.burst, memory.swappiness on v2 ...) is written to
the delegated cgroup (``split``). ``update`` changes both; ``delete`` stops the unit (and
resets it, so that a job that was killed does not stay listed as failed).

Only on the unified hierarchy (every current distribution's default): on a v1 or hybrid
host, and where systemd is not PID 1, ``slice:prefix:name`` is mapped onto cgroupfs as
before (``resolve_path``), and ``unavailable`` says once why.
"""

from __future__ import annotations

import posix

from hostjob import log
from hostjob.errors import CgroupError

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Any

    from hostjob.cgroups import Manager
    from hostjob.cgroups.dbus import Connection
    from hostjob.spec.resources import Resources

    Property = tuple[str, tuple[str, Any]]  # (name, (signature, value))

MANAGER_PATH = "/org/freedesktop/systemd1"
MANAGER = "org.freedesktop.systemd1.Manager"
DESTINATION = "org.freedesktop.systemd1"
INFINITY = 2**64 - 1
MAX_CPUS = 8192  # the most CPUs (and memory nodes) a Linux kernel can be built for
JOB_WAIT = 30.0  # seconds: a scope starts at once; systemd may be busy


def booted() -> bool:
    """Whether systemd runs this host (``sd_booted``: /run/systemd/system exists)."""
    try:
        posix.stat("/run/systemd/system")
    except OSError:
        return False
    return True


def unavailable(version: int) -> str | None:
    """Why the driver cannot be used on this host (None: it can)."""
    if not booted():
        return "systemd is not running this host"
    if version != 2:
        return "the systemd cgroup driver needs the unified cgroup hierarchy (cgroup v2)"
    return None


def usable(version: int) -> bool:
    """Whether ``--systemd-cgroup`` makes a new job a systemd scope on this host; where it
    cannot, the path is mapped onto cgroupfs, and a warning says why."""
    why = unavailable(version)
    if why is not None:
        log.warning(f"--systemd-cgroup: {why}; the job's cgroup is made on cgroupfs")
        return False
    return True


def unit_of(path: str) -> tuple[str, str]:
    """(slice, unit) of a job's cgroup path as ``resolve_path`` maps ``slice:prefix:name``:
    ``/system.slice/hostjob-t1.scope`` -> (``system.slice``, ``hostjob-t1.scope``)."""
    parent, _, unit = path.rstrip("/").rpartition("/")
    if not unit.endswith(".scope"):
        raise CgroupError(f"cgroup path {path} names no systemd scope")
    slice_name = parent.rpartition("/")[2] or "-.slice"
    return slice_name, unit


# --- resources as unit properties -----------------------------------------------------------


def _cpu_mask(text: str) -> bytes:
    """``0-2,5`` -> the bitmask systemd takes for AllowedCPUs/AllowedMemoryNodes."""
    bits = 0
    for part in text.split(","):
        part = part.strip()
        if not part:
            continue
        low, dash, high = part.partition("-")
        if not (low + high).isascii() or not low.isdigit() or (dash and not high.isdigit()):
            raise CgroupError(f"invalid CPU or memory-node list {text!r}")
        first, last = int(low), int(high or low)
        if not first <= last < MAX_CPUS:  # the kernel's own limit: a bound on the mask
            raise CgroupError(f"invalid CPU or memory-node list {text!r}")
        for n in range(first, last + 1):
            bits |= 1 << n
    return bits.to_bytes((bits.bit_length() + 7) // 8 or 1, "little")


def _limit(value: int) -> int:
    return INFINITY if value < 0 else value


def split(resources: Resources | None) -> tuple[list[Property], Resources | None]:
    """(the unit properties systemd has for ``resources``, what is left of them for the
    cgroup's files). The conversions are the v2 manager's own (``cgroups.resources``)."""
    from hostjob.cgroups import resources as convert
    from hostjob.spec.resources import Resources as Model

    if resources is None:
        return [], None
    data = resources.to_json()
    props: list[Property] = []
    memory = data.get("memory") or {}
    limit, swap = memory.get("limit") or 0, memory.get("swap") or 0
    if limit:
        props.append(("MemoryMax", ("t", _limit(limit))))
    if memory.get("reservation"):
        props.append(("MemoryLow", ("t", _limit(memory["reservation"]))))
    if swap or limit == -1:
        swap_max = convert.memory_swap_to_v2(swap, limit)
        if swap_max:
            props.append(("MemorySwapMax", ("t", _limit(swap_max))))
    for key in ("limit", "reservation", "swap"):
        memory.pop(key, None)
    pids = data.get("pids") or {}
    if pids.get("limit") is not None:
        props.append(("TasksMax", ("t", INFINITY if pids["limit"] <= 0 else pids["limit"])))
        pids.pop("limit")
    cpu = data.get("cpu") or {}
    if cpu.get("shares") and not cpu.get("idle"):
        props.append(("CPUWeight", ("t", convert.cpu_shares_to_weight(cpu.pop("shares")))))
    quota, period = cpu.get("quota") or 0, cpu.get("period") or 0
    if quota:
        period_used = period or 100_000
        per_sec = INFINITY if quota < 0 else quota * 1_000_000 // period_used
        props.append(("CPUQuotaPerSecUSec", ("t", per_sec)))
        if period:
            props.append(("CPUQuotaPeriodUSec", ("t", period)))
        cpu.pop("quota", None)
        cpu.pop("period", None)
    for key, prop in (("cpus", "AllowedCPUs"), ("mems", "AllowedMemoryNodes")):
        if cpu.get(key):
            props.append((prop, ("ay", _cpu_mask(cpu.pop(key)))))
    io = data.get("blockIO") or {}
    if io.get("weight"):
        props.append(("IOWeight", ("t", convert.blkio_weight_to_io_weight(io.pop("weight")))))
    for key, prop, field in (
        ("throttleReadBpsDevice", "IOReadBandwidthMax", "rate"),
        ("throttleWriteBpsDevice", "IOWriteBandwidthMax", "rate"),
        ("throttleReadIOPSDevice", "IOReadIOPSMax", "rate"),
        ("throttleWriteIOPSDevice", "IOWriteIOPSMax", "rate"),
        ("weightDevice", "IODeviceWeight", "weight"),
    ):
        devices = io.pop(key, None) or []
        entries = [
            (f"/dev/block/{d['major']}:{d['minor']}", int(d[field]))
            for d in devices
            if d.get(field) is not None
        ]
        if entries:
            props.append((prop, ("a(st)", entries)))
    rest = Model.decode({k: v for k, v in data.items() if v not in ({}, None)}, "resources")
    return props, rest


# --- the unit's life ------------------------------------------------------------------------


def _connect() -> Connection:
    from hostjob.cgroups import dbus

    conn = dbus.system_bus()
    try:
        # JobRemoved is sent to subscribed clients only; on the system bus, match it too.
        if not conn.peer_to_peer:
            rule = f"type='signal',interface='{MANAGER}',member='JobRemoved'"
            conn.call("org.freedesktop.DBus", "/org/freedesktop/DBus", "org.freedesktop.DBus",
                      "AddMatch", "s", [rule])  # fmt: skip
        conn.call(DESTINATION, MANAGER_PATH, MANAGER, "Subscribe")
    except BaseException:
        conn.close()
        raise
    return conn


def _wait_job(conn: Connection, job: str, what: str) -> None:
    """Wait for systemd's job ``job`` to finish; its result must be ``done``."""
    import time

    deadline = time.monotonic() + JOB_WAIT
    while True:
        signal = conn.wait_signal(MANAGER, "JobRemoved", max(0.1, deadline - time.monotonic()))
        _id, path, unit, result = signal.body
        if path == job:
            if result != "done":
                raise CgroupError(f"systemd could not {what} {unit}: the job's result is {result}")
            return


def placer(
    path: str, description: str, resources: Resources | None, manager: Manager
) -> Callable[[int], None]:
    """How a new job's forked init gets into its job under this driver: systemd starts
    the scope with it, then what systemd has no property for is written to the cgroup."""

    def place(pid: int) -> None:
        rest = start(path, pid, description, resources)
        if rest is not None and rest.to_json():
            manager.update(rest)

    return place


def start(path: str, pid: int, description: str, resources: Resources | None) -> Resources | None:
    """Start the transient scope of the job's cgroup ``path`` with the process ``pid`` in it
    and ``resources``' unit properties; what is left of them for the cgroup's files."""
    from hostjob.cgroups.dbus import DBusError

    slice_name, unit = unit_of(path)
    props, rest = split(resources)
    props = [
        ("Description", ("s", description)),
        ("Slice", ("s", slice_name)),
        ("Delegate", ("b", True)),
        ("PIDs", ("au", [pid])),
        ("DefaultDependencies", ("b", False)),
        ("MemoryAccounting", ("b", True)),
        ("CPUAccounting", ("b", True)),
        ("IOAccounting", ("b", True)),
        ("TasksAccounting", ("b", True)),
        *props,
    ]
    try:
        with _connect() as conn:
            (job,) = conn.call(DESTINATION, MANAGER_PATH, MANAGER, "StartTransientUnit",
                               "ssa(sv)a(sa(sv))", [unit, "fail", props, []])  # fmt: skip
            _wait_job(conn, job, "start")
    except DBusError as err:
        if err.name == "org.freedesktop.systemd1.UnitExists":
            raise CgroupError(f"the systemd unit {unit} exists already") from err
        raise CgroupError(f"cannot start the systemd scope {unit}: {err}") from err
    return rest


def set_properties(path: str, resources: Resources) -> Resources | None:
    """``update``: the unit properties of ``resources`` set on the running scope (at
    run time, not persisted); what is left for the cgroup's files."""
    from hostjob.cgroups.dbus import DBusError

    _slice, unit = unit_of(path)
    props, rest = split(resources)
    if props:
        try:
            with _connect() as conn:
                conn.call(DESTINATION, MANAGER_PATH, MANAGER, "SetUnitProperties",
                          "sba(sv)", [unit, True, props])  # fmt: skip
        except DBusError as err:
            raise CgroupError(f"cannot update the systemd scope {unit}: {err}") from err
    return rest


def stop(path: str) -> None:
    """Stop the job's scope (gone already is fine) and reset it: a scope whose processes
    were killed would stay listed as failed."""
    from hostjob.cgroups.dbus import DBusError

    _slice, unit = unit_of(path)
    try:
        with _connect() as conn:
            try:
                (job,) = conn.call(DESTINATION, MANAGER_PATH, MANAGER, "StopUnit",
                                   "ss", [unit, "replace"])  # fmt: skip
                _wait_job(conn, job, "stop")
            except DBusError as err:
                if err.name != "org.freedesktop.systemd1.NoSuchUnit":
                    raise
            try:
                conn.call(DESTINATION, MANAGER_PATH, MANAGER, "ResetFailedUnit", "s", [unit])
            except DBusError as err:
                if err.name not in (
                    "org.freedesktop.systemd1.NoSuchUnit",
                    "org.freedesktop.systemd1.LoadFailed",
                ):
                    raise
    except DBusError as err:
        raise CgroupError(f"cannot stop the systemd scope {unit}: {err}") from err


# --- a job under the unit that runs hostjob -------------------------------------------------

UNIT_SUFFIXES = (".service", ".scope")
SUPERVISOR = "supervisor"  # the delegated unit's sub-cgroup that hostjob's own process moves to


def unit_cgroup() -> str | None:
    """This process's cgroup (``/system.slice/svc1.service``) when it is a systemd unit's
    own cgroup on cgroup v2 (a service or a scope that runs hostjob); None elsewhere (no
    systemd, v1 or hybrid, a cgroup below a unit's)."""
    if not booted():
        return None
    try:
        with open("/proc/self/cgroup", "rb") as f:
            lines = f.read().decode(errors="replace").splitlines()
    except OSError:
        return None
    own = next((line[3:] for line in lines if line.startswith("0::")), "")
    if len(lines) != 1 or not own.endswith(UNIT_SUFFIXES):
        return None
    return own


def delegates(unit_path: str) -> bool:
    """Whether the unit whose cgroup is ``unit_path`` delegates it (``Delegate=yes``):
    then its subtree is its processes' to manage, and a job it runs belongs in it, so
    that ``journalctl -u`` files the job's output under the unit and ``systemctl status``
    lists its processes."""
    directory = "/sys/fs/cgroup" + unit_path
    for name in ("trusted.delegate", "user.delegate"):  # systemd 251 and later mark it
        try:
            if posix.getxattr(directory, name) == b"1":
                return True
        except OSError:
            pass
    return _unit_delegates(unit_path.rpartition("/")[2])


def _unit_delegates(unit: str) -> bool:
    """Whether systemd says ``unit`` has ``Delegate=yes`` (systemd before 251 marks no
    cgroup: asked over D-Bus)."""
    from hostjob.cgroups.dbus import DBusError, system_bus

    kind = "Service" if unit.endswith(".service") else "Scope"
    try:
        with system_bus() as conn:
            (path,) = conn.call(DESTINATION, MANAGER_PATH, MANAGER, "GetUnit", "s", [unit])
            ((_sig, value),) = conn.call(
                DESTINATION, path, "org.freedesktop.DBus.Properties", "Get", "ss",
                [f"org.freedesktop.systemd1.{kind}", "Delegate"],
            )  # fmt: skip
    except (DBusError, ValueError):
        return False
    return value is True


def writes_to_journal(fds: tuple[int, ...] = (1, 2)) -> bool:
    """Whether this process's stdout or stderr is the journal stream systemd gave its
    unit (``$JOURNAL_STREAM`` names that stream as ``device:inode``): only then does
    where the job's cgroup lies decide whose output journald files the lines under. A
    unit whose output goes elsewhere (cron's pipe, a file) has nothing to lose."""
    from hostjob.boot.env import getenv

    device, _, inode = (getenv("JOURNAL_STREAM") or "").partition(":")
    if not (device + inode).isascii() or not device.isdigit() or not inode.isdigit():
        return False
    for fd in fds:
        try:
            st = posix.fstat(fd)
        except OSError:
            continue
        if (st.st_dev, st.st_ino) == (int(device), int(inode)):
            return True
    return False


def leave_unit_root(unit_cgroup: str) -> bool:
    """Move this process out of its unit's own cgroup into ``<unit>/supervisor``, so that
    the unit's cgroup may hand controllers down to the job's (cgroup v2 allows that only
    to a cgroup that holds no process itself). False when other processes are left
    there (the unit runs more than hostjob at its top: a shell that runs it): the job's
    cgroup then cannot live in the unit with limits."""
    directory = "/sys/fs/cgroup" + unit_cgroup
    supervisor = f"{directory}/{SUPERVISOR}"
    try:
        posix.mkdir(supervisor, 0o755)
    except FileExistsError:
        pass
    fd = posix.open(f"{supervisor}/cgroup.procs", posix.O_WRONLY | posix.O_CLOEXEC)
    try:
        posix.write(fd, b"0")
    finally:
        posix.close(fd)
    with open(f"{directory}/cgroup.procs", "rb") as f:
        return not f.read().split()


def job_path_in_unit(container_id: str) -> str | None:
    """A new job's cgroup inside the systemd unit that runs this command, where the unit
    delegates its cgroup (a generated unit, or ``systemd-run -p Delegate=yes``): then
    ``journalctl -u UNIT`` shows the job's output (journald files each line under the
    writer's cgroup) and ``systemctl status UNIT`` its processes. None elsewhere."""
    unit = unit_cgroup()
    if unit is None:
        return None
    if not delegates(unit):
        # A session's scope is no service's output; a service whose output is not the
        # journal (cron's pipe, a file) loses nothing either.
        if unit.endswith(".service") and writes_to_journal():
            log.warning(
                f"the systemd unit of {unit} does not delegate its cgroup (Delegate=yes):"
                " the job's cgroup is made outside it, and journalctl -u will not show"
                " its output"
            )
        return None
    if not leave_unit_root(unit):
        log.warning(
            f"the systemd unit's cgroup {unit} holds other processes than hostjob: the"
            " job's cgroup is made outside it, and journalctl -u will not show its output"
        )
        return None
    return f"{unit}/{container_id}"
