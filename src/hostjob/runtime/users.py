"""Who else a job's user is: ``--user auto`` (a uid and gid of the container's own) and
the warning when a job shares its uid with another running job.

A process may read the environment (``/proc/PID/environ``) of every process of its uid,
trace it and signal it: two jobs of one uid are one identity. ``--user auto`` (the
``io.hostjob.user: auto`` annotation) gives each container a number of a reserved range
as both its uid and its gid, with no supplementary groups and no passwd entry (systemd's
``DynamicUser=`` without the account). The allocation *is* the container's record:
``create`` picks the number under the state root's lock, having read every other
record, and writes its own record with it before the lock is released; ``delete``
frees it by removing the record, and so does ``delete --force`` after a crash. A number
is never one the host's passwd or group names, nor one a process on the host runs as.
The search starts at a random number of the range: a freed number is no likelier to
come back next than any other (what a deleted job left behind as its uid -- a file in
``/tmp`` -- reaches a later job only if that one draws the same number, one chance in
the range's size), and nothing but the records is kept.

Loaded by ``create`` only when a container asks for it or runs as a uid other than 0.
"""

from __future__ import annotations

import grp
import posix
import pwd

from hostjob import log
from hostjob.boot.env import getenv
from hostjob.errors import HostjobError, InvalidArgument, StateCorrupt
from hostjob.runtime import proc

TYPE_CHECKING = False
if TYPE_CHECKING:
    from hostjob.runtime.record import Record, StateStore
    from hostjob.specconv.jobconfig import JobConfig

# Above every distribution's system and login ranges and below 2^31 (tools that take a
# uid as a signed 32-bit number stay right): a million numbers.
DEFAULT_RANGE = (2_000_000_000, 2_000_999_999)
RANGE_ENV = "HOSTJOB_AUTO_USER_RANGE"
# (uid_t)-1 means "unchanged" to setuid(2) and friends: never a user.
_NO_ID = 2**32 - 1
# A range the host's passwd and group fill this far is refused rather than searched on.
_MAX_NAMED = 65536
_STATUS_BYTES = 8192


def parse_range(text: str, what: str = "--auto-user-range") -> tuple[int, int]:
    """``FIRST-LAST`` (inclusive) as numbers; 0 and (uid_t)-1 are never in it."""
    first, sep, last = text.strip().partition("-")
    if not sep or not (first + last).isascii() or not first.isdigit() or not last.isdigit():
        raise InvalidArgument(f"{what} {text!r}: expected FIRST-LAST, e.g. 2000000000-2000999999")
    low, high = int(first), int(last)
    if not 0 < low <= high < _NO_ID:
        raise InvalidArgument(
            f"{what} {text!r}: the numbers must rise and lie between 1 and {_NO_ID - 1}"
        )
    return low, high


def configured_range(given: str | None) -> tuple[int, int]:
    """The range ``--auto-user-range`` gives, else ``$HOSTJOB_AUTO_USER_RANGE``, else the
    default."""
    if given:
        return parse_range(given)
    from_env = getenv(RANGE_ENV)
    if from_env:
        return parse_range(from_env, RANGE_ENV)
    return DEFAULT_RANGE


def allocate(store: StateStore, container_id: str, span: tuple[int, int]) -> int:
    """A number of ``span`` for ``container_id`` to use as uid and gid. The caller holds
    the state root's lock until its record, holding the number, is written."""
    low, high = span
    held = _held(store, container_id)
    running = _process_ids()
    size = high - low + 1
    start = int.from_bytes(posix.urandom(8), "little") % size
    named = 0
    for step in range(size):
        number = low + (start + step) % size
        if number in held or number in running:
            continue
        if _named(number):
            named += 1
            if named >= _MAX_NAMED:
                break
            continue
        return number
    raise HostjobError(
        f"--user auto: no free uid left in {low}-{high} (held by containers, running"
        " processes or the host's passwd and group); delete containers or give a wider"
        " --auto-user-range"
    )


def assign(store: StateStore, record: Record, span: tuple[int, int]) -> None:
    """``--user auto`` for the container of ``record``: a uid (and the same gid) of its
    own, no groups -- or, for a user that names a group (``wants_own_uid``), that group
    as its one supplementary group. Picked under the state root's lock with every other
    record read, and recorded before the lock goes: the record holds it until delete
    removes the record."""
    process = record.config.process
    group = named_group(process.username) if process.uid is None else None
    with store.lock_shared_paths():
        number = allocate(store, record.id, span)
        process.uid = process.gid = number
        process.additional_gids = [group] if group is not None else []
        process.username = None
        store.write(record)


def wants_own_uid(job: JobConfig) -> bool:
    """Whether ``create`` allocates the job a uid of its own: ``--user auto``, or a user
    given by the name of a host group that is no user's (hcsshim's form of a user:
    hcsshim makes a fresh account in that group for each container). Such a job is then
    marked ``auto_user``: a uid and gid of its own, the group as its supplementary
    group, never one identity shared by every job of the group."""
    process = job.process
    if job.auto_user:
        return True
    if job.inherit_user or process.uid is not None or named_group(process.username) is None:
        return False
    job.auto_user = True
    return True


def named_group(username: str | None) -> int | None:
    """The gid of the host group ``username`` (``name`` or ``name:group``) names, when
    its name is a group's and not a user's; None otherwise (a user, a number, nothing
    known: the launch plan resolves or refuses those)."""
    if not username:
        return None
    name = username.partition(":")[0]
    if not name or name.isdigit() or "\0" in name:
        return None
    try:
        pwd.getpwnam(name)
        return None
    except (KeyError, ValueError, UnicodeError):
        pass
    try:
        return grp.getgrnam(name).gr_gid
    except (KeyError, ValueError, UnicodeError):
        return None


def _others(store: StateStore, container_id: str) -> list[Record]:
    records = []
    for other in store.ids():
        if other == container_id:
            continue
        try:
            record = store.read(other)
        except (StateCorrupt, HostjobError, OSError):
            continue  # being deleted, or damaged: its processes still count (_process_ids)
        if record is not None:
            records.append(record)
    return records


def _held(store: StateStore, container_id: str) -> set[int]:
    """The uids and gids the other containers of the state root are to run as."""
    held: set[int] = set()
    for record in _others(store, container_id):
        process = record.config.process
        held.update(n for n in (process.uid, process.gid) if n is not None)
    return held


def _process_ids() -> set[int]:
    """Every uid and gid (real, effective, saved, filesystem) a process on the host
    runs as (a zombie runs as nobody: a deleted job's init may stay one for a while
    where the host's PID 1 is slow to reap the orphans it is given)."""
    found: set[int] = set()
    for name in posix.listdir("/proc"):
        if name.isdigit():
            ids = _ids_of(int(name))
            if ids is not None:
                found.update(ids[0])
                found.update(ids[1])
    return found


def _ids_of(pid: int) -> tuple[list[int], list[int]] | None:
    """(uids, gids) of ``/proc/PID/status``; None when the process is gone or a
    zombie."""
    try:
        fd = posix.open(f"/proc/{pid}/status", posix.O_RDONLY | posix.O_CLOEXEC)
    except OSError:
        return None
    try:
        data = posix.read(fd, _STATUS_BYTES)
    except OSError:
        return None
    finally:
        posix.close(fd)
    uids: list[int] = []
    gids: list[int] = []
    for line in data.split(b"\n"):
        if line.startswith(b"State:") and line[6:].split()[:1] in ([b"Z"], [b"X"]):
            return None
        if line.startswith(b"Uid:"):
            uids = [int(n) for n in line[4:].split()]
        elif line.startswith(b"Gid:"):
            gids = [int(n) for n in line[4:].split()]
    return uids, gids


def _named(number: int) -> bool:
    """Whether the host's passwd or group (through NSS) names ``number``."""
    try:
        pwd.getpwuid(number)
        return True
    except KeyError:
        pass
    try:
        grp.getgrgid(number)
        return True
    except KeyError:
        return False


def sharing(store: StateStore, container_id: str, uid: int) -> list[str]:
    """The other containers of the state root whose init (alive) runs as ``uid``."""
    found = []
    for record in _others(store, container_id):
        if not record.pid or not proc.is_alive(record.pid, record.start_time):
            continue
        ids = _ids_of(record.pid)
        if ids is not None and ids[0] and ids[0][0] == uid:
            found.append(record.id)
    return found


def warn_if_shared(store: StateStore, container_id: str, uid: int) -> None:
    """One warning line when a running job of the state root already runs as ``uid``
    (not root: root is every job's and the host's anyway). Written to ``--log``, and
    without one to stderr: it is for the operator, who asked for nothing wrong."""
    if uid == 0:
        return
    others = sharing(store, container_id, uid)
    if others:
        named = ", ".join(others[:3]) + (f" and {len(others) - 3} more" if len(others) > 3 else "")
        log.warning(
            f"container {container_id} runs as uid {uid}, as the running container"
            f" {named} does: jobs of one uid can read each other's environment and signal"
            " each other; --user auto gives each job a uid of its own",
            stderr=True,
        )


def warn_if_shared_running(store: StateStore, container_id: str) -> None:
    """``warn_if_shared`` for a container created elsewhere (by ``run -d``'s watcher),
    with its init's uid as ``/proc`` tells it."""
    try:
        record = store.read(container_id)
    except HostjobError:
        return
    if record is None or not record.pid or record.config.auto_user:
        return
    ids = _ids_of(record.pid)
    if ids is not None and ids[0]:
        warn_if_shared(store, container_id, ids[0][0])
