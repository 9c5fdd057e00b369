"""What ``pack`` tells an image's author about the programs it packs: the dynamically
linked ones whose loader or libraries the directory lacks.

A job container runs an image's program through the image's own loader, with the
image's own libraries (``hostjob.runtime.launch.loader``): a program whose loader the
image lacks runs with the host's, if the host has it, and one whose libraries the
image lacks does not start. An author of a ``FROM scratch``-style image learns it
here, at build time, in one warning line.

``TreeIndex`` is filled as the archive walks the directory (``hostjob.images.archive``
hands it every entry and the open descriptor of each regular file it packs: the
directory is read once, fd-relative, its owner may change it meanwhile); it then
answers the library search of ``hostjob.runtime.launch.libraries`` about the tree it
saw, as an image (keys are the image's paths).
"""

from __future__ import annotations

import os
import stat
from typing import TYPE_CHECKING

from hostjob.errors import StartError
from hostjob.runtime.launch import elf as elf_file
from hostjob.runtime.launch import libraries

if TYPE_CHECKING:
    from hostjob.runtime.launch.elf import Elf

MAX_LINKS = 40
MAX_TEXT = 64 * 1024
SHOWN = 3  # programs a warning names


class TreeIndex:
    """The directory being packed, as an image: its entries, the ELF headers of its
    programs and libraries, its loader configuration files."""

    def __init__(self) -> None:
        self.kinds: dict[str, str] = {"/": "d"}  # image path -> "d", "f", "l" or "o"
        self.links: dict[str, str] = {}
        self.children: dict[str, list[str]] = {"/": []}
        self.elfs: dict[str, Elf] = {}
        self.programs: list[str] = []  # executable dynamically linked files
        self.texts: dict[str, str] = {}

    def saw(self, rel: str, st: os.stat_result, fd: int, linkname: str | None) -> None:
        """An entry of the walk: ``rel`` (relative to the directory), its ``lstat``, the
        open file (a regular file's, else -1), a symlink's target."""
        path = "/" + rel
        parent, name = os.path.split(path)
        self.children.setdefault(parent, []).append(name)
        mode = st.st_mode
        if stat.S_ISDIR(mode):
            self.kinds[path] = "d"
            self.children.setdefault(path, [])
        elif stat.S_ISLNK(mode):
            self.kinds[path] = "l"
            self.links[path] = linkname or ""
        elif stat.S_ISREG(mode):
            self.kinds[path] = "f"
            if fd >= 0:
                self._read(path, mode, fd)
        else:
            self.kinds[path] = "o"

    def _read(self, path: str, mode: int, fd: int) -> None:
        name = os.path.basename(path)
        if (
            path == "/etc/ld.so.conf"
            or path.startswith("/etc/ld.so.conf.d/")
            or (path.startswith("/etc/ld-musl-") and path.endswith(".path"))
        ):
            self.texts[path] = os.pread(fd, MAX_TEXT, 0).decode("utf-8", "surrogateescape")
            return
        executable = bool(mode & 0o111)
        if not executable and not (name.endswith(".so") or ".so." in name):
            return
        try:
            found = elf_file.read(fd)
        except (OSError, elf_file.ElfError):
            return
        if found is None:
            return
        self.elfs[path] = found
        if executable and found.interpreter is not None:
            self.programs.append(path)

    # --- the library search's view of the tree (libraries.Tree) --------------------

    def key(self, image_path: str) -> str:
        """``image_path`` with its symlinks resolved inside the tree (a missing part
        kept as written)."""
        done: list[str] = []
        rest = [p for p in image_path.split("/") if p and p != "."]
        rest.reverse()
        links = 0
        while rest:
            name = rest.pop()
            if name == "..":
                if done:
                    done.pop()
                continue
            candidate = "/" + "/".join([*done, name])
            target = self.links.get(candidate)
            if target is None:
                done.append(name)
                continue
            links += 1
            if links > MAX_LINKS:
                return candidate
            if target.startswith("/"):
                done = []
            rest.extend(reversed([p for p in target.split("/") if p and p != "."]))
        return "/" + "/".join(done)

    def directory(self, image_path: str) -> str | None:
        found = self.key(image_path)
        return found if self.kinds.get(found) == "d" else None

    def read_text(self, image_path: str) -> str | None:
        return self.texts.get(self.key(image_path))

    def listdir(self, image_path: str) -> list[str]:
        directory = self.directory(image_path)
        return list(self.children.get(directory, [])) if directory else []

    def load(self, key: str) -> Elf | None:
        return self.elfs.get(self.key(key))

    def image_path(self, key: str) -> str:
        return key

    # --- the check -----------------------------------------------------------------

    def problem(self, program: str) -> str | None:
        """What the image lacks to run ``program`` with its own loader, or None."""
        found = self.elfs[program]
        interpreter = found.interpreter
        assert interpreter is not None
        loader = self.load(interpreter)
        if loader is None:
            return f"its loader {interpreter}"
        if os.path.basename(interpreter).startswith("ld-musl-"):
            kind = libraries.MUSL
        elif b"GLIBC_" in loader.strings:
            kind = libraries.GLIBC
        else:
            return None  # a loader whose search hostjob does not know
        where = os.path.dirname(self.key(interpreter))
        env_dirs, system_dirs = libraries.search_path(self, kind, found, where, interpreter, "")
        own = (os.path.basename(interpreter), loader.soname or "")
        try:
            libraries.check_closure(self, kind, program, found, own, [*env_dirs, *system_dirs])
        except StartError as err:
            return str(err).split(",", 1)[0]  # the library's name
        return None

    def problems(self) -> list[tuple[str, str]]:
        """(program, what it lacks) of every dynamically linked program that cannot
        run with the image's own loader and libraries."""
        out = []
        for program in self.programs:
            missing = self.problem(program)
            if missing is not None:
                out.append((program, missing))
        return out


def warning(src_dir: str, problems: list[tuple[str, str]]) -> str:
    """The one line ``pack`` prints about ``problems`` (the first few named)."""
    count = len(problems)
    shown = ", ".join(f"{program} ({what})" for program, what in problems[:SHOWN])
    more = f" and {count - SHOWN} more" if count > SHOWN else ""
    programs = "program lacks its" if count == 1 else "programs lack their"
    return (
        f"{src_dir}: {count} dynamically linked {programs} loader or libraries:"
        f" {shown}{more}; a job container runs them with the host's loader, if it has"
        " it, and does not start them without their libraries"
    )
