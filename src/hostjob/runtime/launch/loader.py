"""The image's program runs as the image built it: through the image's own loader, with
the image's own libraries.

The kernel resolves a program's ELF interpreter (``PT_INTERP``) against the host's
``/``, and that loader finds the libraries the program needs in the host's
directories: an image's program would run against the host's C library, nearly
always older than the image's. So when the program hostjob starts (the init, an
``exec``) lies in the image and is a dynamically linked ELF whose interpreter the
image holds, ``prepare`` executes that loader instead, giving it the image's library
path (``hostjob.runtime.launch.libraries``) on its command line, never through the
environment: what the program starts inherits nothing and resolves on the host, with
the host's libraries. A ``#!`` script of the image whose interpreter the image holds
gets that interpreter by the same rule (``#!/usr/bin/env NAME`` looks ``NAME`` up as a
bare program name is looked up: the image's ``PATH`` first).

What the program sees of itself stays right: its ``argv[0]`` is its path on the host
(the mount point, the directory it was found in resolved inside the image, the name
it was called by: a multi-call program's link keeps its name), so a program that
finds its files from where it was started (Python's standard library) finds the
image's. ``/proc/self/exe`` and the process name are the loader's.

A program the image's loader cannot start is create's error, in one line: a loader
neither the image nor the host holds, a library missing from the image's
directories, another architecture's program, a ``#!`` interpreter found nowhere.
Anything else -- a static program, a program of the host, one whose loader only the
host has, a set-user-ID program, a file the user may execute but not read -- is
executed by the kernel as before. ``io.hostjob.loader: host`` turns all of this off.
"""

from __future__ import annotations

import posix
import sys

from hostjob.boot import paths
from hostjob.errors import StartError
from hostjob.runtime.launch.program import (
    HEAD_BYTES,
    HOST_MACHINES,
    find_program_named,
    in_root,
    native_static,
    seen,
    shebang,
)

TYPE_CHECKING = False
if TYPE_CHECKING:
    from hostjob.runtime.launch.elf import Elf
    from hostjob.runtime.launch.libraries import Resolver
    from hostjob.runtime.launch.plan import LaunchPlan

# hostjob.runtime.launch.elf and .libraries are imported where a program is not a
# static one of this machine (``native_static``, on the bytes already read): a script
# whose interpreter is static loads only this module.

IMAGE = "image"
HOST = "host"
LOADERS = (IMAGE, HOST)

MAX_SCRIPT_DEPTH = 4  # #! interpreters that are scripts themselves, as the kernel allows
_SETID = 0o6000


def prepare(plan: LaunchPlan, program: str, named: str) -> tuple[str, list[str]]:
    """What to ``execve`` for the program found at ``program`` (a host path, its
    symlinks resolved; ``named``: the path it was called by, its last part as named),
    with ``plan.args``: (path, argv)."""
    root = plan.mount_point.rstrip("/") or "/"
    if root == "/" or not program.startswith(root + "/"):
        return program, plan.args
    launch = _Launch(plan, root)
    try:
        return launch.run(program, named, list(plan.args), 0)
    except StartError as err:
        raise StartError(f'exec: "{plan.args[0]}": {err}') from err


class _Launch:
    __slots__ = ("_resolver", "plan", "root")

    def __init__(self, plan: LaunchPlan, root: str) -> None:
        self.plan = plan
        self.root = root
        self._resolver: Resolver | None = None

    @property
    def resolver(self) -> Resolver:
        if self._resolver is None:
            from hostjob.runtime.launch.libraries import Resolver

            self._resolver = Resolver(self.root)
        return self._resolver

    def image_path(self, host_path: str) -> str:
        return host_path[len(self.root) :] if host_path.startswith(self.root + "/") else host_path

    def run(self, program: str, named: str, argv: list[str], depth: int) -> tuple[str, list[str]]:
        """(path, argv) for ``program``: itself, its loader or its interpreter."""
        if not program.startswith(self.root + "/"):
            return program, argv
        seen.append(program)
        try:
            fd = posix.open(program, posix.O_RDONLY | posix.O_CLOEXEC | posix.O_NONBLOCK)
        except OSError:
            return program, argv  # executable, not readable: the kernel runs it as before
        try:
            head = posix.pread(fd, HEAD_BYTES, 0)
            if head.startswith(b"#!"):
                return self._script(program, named, argv, head, depth)
            if head[:4] != b"\x7fELF" or native_static(head):
                return program, argv
            from hostjob.runtime.launch import elf as elf_file

            try:
                found = elf_file.parse(fd, head)
            except elf_file.ElfError:
                return program, argv  # the kernel's own verdict, at exec
            _check_machine(found, head, self.image_path(program))
            if found.interpreter is None or _privileged(fd):
                return program, argv
            return self._through_loader(program, named, argv, found)
        except OSError:
            return program, argv
        finally:
            posix.close(fd)

    def _through_loader(
        self, program: str, named: str, argv: list[str], found: Elf
    ) -> tuple[str, list[str]]:
        from hostjob.runtime.launch import libraries

        interpreter = found.interpreter
        assert interpreter is not None
        loader = self.resolver.key(interpreter)
        if not paths.exists(loader):
            if paths.exists(interpreter):
                return program, argv  # the host's loader, as the kernel finds it
            raise StartError(f"its loader {interpreter} is in neither the image nor the host")
        loader_elf = _read_loader(loader, interpreter)
        if not loader_elf.same_abi(found):
            from hostjob.runtime.launch.probe import machine_name

            raise StartError(
                f"its loader {interpreter} is an {machine_name(loader_elf)} file, the"
                f" program an {machine_name(found)} one"
            )
        kind = _kind(interpreter, loader_elf)
        env_dirs, system_dirs = libraries.search_path(
            self.resolver,
            kind,
            found,
            paths.dirname(loader),
            interpreter,
            _library_path(self.plan.env, self.root),
        )
        own_names = (paths.basename(interpreter), loader_elf.soname or "")
        search = [*env_dirs, *system_dirs]
        extra = libraries.check_closure(self.resolver, kind, program, found, own_names, search)
        dirs = [*env_dirs, *(d for d in extra if d not in env_dirs), *system_dirs]
        for directory in dirs:
            if ":" in directory or "$" in directory:
                raise StartError(
                    f"the library directory {directory} has a ':' or '$' in its host path,"
                    " which a loader's library path cannot hold (io.hostjob.loader: host"
                    " runs the program with the host's loader)"
                )
        command = [self.root + interpreter]
        modern = kind == libraries.MUSL or _glibc_minor(loader_elf.strings) >= 34
        if kind == libraries.GLIBC and modern:
            command.append("--inhibit-cache")
        command += ["--library-path", ":".join(dirs)]
        shown = self.shown(named)
        target = program
        if shown != program:
            seen.append(shown)
            if paths.dirname(shown) == paths.dirname(program) and paths.realpath(shown) == program:
                target = shown  # the link leads where it leads inside the image too
            elif modern if kind == libraries.GLIBC else _musl_argv0(loader):
                command += ["--argv0", shown]
        return loader, [*command, target, *argv[1:]]

    def _script(
        self, program: str, named: str, argv: list[str], head: bytes, depth: int
    ) -> tuple[str, list[str]]:
        """A ``#!`` script of the image: its interpreter from the image if the image
        has it (the kernel would take the host's), else as the kernel runs it."""
        interpreter, argument = shebang(head)
        if depth >= MAX_SCRIPT_DEPTH or not interpreter.startswith("/"):
            return program, argv
        inside = in_root(self.root, interpreter)
        if not paths.exists(inside):
            if paths.exists(interpreter):
                return program, argv  # the host's interpreter, as the kernel finds it
            raise StartError(
                f"its interpreter {interpreter} (#!) is in neither the image nor the host"
            )
        rest = [program, *argv[1:]]
        if paths.basename(interpreter) == "env" and _bare_name(argument):
            plan = self.plan
            found, found_named = find_program_named(
                argument, plan.cwd, plan.path_value(), plan.mount_point, plan.image_path
            )
            return self.run(found, found_named, [self.shown(found_named), *rest], depth + 1)
        named_interpreter = self.shown(self.root + interpreter)
        command = [named_interpreter, *([argument] if argument else []), *rest]
        return self.run(inside, named_interpreter, command, depth + 1)

    def shown(self, named: str) -> str:
        """The path a program is shown as (its ``argv[0]``): its directory resolved
        inside the image, its own name kept."""
        if not named.startswith(self.root + "/"):
            return named
        directory, name = paths.split(named[len(self.root) :])
        resolved = (
            self._resolver.key(directory) if self._resolver else in_root(self.root, directory)
        )
        return paths.join(resolved, name)


def _bare_name(word: str) -> bool:
    """A name ``env`` would look up in PATH (no option, assignment, path or blank)."""
    return bool(word) and not word.startswith("-") and not any(c in word for c in "=/ \t")


def _library_path(env: list[str], root: str) -> str:
    """The environment's ``LD_LIBRARY_PATH``, its entries as paths of the image (an
    entry under the mount point -- a substituted one -- is made a path of the image)."""
    value = ""
    for entry in env:
        if entry.startswith("LD_LIBRARY_PATH="):
            value = entry[len("LD_LIBRARY_PATH=") :]
    parts = []
    for part in value.replace(";", ":").split(":"):
        if part == root or part.startswith(root + "/"):
            part = part[len(root) :] or "/"
        parts.append(part)
    return ":".join(parts)


def _read_loader(loader: str, interpreter: str) -> Elf:
    from hostjob.runtime.launch import elf as elf_file

    try:
        fd = posix.open(loader, posix.O_RDONLY | posix.O_CLOEXEC | posix.O_NONBLOCK)
    except OSError as err:
        raise StartError(f"cannot read its loader {interpreter}: {err.strerror}") from err
    try:
        found = elf_file.read(fd)
    except (OSError, elf_file.ElfError) as err:
        raise StartError(f"its loader {interpreter} is not a valid ELF file: {err}") from err
    finally:
        posix.close(fd)
    if found is None:
        raise StartError(f"its loader {interpreter} is not an ELF file")
    return found


def _kind(interpreter: str, loader: Elf) -> str:
    """Which loader's command line this is: glibc's or musl's."""
    from hostjob.runtime.launch import libraries

    if paths.basename(interpreter).startswith("ld-musl-"):
        return libraries.MUSL
    if b"GLIBC_" in loader.strings:
        return libraries.GLIBC
    raise StartError(
        f"its loader {interpreter} is neither glibc's nor musl's, whose command lines"
        " hostjob knows (io.hostjob.loader: host runs the program as the kernel would)"
    )


def _glibc_minor(strings: bytes) -> int:
    """The newest ``GLIBC_2.N`` version a glibc loader defines: 34 and later take
    ``--argv0`` (2.33) and ``--inhibit-cache`` (2.16), which older ones may not."""
    best = 0
    start = strings.find(b"GLIBC_2.")
    while start >= 0:
        digits = strings[start + 8 : start + 11]
        count = len(digits) - len(digits.lstrip(b"0123456789"))  # its leading digits
        if count:
            best = max(best, int(digits[:count]))
        start = strings.find(b"GLIBC_2.", start + 8)
    return best


def _musl_argv0(loader: str) -> bool:
    from hostjob.runtime.launch.probe import musl_argv0

    return musl_argv0(loader)


def _privileged(fd: int) -> bool:
    """A set-user-ID or set-group-ID program, or one with file capabilities for a user
    who is not root: only the kernel's exec gives it its privileges."""
    if posix.fstat(fd).st_mode & _SETID:
        return True
    if posix.geteuid() == 0:
        return False
    try:
        posix.getxattr(fd, "security.capability")
    except OSError:
        return False
    return True


def _check_machine(found: Elf, head: bytes, where: str) -> None:
    """Another architecture's program runs only through a binfmt_misc handler (qemu)."""
    from hostjob.runtime.launch import elf as elf_file

    machines = HOST_MACHINES.get(posix.uname().machine)
    order = elf_file.LITTLE if sys.byteorder == "little" else elf_file.BIG
    if machines is None or (found.machine in machines and found.byte_order == order):
        return
    from hostjob.runtime.launch import probe

    probe.foreign_program(found, head, where, machines[0])
