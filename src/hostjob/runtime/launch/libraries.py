"""Where an image's loader finds the image's libraries, and whether it finds them all.

``search_path`` is the library path an image's program is given on the loader's
command line: the ``LD_LIBRARY_PATH`` its environment names, the absolute
``DT_RPATH``/``DT_RUNPATH`` directories of the program and its libraries (which the
loader would otherwise look for on the host), the directories of the image's own
configuration -- glibc's ``/etc/ld.so.conf`` with its ``include``s, musl's
``/etc/ld-musl-ARCH.path`` -- and the loader's built-in directories (the multiarch
ones, ``lib64``, ``lib``), each a path of the image resolved inside it, kept if it is
a directory. Never the host's ``ld.so.cache``: the loader is told to ignore caches.

``check_closure`` then walks what the program needs, library by library, as the
loader will (``DT_RPATH`` of the object unless it has a ``DT_RUNPATH``, the library
path, then ``DT_RUNPATH``, with ``$ORIGIN``), and names the first library that none
of those directories holds: glibc's loader would take it from the host's ``/lib``
without a word, against the image's other libraries.

Everything is read as the container's user, with bounds: the configuration files are
the image's.
"""

from __future__ import annotations

import errno
import posix

from hostjob.boot import paths
from hostjob.errors import StartError
from hostjob.runtime.launch import elf as elf_file
from hostjob.runtime.launch.program import in_root, seen

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Protocol

    from hostjob.runtime.launch.elf import Elf

    class Tree(Protocol):
        """An image's files, as the search reads them: ``Resolver`` (the mounted image,
        as the container's user) or ``hostjob.images.packcheck``'s index of a
        directory being packed. A *key* names a file of the tree (a host path, an
        image path); ``$ORIGIN`` arithmetic is done on keys."""

        def directory(self, image_path: str) -> str | None: ...
        def read_text(self, image_path: str) -> str | None: ...
        def listdir(self, image_path: str) -> list[str]: ...
        def load(self, key: str) -> Elf | None: ...
        def key(self, image_path: str) -> str: ...
        def image_path(self, key: str) -> str: ...


GLIBC = "glibc"
MUSL = "musl"

MAX_CONF_BYTES = 64 * 1024  # one ld.so.conf file, read at most
MAX_CONF_FILES = 64  # ld.so.conf and its includes, at most
MAX_INCLUDE_DEPTH = 8
MAX_OBJECTS = 256  # a program's libraries, checked at most
MAX_LINKS = 40  # symlinks followed in one path, as in_root follows them

# Debian's multiarch names (glibc), by (e_machine, class, byte order).
_TRIPLETS = {
    (62, 2, 1): "x86_64-linux-gnu",
    (3, 1, 1): "i386-linux-gnu",
    (183, 2, 1): "aarch64-linux-gnu",
    (40, 1, 1): "arm-linux-gnueabihf",
    (243, 2, 1): "riscv64-linux-gnu",
    (21, 2, 1): "powerpc64le-linux-gnu",
    (22, 2, 2): "s390x-linux-gnu",
    (258, 2, 1): "loongarch64-linux-gnu",
}

# The names musl's loader answers itself, whatever the directories hold ("libc.so",
# "libpthread.so.0", ...: the libraries glibc splits out are all in musl's libc).
_MUSL_OWN = ("c.", "pthread.", "rt.", "m.", "dl.", "util.", "xnet.")


class Resolver:
    """The mounted image at ``root``, read as the container's user: paths of the image
    resolved inside it (``in_root``), directories each once. Keys are host paths."""

    __slots__ = ("_dirs", "_resolved", "root")

    def __init__(self, root: str) -> None:
        self.root = root
        self._dirs: dict[str, str | None] = {}
        # image path -> host path, its symlinks resolved inside the image: a library
        # search resolves /usr, /lib, /usr/lib/... again and again
        self._resolved: dict[str, str] = {"/": root}

    def key(self, image_path: str) -> str:
        """The host path of ``image_path``: its symlinks resolved inside the image (as
        ``in_root`` resolves them; each directory on the way once)."""
        return self._resolve(_absolute(image_path), 0)

    def _resolve(self, image_path: str, links: int) -> str:
        found = self._resolved.get(image_path)
        if found is not None:
            return found
        # image_path is absolute and normal (_absolute), not "/": split and joined by
        # hand, as this runs for each part of each directory the search resolves.
        parent, _, name = image_path.rpartition("/")
        base = self._resolve(parent or "/", links)
        candidate = f"{base}{name}" if base.endswith("/") else f"{base}/{name}"
        seen.append(candidate)
        try:
            is_link = posix.lstat(candidate).st_mode & 0o170000 == 0o120000
        except OSError:
            is_link = False
        if is_link:
            if links >= MAX_LINKS:
                return in_root(self.root, image_path)  # its ELOOP error
            target = posix.readlink(candidate)
            inside = base[len(self.root) :] if base != self.root else ""
            joined = target if target.startswith("/") else f"{inside}/{target}"
            candidate = self._resolve(_absolute(joined), links + 1)
        self._resolved[image_path] = candidate
        return candidate

    def directory(self, image_path: str) -> str | None:
        found = self.key(image_path)
        if found not in self._dirs:
            self._dirs[found] = found if paths.isdir(found) else None
        return self._dirs[found]

    def image_path(self, key: str) -> str:
        """``key`` as the image sees it (for messages)."""
        if self.root != "/" and key.startswith(self.root + "/"):
            return key[len(self.root) :]
        return key

    def read_text(self, image_path: str) -> str | None:
        """A configuration file of the image (bounded), or None if it cannot be read."""
        try:
            fd = posix.open(
                self.key(image_path), posix.O_RDONLY | posix.O_CLOEXEC | posix.O_NONBLOCK
            )
        except OSError:
            return None
        try:
            if posix.fstat(fd).st_mode & 0o170000 != 0o100000:  # a FIFO, a device: not one
                return None
            return posix.read(fd, MAX_CONF_BYTES).decode("utf-8", "surrogateescape")
        except OSError:
            return None
        finally:
            posix.close(fd)

    def listdir(self, image_path: str) -> list[str]:
        directory = self.directory(image_path)
        if directory is None:
            return []
        seen.append(directory + "/")  # its entries, not only what it is
        try:
            return posix.listdir(directory)
        except OSError:
            return []

    def load(self, key: str) -> Elf | None:
        """The ELF object at the host path ``key`` as the loader opens it, or None."""
        seen.append(key)
        try:
            fd = posix.open(key, posix.O_RDONLY | posix.O_CLOEXEC | posix.O_NONBLOCK)
        except OSError as err:
            if err.errno in (errno.ENOENT, errno.ENOTDIR, errno.EACCES, errno.ELOOP):
                return None
            raise StartError(f"cannot open {self.image_path(key)}: {err.strerror}") from err
        try:
            return elf_file.read(fd)
        except (OSError, elf_file.ElfError):
            return None
        finally:
            posix.close(fd)


def _absolute(image_path: str) -> str:
    """``image_path`` as an absolute, normal path of the image (``..`` stops at ``/``)."""
    if image_path.startswith("/") and "//" not in image_path and "/." not in image_path:
        return image_path.rstrip("/") or "/"
    return "/" + paths.normpath("/" + image_path).lstrip("/")


def search_path(
    resolver: Tree,
    kind: str,
    program: Elf,
    loader_dir: str,
    interpreter: str,
    library_path: str,
) -> tuple[list[str], list[str]]:
    """The directories (host paths) the loader is to search, in order, as two lists:
    the environment's ``LD_LIBRARY_PATH`` (``library_path``, paths of the image), then
    the image's configuration and the loader's own directories."""
    env = [e for e in library_path.replace(";", ":").split(":") if e.startswith("/")]
    if kind == MUSL:
        system = _musl_path(resolver, interpreter)
    else:
        system = _conf_dirs(resolver, "/etc/ld.so.conf", 0, [0])
        system += _glibc_defaults(program, resolver.image_path(loader_dir))
    found: list[str] = []
    env_dirs = _directories(resolver, env, found)
    return env_dirs, _directories(resolver, system, found)


def _directories(resolver: Tree, wanted: list[str], found: list[str]) -> list[str]:
    """The directories of ``wanted`` (image paths) that exist, as host paths, each
    once (``found``: those already taken)."""
    out = []
    for entry in wanted:
        directory = resolver.directory(entry)
        if directory is not None and directory not in found:
            found.append(directory)
            out.append(directory)
    return out


def _glibc_defaults(program: Elf, loader_dir: str) -> list[str]:
    """glibc's built-in directories, as distributions build it: the loader's own
    directory, Debian's multiarch ones, then lib64 (a 64-bit program) and lib."""
    out = [loader_dir]
    triplet = _TRIPLETS.get((program.machine, program.elf_class, program.byte_order))
    if triplet:
        out += [f"/lib/{triplet}", f"/usr/lib/{triplet}"]
    if program.elf_class == elf_file.CLASS64:
        out += ["/lib64", "/usr/lib64"]
    return [*out, "/lib", "/usr/lib"]


def _musl_path(resolver: Tree, interpreter: str) -> list[str]:
    """musl's search path: ``/etc/ld-musl-ARCH.path`` (entries split at ``:`` and
    newlines), else its default."""
    name = paths.basename(interpreter)  # ld-musl-x86_64.so.1
    arch = name[len("ld-musl-") :].split(".so", 1)[0]
    text = resolver.read_text(f"/etc/ld-musl-{arch}.path")
    if text is None:
        return ["/lib", "/usr/local/lib", "/usr/lib"]
    return [e for e in text.replace("\n", ":").split(":") if e.startswith("/")]


def _conf_dirs(resolver: Tree, conf: str, depth: int, count: list[int]) -> list[str]:
    """The directories of the ld.so.conf file ``conf`` (an image path), its ``include``
    lines followed as ldconfig follows them (a relative pattern is relative to the
    file's directory; matches in sorted order); ``hwcap`` lines are ldconfig's only."""
    count[0] += 1
    if depth > MAX_INCLUDE_DEPTH or count[0] > MAX_CONF_FILES:
        return []
    text = resolver.read_text(conf)
    if text is None:
        return []
    out: list[str] = []
    for raw in text.splitlines():
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        words = line.split()
        if words[0] == "include" and len(words) > 1:
            for pattern in words[1:]:
                if not pattern.startswith("/"):
                    pattern = paths.join(paths.dirname(conf), pattern)
                for match in _glob(resolver, pattern):
                    out += _conf_dirs(resolver, match, depth + 1, count)
        elif words[0] != "hwcap":
            # "DIR" or the old "DIR=libc6" form; trailing slashes are the same directory.
            out.append(line.split("=", 1)[0].rstrip() or "/")
    return out


def _glob(resolver: Tree, pattern: str) -> list[str]:
    """The image's files that ``pattern`` (an absolute image path whose last part may
    hold ``*`` and ``?``) names, sorted."""
    directory, name = paths.split(pattern)
    if "*" not in name and "?" not in name:
        return [pattern]
    names = resolver.listdir(directory)
    return [paths.join(directory, n) for n in sorted(names) if name_matches(name, n)]


def name_matches(pattern: str, name: str) -> bool:
    """fnmatch's ``*`` and ``?`` (without ``re``: this runs before the container's
    program); a leading dot is matched only by a leading dot, as glob does."""
    if name.startswith(".") and not pattern.startswith("."):
        return False
    parts = pattern.split("*")
    first, last = parts[0], parts[-1]
    if len(parts) == 1:
        return len(name) == len(pattern) and _fixed(pattern, name)
    if len(name) < len(first) + len(last):
        return False
    if not _fixed(first, name[: len(first)]) or not _fixed(last, name[len(name) - len(last) :]):
        return False
    at, end = len(first), len(name) - len(last)
    for middle in parts[1:-1]:  # each in order, as early as it fits
        while at + len(middle) <= end and not _fixed(middle, name[at : at + len(middle)]):
            at += 1
        if at + len(middle) > end:
            return False
        at += len(middle)
    return True


def _fixed(pattern: str, text: str) -> bool:
    """``text`` is ``pattern``, a ``?`` standing for any one character."""
    if "?" not in pattern:  # nearly always ("*.conf"): no loop
        return text == pattern
    return all(p == "?" or p == c for p, c in zip(pattern, text, strict=True))


# --- the program's libraries ------------------------------------------------------------


def check_closure(
    resolver: Tree,
    kind: str,
    program: str,
    program_elf: Elf,
    loader_names: tuple[str, ...],
    search: list[str],
) -> list[str]:
    """Follow the libraries the program (at the host path ``program``) needs, and
    theirs, as the loader will; raise StartError naming the first one no directory
    holds. Returns the absolute ``DT_RPATH``/``DT_RUNPATH`` directories met (host
    paths), which the loader is to search too: it would look for them on the host."""
    extra: list[str] = []
    queue = [(program, program_elf)]
    seen_files = {program}
    found_names: set[str] = set(loader_names)
    while queue:
        path, obj = queue.pop(0)
        origin = paths.dirname(path)
        rpath = _entries(resolver, obj.rpath, origin, extra) if not obj.runpath else []
        runpath = _entries(resolver, obj.runpath, origin, extra)
        for name in obj.needed:
            if name in found_names or (kind == MUSL and _musl_own(name)):
                continue
            hit = _find(resolver, name, [*rpath, *search, *runpath], program_elf)
            if hit is None:
                needer = resolver.image_path(path)
                raise StartError(
                    f"{name}, which {needer} needs, is in none of the image's library directories"
                )
            found_names.add(name)
            hit_path, hit_elf = hit
            if hit_path not in seen_files:
                seen_files.add(hit_path)
                if len(seen_files) > MAX_OBJECTS:
                    raise StartError(f"more than {MAX_OBJECTS} libraries to load")
                queue.append((hit_path, hit_elf))
    return extra


def _musl_own(name: str) -> bool:
    return name.startswith("lib") and name[3:].startswith(_MUSL_OWN)


def _entries(resolver: Tree, value: str | None, origin: str, extra: list[str]) -> list[str]:
    """The directories of a ``DT_RPATH``/``DT_RUNPATH`` value (host paths): ``$ORIGIN``
    is the object's own directory, an absolute entry a path of the image (also kept in
    ``extra``); entries with the loader's other tokens ($LIB, $PLATFORM) are skipped."""
    out: list[str] = []
    if not value:
        return out
    for entry in value.split(":"):
        expanded = entry.replace("${ORIGIN}", "$ORIGIN")
        if expanded.startswith("$ORIGIN"):
            candidate = paths.normpath(origin + expanded[len("$ORIGIN") :])
            out.append(candidate)
        elif expanded.startswith("/") and "$" not in expanded:
            directory = resolver.directory(expanded)
            if directory is not None:
                out.append(directory)
                if directory not in extra:
                    extra.append(directory)
    return out


def _find(resolver: Tree, name: str, dirs: list[str], program: Elf) -> tuple[str, Elf] | None:
    """The first file ``name`` in ``dirs`` (keys) that is an ELF object the program's
    loader can load (another class or machine is skipped, as the loader skips it)."""
    # Joined one by one: the first directory or two usually hold it.
    for candidate in (
        [resolver.key(name)] if "/" in name else (f"{d.rstrip('/')}/{name}" for d in dirs)
    ):
        found = resolver.load(candidate)
        if found is not None and found.same_abi(program):
            return candidate, found
    return None
