"""The container process's program: found as the target user (``find_program``: a bare
name in the image's own PATH first), and whether the kernel runs it as the image built
it (``runs_as_it_is``) or the image's loader must (``hostjob.runtime.launch.loader``).

Run in the child (``hostjob.runtime.launch.child``) after the identity switch, so that
the look-up's permissions are the user's; before it reports ready, so that a program
that cannot start is ``create``'s (or ``exec``'s) error. What a static program of the
image, or any program of the host, costs here is a read of its first bytes: the ELF
reader and the loader's modules load only for a program that needs them.
"""

from __future__ import annotations

import errno
import posix
import sys

from hostjob.boot import paths
from hostjob.errors import StartError

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any, Literal

    from hostjob.runtime.launch.plan import LaunchPlan

HEAD_BYTES = 4096  # a file's first bytes, read once: an ELF file's headers, a #! line

# Every path a look-up touched, in order: what the loader's decision depends on, kept
# with it (``hostjob.runtime.launch.recall`` empties it before the decision).
seen: list[str] = []
# Kept decisions: their format's version; the mark the mount point is kept as (no path
# holds a NUL); the end of their files' names.
DECISIONS_VERSION = 1
MARK = "\0"
DECISIONS_SUFFIX = ".run"
DECISIONS_MAX_BYTES = 1 << 20  # a file of them, written and read at most

# The ELF machines (e_machine) this host runs natively, by its machine (uname).
HOST_MACHINES = {
    "x86_64": (62, 3),
    "aarch64": (183, 40),
    "i686": (3,),
    "i386": (3,),
    "armv7l": (40,),
    "armv8l": (40,),
    "riscv64": (243,),
    "ppc64le": (21,),
    "ppc64": (21,),
    "s390x": (22,),
    "loongarch64": (258,),
}


def runs_as_it_is(plan: LaunchPlan, program: str) -> bool:
    """Whether the kernel runs ``program`` (found by ``find_program``) as the image built
    it: anything of the host's; of the image's, a static ELF program of this host's
    machine, or a file that is neither ELF nor ``#!`` (the kernel's verdict). An image's
    dynamically linked program, one of another machine and a ``#!`` script are the
    loader's to decide."""
    root = plan.mount_point.rstrip("/")
    if not plan.image_loader or not root or not program.startswith(root + "/"):
        return True
    try:
        fd = posix.open(program, posix.O_RDONLY | posix.O_CLOEXEC | posix.O_NONBLOCK)
    except OSError:
        return True  # executable, not readable: the kernel runs it as before
    try:
        head = posix.pread(fd, HEAD_BYTES, 0)
    except OSError:
        return True
    finally:
        posix.close(fd)
    if head.startswith(b"#!"):
        return False
    if head[:4] != b"\x7fELF":
        return True
    return native_static(head)


def native_static(head: bytes) -> bool:
    """Whether ``head``, a file's first bytes, is a static ELF program of this host's
    machine and byte order (no ``PT_INTERP`` among program headers that ``head`` holds)."""
    if len(head) < 64 or head[4] not in (1, 2) or head[5] not in (1, 2):
        return False
    order: Literal["little", "big"] = "little" if head[5] == 1 else "big"
    machine = int.from_bytes(head[18:20], order)
    if order != sys.byteorder or machine not in HOST_MACHINES.get(posix.uname().machine, ()):
        return False
    wide = head[4] == 2
    phoff = int.from_bytes(head[32:40] if wide else head[28:32], order)
    at = 54 if wide else 42
    size, count = (
        int.from_bytes(head[at : at + 2], order),
        int.from_bytes(head[at + 2 : at + 4], order),
    )
    end = phoff + size * count
    if size < (56 if wide else 32) or end > len(head):
        return False  # the reader's to judge
    return all(int.from_bytes(head[i : i + 4], order) != 3 for i in range(phoff, end, size))


def shebang(head: bytes) -> tuple[str, str]:
    """(interpreter, its one argument or "") of a ``#!`` line, split as the kernel
    splits it: the interpreter up to the first blank, the rest, trimmed, one argument."""
    line = head[2:256].split(b"\n", 1)[0].strip(b" \t\r")
    for index, char in enumerate(line):
        if char in b" \t":
            interpreter, argument = line[:index], line[index:].strip(b" \t")
            break
    else:
        interpreter, argument = line, b""
    return (
        interpreter.decode("utf-8", "surrogateescape"),
        argument.decode("utf-8", "surrogateescape"),
    )


def environment(plan: LaunchPlan, listen_fds: int, extra_fds: int) -> list[str]:
    """The program's environment; the fds passed on (socket activation,
    ``--preserve-fds``: ``extra_fds`` of them from 3, the first ``listen_fds`` of them
    announced in ``LISTEN_FDS``) made inheritable."""
    env = plan.env
    if listen_fds:
        env = [
            *(e for e in env if not e.startswith(("LISTEN_FDS=", "LISTEN_PID="))),
            f"LISTEN_FDS={listen_fds}",
            f"LISTEN_PID={posix.getpid()}",
        ]
    for fd in range(3, 3 + extra_fds):
        try:
            posix.set_inheritable(fd, True)
        except OSError as err:
            raise StartError(
                f"cannot pass fd {fd} to the process (LISTEN_FDS/--preserve-fds):"
                f" {err.strerror or err}"
            ) from err
    return env


def exec_error(arg0: str, program: str, err: OSError) -> StartError:
    """The one line for an ``execve`` that failed. ENOENT on a file that exists is its
    loader (``PT_INTERP``) or ``#!`` interpreter, which the kernel looked for on the
    host: named, rather than the file the kernel's message seems to name."""
    if err.errno == errno.ENOENT and paths.exists(program):
        missing = _interpreter_of(program)
        if missing:
            return StartError(f'exec: "{arg0}": {missing} is not on this host')
    return StartError(f'exec: "{arg0}": {err.strerror}')


def _interpreter_of(program: str) -> str:
    """``its loader X`` or ``its interpreter X (#!)`` of ``program``, or ""."""
    from hostjob.runtime.launch import elf

    try:
        fd = posix.open(program, posix.O_RDONLY | posix.O_CLOEXEC | posix.O_NONBLOCK)
    except OSError:
        return ""
    try:
        head = posix.pread(fd, HEAD_BYTES, 0)
        if head.startswith(b"#!"):
            return f"its interpreter {shebang(head)[0]} (#!)"
        found = elf.parse(fd, head) if head[:4] == elf.MAGIC else None
    except (OSError, elf.ElfError):
        return ""
    finally:
        posix.close(fd)
    if found is None or found.interpreter is None:
        return ""
    return f"its loader {found.interpreter}"


def find_program(
    arg0: str, cwd: str, path_value: str, mount_point: str, image_path: str = ""
) -> str:
    """The program ``args[0]`` names: a path with a slash as it says (relative to the
    working directory; an absolute one on the host, else in the image); a bare name in
    the image's own ``PATH`` first (``image_path``: the ``PATH`` of ``process.env``, each
    entry under the mount point), then along ``path_value``, the process's ``PATH``
    (the host's entries first). Raises StartError with runc's messages.

    The image first because an image that names its own program means that one: a
    busybox image's ``top`` is busybox's, not the host's procps ``top`` (which exits at
    once without a terminal). hcsshim likewise searches the sandbox's own directory
    before ``PATH``. The process's ``PATH`` stays host-first for what the program runs."""
    return find_program_named(arg0, cwd, path_value, mount_point, image_path)[0]


def find_program_named(
    arg0: str, cwd: str, path_value: str, mount_point: str, image_path: str = ""
) -> tuple[str, str]:
    """``find_program``'s program, and the path it was called by: for a bare name found
    in the image, the directory it was found in (resolved inside the image) and the name
    itself, a link not followed (``hostjob.runtime.launch.loader`` shows the program
    that path, so that a multi-call program's link keeps its name); else the path."""
    root = mount_point.rstrip("/") or "/"
    if "/" in arg0:
        if not paths.isabs(arg0):
            candidate = paths.join(cwd, arg0)
        elif paths.lexists(arg0):
            candidate = arg0
        else:
            inside = paths.join(mount_point, arg0.lstrip("/"))
            candidate = inside if paths.lexists(inside) else arg0
        named = candidate
        if _under(candidate, root) and candidate != root:
            # A path of the image: its symlinks lead where they lead inside the image
            # (an image's /usr/bin/lua -> /etc/alternatives/lua-interpreter).
            relative = candidate[len(root) :]
            candidate = in_root(root, relative)
            named = paths.join(in_root(root, paths.dirname(relative)), paths.basename(relative))
        _check_executable(arg0, candidate)
        return candidate, named
    image_dirs = [e for e in image_path.split(":") if e.startswith("/")]
    unusable: StartError | None = None  # the first candidate found that cannot run
    for entry, in_image in [(e, True) for e in image_dirs] + [
        (e, False) for e in path_value.split(":")
    ]:
        named = ""
        if in_image or _under(entry, root):
            # A path of the image: its symlinks lead where they lead inside the image.
            relative = entry[len(root) :] if _under(entry, root) else entry
            candidate = in_root(root, paths.join(relative, arg0))
        else:
            candidate = named = paths.join(entry or ".", arg0)
            seen.append(candidate)  # the host's: a decision that reads it is not kept
        if not paths.lexists(candidate):
            continue
        try:
            _check_executable(arg0, candidate)
        except StartError as err:
            # Skipped, as a shell does; reported if nothing better is found.
            unusable = unusable or err
            continue
        return candidate, named or paths.join(in_root(root, relative), arg0)
    if unusable is not None:
        raise unusable
    raise StartError(f'exec: "{arg0}": executable file not found in $PATH')


# The symlinks followed inside one path, at most (the kernel's own limit is 40).
MAX_LINKS = 40


def in_root(root: str, path: str) -> str:
    """``path`` (a path of the image, absolute or not) as the host path under ``root``
    that a process chrooted at ``root`` would reach: every symlink on the way resolved
    relative to ``root`` -- an absolute target starts again at ``root``, ``..`` never
    climbs above it -- so an image's ``/usr/bin/top -> /bin/busybox`` is the image's
    busybox, never the host's ``/bin/busybox``. A part that does not exist is kept as
    written; more than ``MAX_LINKS`` symlinks is ELOOP."""
    import errno

    done: list[str] = []
    rest = [p for p in path.split("/") if p and p != "."]
    rest.reverse()  # a stack: the next part last
    links = 0
    while rest:
        name = rest.pop()
        if name == "..":
            if done:
                done.pop()
            continue
        candidate = paths.join(root, *done, name)
        seen.append(candidate)
        try:
            is_link = posix.lstat(candidate).st_mode & 0o170000 == 0o120000
        except OSError:
            is_link = False
        if not is_link:
            done.append(name)
            continue
        links += 1
        if links > MAX_LINKS:
            raise StartError(
                f"{paths.join(root, *done, name)}: {posix.strerror(errno.ELOOP).lower()}"
            )
        target = posix.readlink(candidate)
        if target.startswith("/"):
            done = []
        parts = [p for p in target.split("/") if p and p != "."]
        rest.extend(reversed(parts))
    return paths.join(root, *done) if done else root


def _under(path: str, root: str) -> bool:
    return root != "/" and (path == root or path.startswith(root + "/"))


def _check_executable(arg0: str, candidate: str) -> None:
    try:
        st = posix.stat(candidate)
    except OSError as err:
        raise StartError(
            f'exec: "{arg0}": stat {candidate}: {(err.strerror or str(err)).lower()}'
        ) from err
    if paths.isdir(candidate):
        raise StartError(f'exec: "{arg0}": is a directory')
    if not (st.st_mode & 0o111) or not posix.access(candidate, posix.X_OK):
        raise StartError(f'exec: "{arg0}": permission denied')


def decision_request(plan: LaunchPlan) -> tuple[Any, ...] | None:
    """What the image loader's decision (``hostjob.runtime.launch.recall``) depends on
    besides the image's files, the mount point made a mark; None when something holds
    a NUL (nothing to mark it by)."""
    root = plan.mount_point.rstrip("/")
    user = plan.user
    library_path = ""
    for entry in plan.env:
        if entry.startswith("LD_LIBRARY_PATH="):
            library_path = entry
    words = (plan.args[0], plan.cwd, plan.path_value(), plan.image_path, library_path)
    if any(MARK in word for word in words):
        return None
    marked = tuple(word.replace(root, MARK) for word in words)
    return (DECISIONS_VERSION, user.uid, user.gid, tuple(user.groups), plan.capabilities, *marked)


def decision_file(request: tuple[Any, ...]) -> str:
    """The request's file: its words' bytes as a number, modulo a prime (binascii and
    zlib are extension modules, whose loading alone would cost a start more than a hit
    saves; two requests that share a file are told apart by their words)."""
    data = repr(request).encode("utf-8", "surrogateescape")
    number = int.from_bytes(data, "little") % 0x1FFFFFFFFFFFFFFF
    return f"{number:016x}-{len(data)}{DECISIONS_SUFFIX}"


def signature(path: str) -> Any:
    """What a path of the image is, as a loader decision read it (``launch.recall`` says
    why each part); a path ending in ``/`` is a directory whose entries were listed."""
    try:
        st = posix.lstat(path)
    except OSError as err:
        return err.errno
    kind = st.st_mode & 0o170000
    if kind == 0o100000:
        return (st.st_ino, st.st_ctime_ns, st.st_size)
    if kind == 0o040000:
        if path.endswith("/"):
            return (st.st_mode, st.st_uid, st.st_gid, st.st_ino, st.st_ctime_ns)
        return (st.st_mode, st.st_uid, st.st_gid)
    if kind != 0o120000:
        return (st.st_mode,)
    try:
        target = posix.readlink(path)
    except OSError as err:
        return (None, err.errno)  # replaced meanwhile
    try:
        st = posix.stat(path)
    except OSError as err:
        return (target, err.errno)
    if st.st_mode & 0o170000 == 0o100000:
        return (target, st.st_ino, st.st_ctime_ns, st.st_size)
    return (target, st.st_mode, st.st_uid, st.st_gid)
