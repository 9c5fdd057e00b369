"""The loader decision on images the tests lay out (``tests.elfmaker``'s files, never
run): what the container process executes for the program it found -- itself, the
image's loader with the image's library path, or a ``#!`` interpreter of the image --
and the one-line errors of a program that cannot start."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from hostjob.errors import StartError
from hostjob.runtime.launch import loader, probe
from hostjob.runtime.launch import plan as launch_plan
from hostjob.runtime.launch import program as launch_program
from tests.elfmaker import EM_386, EM_AARCH64, write_elf

GLIBC_INTERP = "/lib64/ld-linux-x86-64.so.2"
MUSL_INTERP = "/lib/ld-musl-x86_64.so.1"
IMAGE_PATH = "/usr/local/bin:/usr/bin:/bin"


class Image:
    """A Debian-like image root (merged /usr) with a glibc loader of the image's own."""

    def __init__(self, root: Path, glibc: str = "GLIBC_2.41") -> None:
        self.root = root
        self.mp = str(root)
        (root / "usr" / "bin").mkdir(parents=True)
        (root / "usr" / "lib" / "x86_64-linux-gnu").mkdir(parents=True)
        (root / "usr" / "lib64").mkdir(parents=True)
        (root / "etc" / "ld.so.conf.d").mkdir(parents=True)
        for name in ("bin", "lib"):
            (root / name).symlink_to(f"usr/{name}")
        (root / "lib64").symlink_to("usr/lib64")
        self.loader = write_elf(
            root / "usr/lib/x86_64-linux-gnu/ld-linux-x86-64.so.2",
            soname="ld-linux-x86-64.so.2",
            strings=("GLIBC_2.2.5", glibc, "GLIBC_PRIVATE"),
        )
        (root / "usr/lib64/ld-linux-x86-64.so.2").symlink_to(
            "../lib/x86_64-linux-gnu/ld-linux-x86-64.so.2"
        )
        self.lib("libc.so.6", needed=("ld-linux-x86-64.so.2",))
        (root / "etc/ld.so.conf").write_text("include /etc/ld.so.conf.d/*.conf\n")
        (root / "etc/ld.so.conf.d/x86_64-linux-gnu.conf").write_text(
            "# Multiarch support\n/usr/local/lib/x86_64-linux-gnu\n/lib/x86_64-linux-gnu\n"
        )

    def lib(self, name: str, where: str = "usr/lib/x86_64-linux-gnu", **kwargs: object) -> Path:
        return write_elf(self.root / where / name, soname=name, **kwargs)

    def program(self, path: str, interpreter: str | None = GLIBC_INTERP, **kwargs: object) -> Path:
        kwargs.setdefault("needed", ("libc.so.6",))
        return write_elf(self.root / path.lstrip("/"), interpreter=interpreter, **kwargs)

    def plan(self, *args: str, env: tuple[str, ...] = ()) -> launch_plan.LaunchPlan:
        result = launch_plan.LaunchPlan()
        result.args = list(args)
        result.mount_point = self.mp
        result.image_path = IMAGE_PATH
        result.env = [f"PATH={launch_plan.extend_path('/usr/bin:/bin', self.mp)}", *env]
        result.cwd = self.mp
        return result

    def run(self, *args: str, env: tuple[str, ...] = ()) -> tuple[str, list[str]]:
        """What the container process would execute for ``args``."""
        return execute(self.plan(*args, env=env))

    @property
    def lib_dir(self) -> str:
        return f"{self.mp}/usr/lib/x86_64-linux-gnu"

    @property
    def ld(self) -> str:
        return str(self.loader)


def execute(plan: launch_plan.LaunchPlan) -> tuple[str, list[str]]:
    """The child's steps from the look-up to the loader's decision (path, argv)."""
    program, named = launch_program.find_program_named(
        plan.args[0], plan.cwd, plan.path_value(), plan.mount_point, plan.image_path
    )
    if launch_program.runs_as_it_is(plan, program):
        return program, plan.args
    return loader.prepare(plan, program, named)


@pytest.fixture
def image(tmp_path: Path) -> Image:
    return Image(tmp_path / "mp")


def library_path(argv: list[str]) -> list[str]:
    return argv[argv.index("--library-path") + 1].split(":")


def test_a_dynamic_program_runs_through_the_images_loader(image: Image) -> None:
    image.lib("libjq.so.1", needed=("libc.so.6",))
    jq = image.program("/usr/bin/jq", needed=("libjq.so.1", "libc.so.6"))
    program, argv = image.run("jq", "--version")
    assert program == image.ld
    assert argv[0] == image.mp + GLIBC_INTERP  # the loader as the image names it
    assert argv[1] == "--inhibit-cache"  # never the host's ld.so.cache
    assert argv[-2:] == [str(jq), "--version"]
    dirs = library_path(argv)
    assert dirs[0] == image.lib_dir  # ld.so.conf's, resolved inside the image
    assert all(d.startswith(image.mp + "/") for d in dirs)
    assert "--argv0" not in argv  # called by its own path: argv[0] is that path


def test_argv0_is_the_path_the_program_was_called_by(image: Image) -> None:
    """python3 -> python3.13 (a relative link in one directory): the loader is given
    the link, whose name the program sees; CPython finds its prefix from it."""
    image.program("/usr/bin/python3.13")
    (image.root / "usr/bin/python3").symlink_to("python3.13")
    _program, argv = image.run("python3", "-c", "pass")
    assert "--argv0" not in argv
    assert argv[-3:] == [f"{image.mp}/usr/bin/python3", "-c", "pass"]


def test_a_multicall_link_keeps_its_name(image: Image) -> None:
    """/bin/sh -> /bin/busybox, absolute: resolved inside the image for the loader,
    its name kept with --argv0, so the applet runs."""
    busybox = image.program("/usr/bin/busybox")
    (image.root / "usr/bin/sh").symlink_to("/bin/busybox")
    _program, argv = image.run("sh", "-c", "true")
    at = argv.index("--argv0")
    assert argv[at + 1] == f"{image.mp}/usr/bin/sh"
    assert argv[at + 2 :] == [str(busybox), "-c", "true"]


def test_an_old_glibc_gets_neither_option_it_may_lack(tmp_path: Path) -> None:
    old = Image(tmp_path / "mp", glibc="GLIBC_2.4")
    busybox = old.program("/usr/bin/busybox")
    (old.root / "usr/bin/sh").symlink_to("/bin/busybox")
    _program, argv = old.run("sh")
    assert "--inhibit-cache" not in argv and "--argv0" not in argv
    assert argv[-1] == str(busybox)  # argv[0]: the program's resolved path


def test_a_static_program_runs_as_it_is(image: Image) -> None:
    static = image.program("/usr/bin/busybox", interpreter=None, needed=())
    assert image.run("busybox", "true") == (str(static), ["busybox", "true"])


def test_a_host_program_runs_as_it_is(image: Image) -> None:
    assert image.run("/bin/sh", "-c", "true") == ("/bin/sh", ["/bin/sh", "-c", "true"])


def test_a_loader_only_the_host_has_is_the_hosts(image: Image) -> None:
    host_loader = os.path.realpath("/lib64/ld-linux-x86-64.so.2")
    assert os.path.exists(host_loader)
    app = image.program("/usr/bin/app", interpreter="/lib64/ld-linux-x86-64.so.2")
    (image.root / "usr/lib64/ld-linux-x86-64.so.2").unlink()
    assert image.run("app") == (str(app), ["app"])


def test_a_loader_nowhere_is_named(image: Image) -> None:
    image.program("/usr/bin/app", interpreter="/lib/ld-nowhere.so.1")
    with pytest.raises(StartError) as err:
        image.run("app")
    assert str(err.value) == (
        'exec: "app": its loader /lib/ld-nowhere.so.1 is in neither the image nor the host'
    )


def test_a_missing_library_is_named_with_its_needer(image: Image) -> None:
    image.lib("libjq.so.1", needed=("libonig.so.5", "libc.so.6"))
    image.program("/usr/bin/jq", needed=("libjq.so.1", "libc.so.6"))
    with pytest.raises(StartError) as err:
        image.run("jq")
    assert str(err.value) == (
        'exec: "jq": libonig.so.5, which /usr/lib/x86_64-linux-gnu/libjq.so.1 needs, is in'
        " none of the image's library directories"
    )


def test_runpath_origin_and_absolute(image: Image) -> None:
    image.lib("libapp.so", where="opt/app/lib", needed=("libc.so.6",))
    image.lib("libextra.so", where="opt/extra", needed=("libc.so.6",))
    image.program(
        "/opt/app/bin/app",
        needed=("libapp.so", "libextra.so", "libc.so.6"),
        runpath="$ORIGIN/../lib:/opt/extra",
    )
    _program, argv = image.run("/opt/app/bin/app")
    # $ORIGIN is the loader's to expand; the absolute entry is the image's, which the
    # loader would look for on the host: it joins the library path.
    assert f"{image.mp}/opt/extra" in library_path(argv)
    assert f"{image.mp}/opt/app/lib" not in library_path(argv)


def test_ld_library_path_of_the_environment_comes_first(image: Image) -> None:
    image.lib("libcuda.so.1", where="usr/local/nvidia/lib64", needed=("libc.so.6",))
    image.program("/usr/bin/app", needed=("libcuda.so.1", "libc.so.6"))
    env = ("LD_LIBRARY_PATH=/usr/local/nvidia/lib64:/nonexistent",)
    _program, argv = image.run("app", env=env)
    assert library_path(argv)[0] == f"{image.mp}/usr/local/nvidia/lib64"


def test_a_library_of_another_class_is_skipped(image: Image) -> None:
    (image.root / "usr/local/lib/x86_64-linux-gnu").mkdir(parents=True)
    image.lib("libz.so.1", where="usr/local/lib/x86_64-linux-gnu", wide=False, machine=EM_386)
    image.program("/usr/bin/app", needed=("libz.so.1", "libc.so.6"))
    with pytest.raises(StartError, match=r"libz\.so\.1, which /usr/bin/app needs"):
        image.run("app")
    image.lib("libz.so.1", needed=("libc.so.6",))
    assert image.run("app")[0] == image.ld


def test_another_architecture_is_named(image: Image) -> None:
    image.program("/usr/bin/app", machine=EM_AARCH64, interpreter="/lib/ld-linux-aarch64.so.1")
    with pytest.raises(StartError) as err:
        image.run("app")
    assert "/usr/bin/app is an AArch64 program and this host is x86-64" in str(err.value)


def test_a_binfmt_handler_runs_another_architecture(
    image: Image, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    binfmt = tmp_path / "binfmt_misc"
    binfmt.mkdir()
    (binfmt / "status").write_text("enabled\n")
    magic = "7f454c460201010000000000000000000200b700"
    mask = "ffffffffffffff00fffffffffffffffffeffffff"
    (binfmt / "qemu-aarch64").write_text(
        f"enabled\ninterpreter /usr/bin/qemu-aarch64\nflags: F\noffset 0\nmagic {magic}\n"
        f"mask {mask}\n"
    )
    monkeypatch.setattr(probe, "BINFMT", str(binfmt))
    app = image.program("/usr/bin/app", machine=EM_AARCH64, interpreter=None, needed=(), elf_type=2)
    assert image.run("app") == (str(app), ["app"])


def test_a_script_gets_the_images_interpreter(image: Image) -> None:
    python = image.program("/usr/bin/python3.13")
    (image.root / "usr/bin/python3").symlink_to("python3.13")
    script = image.root / "usr/bin/tool"
    script.write_text("#!/usr/bin/python3 -u\nprint(1)\n")
    script.chmod(0o755)
    program, argv = image.run("tool", "x")
    assert program == image.ld
    assert argv[-4:] == [f"{image.mp}/usr/bin/python3", "-u", str(script), "x"]
    assert python.exists()


def test_env_looks_the_name_up_in_the_image_first(image: Image) -> None:
    image.program("/usr/bin/env")
    image.program("/usr/bin/python3")
    script = image.root / "usr/bin/tool"
    script.write_text("#!/usr/bin/env python3\nprint(1)\n")
    script.chmod(0o755)
    _program, argv = image.run("tool")
    assert argv[-2:] == [f"{image.mp}/usr/bin/python3", str(script)]


def test_a_static_interpreter_of_the_image_is_executed_itself(image: Image) -> None:
    busybox = image.program("/usr/bin/busybox", interpreter=None, needed=())
    (image.root / "usr/bin/sh").symlink_to("busybox")
    script = image.root / "entrypoint.sh"
    script.write_text("#!/bin/sh\necho hi\n")
    script.chmod(0o755)
    assert image.run("/entrypoint.sh", "a") == (
        str(busybox),
        [f"{image.mp}/usr/bin/sh", str(script), "a"],
    )


def test_a_script_whose_interpreter_only_the_host_has(image: Image) -> None:
    script = image.root / "usr/bin/tool"
    script.write_text("#!/bin/sh\necho hi\n")
    script.chmod(0o755)
    assert image.run("tool") == (str(script), ["tool"])


def test_a_script_whose_interpreter_is_nowhere(image: Image) -> None:
    script = image.root / "usr/bin/tool"
    script.write_text("#!/usr/bin/python9\n")
    script.chmod(0o755)
    with pytest.raises(StartError) as err:
        image.run("tool")
    assert str(err.value) == (
        'exec: "tool": its interpreter /usr/bin/python9 (#!) is in neither the image nor the host'
    )


def test_a_set_user_id_program_is_the_kernels(image: Image) -> None:
    app = image.program("/usr/bin/app", mode=0o4755)
    assert image.run("app") == (str(app), ["app"])


def test_a_program_the_user_cannot_read_is_the_kernels(
    image: Image, monkeypatch: pytest.MonkeyPatch
) -> None:
    app = image.program("/usr/bin/app")
    real_open = os.open

    def refuse(path: str, flags: int, mode: int = 0o777) -> int:
        if path == str(app):
            raise PermissionError(13, "Permission denied", path)
        return real_open(path, flags, mode)

    monkeypatch.setattr(loader.posix, "open", refuse)
    assert image.run("app") == (str(app), ["app"])


def test_musl(tmp_path: Path) -> None:
    root = tmp_path / "mp"
    image = Image(root)
    write_elf(root / "usr/lib/x86_64-linux-musl/libc.so", rodata=b"library-path\0argv0\0")
    (root / "lib/ld-musl-x86_64.so.1").symlink_to("x86_64-linux-musl/libc.so")
    (root / "etc/ld-musl-x86_64.path").write_text("/usr/lib/x86_64-linux-musl\n/usr/local/lib\n")
    image.lib("libz.so.1", where="usr/lib/x86_64-linux-musl", needed=("libc.so",))
    real = image.program(
        "/usr/bin/app.real", interpreter=MUSL_INTERP, needed=("libz.so.1", "libc.so")
    )
    (root / "usr/bin/app").symlink_to("/usr/bin/app.real")
    program, argv = image.run("app", "x")
    assert program == f"{image.mp}/usr/lib/x86_64-linux-musl/libc.so"
    # musl finds its path file from the name it is called by: the image's.
    assert argv[0] == image.mp + MUSL_INTERP
    assert "--inhibit-cache" not in argv
    assert library_path(argv)[0] == f"{image.mp}/usr/lib/x86_64-linux-musl"
    assert argv[argv.index("--argv0") + 1 :] == [f"{image.mp}/usr/bin/app", str(real), "x"]


def test_an_old_musl_gets_no_argv0(tmp_path: Path) -> None:
    root = tmp_path / "mp"
    image = Image(root)
    write_elf(root / "usr/lib/x86_64-linux-musl/libc.so", rodata=b"library-path\0preload\0")
    (root / "lib/ld-musl-x86_64.so.1").symlink_to("x86_64-linux-musl/libc.so")
    real = image.program("/usr/bin/app.real", interpreter=MUSL_INTERP, needed=("libc.so",))
    (root / "usr/bin/app").symlink_to("/usr/bin/app.real")
    _program, argv = image.run("app")
    assert "--argv0" not in argv and argv[-1] == str(real)


def test_an_unknown_loader_is_refused(image: Image) -> None:
    write_elf(image.root / "lib/ld-uClibc.so.0", soname="ld-uClibc.so.0")
    image.program("/usr/bin/app", interpreter="/lib/ld-uClibc.so.0")
    with pytest.raises(StartError, match="neither glibc's nor musl's"):
        image.run("app")


def test_a_mount_point_a_library_path_cannot_hold(tmp_path: Path) -> None:
    image = Image(tmp_path / "a:b")
    image.program("/usr/bin/app")
    with pytest.raises(StartError, match="has a ':' or '\\$' in its host path"):
        image.run("app")


def test_the_host_loader_opt_out(image: Image) -> None:
    app = image.program("/usr/bin/app")
    plan = image.plan("app")
    plan.image_loader = False
    assert execute(plan) == (str(app), ["app"])


@pytest.mark.parametrize(
    ("line", "expected"),
    [
        (b"#!/bin/sh\n", ("/bin/sh", "")),
        (b"#! /usr/bin/env  python3 \n", ("/usr/bin/env", "python3")),
        (b"#!/usr/bin/perl -w -T\r\n", ("/usr/bin/perl", "-w -T")),
        (b"#!/bin/bash", ("/bin/bash", "")),
        (b"#!\tawk\t-f\n", ("awk", "-f")),
    ],
)
def test_shebang_is_split_as_the_kernel_splits_it(line: bytes, expected: tuple[str, str]) -> None:
    assert launch_program.shebang(line) == expected


def test_the_resolver_agrees_with_in_root(tmp_path: Path) -> None:
    """The library search's resolver (each directory once) resolves as in_root does:
    relative and absolute links, .. that stops at the root, a missing part kept."""
    from hostjob.runtime.launch.libraries import Resolver

    root = tmp_path / "mp"
    Image(root)
    (root / "etc/alternatives").mkdir(parents=True)
    (root / "etc/alternatives/x").symlink_to("/usr/bin/../../../lib64")
    (root / "usr/bin/up").symlink_to("../../../../etc")
    resolver = Resolver(str(root))
    for path in ("/lib/x86_64-linux-gnu/libc.so.6", "/lib64/ld-linux-x86-64.so.2",
                 "/etc/alternatives/x/y", "/bin/up/ld.so.conf", "/no/such", "/", "//lib",
                 "lib/../../usr"):  # fmt: skip
        assert resolver.key(path) == launch_program.in_root(str(root), path), path


@pytest.mark.parametrize(
    ("pattern", "name", "matches"),
    [
        ("*.conf", "libc.conf", True),
        ("*.conf", "x86_64-linux-gnu.conf", True),
        ("*.conf", "libc.conf.dpkg-old", False),
        ("*.conf", ".hidden.conf", False),
        (".*.conf", ".hidden.conf", True),
        ("a*b*c", "aXXbYYc", True),
        ("a*b*c", "aXXcYYb", False),
        ("lib?.conf", "libc.conf", True),
        ("lib?.conf", "libcc.conf", False),
        ("*", "anything", True),
        ("a*", "a.b", True),
        ("exact", "exact", True),
        ("exact", "exactly", False),
    ],
)
def test_include_patterns_match_as_glob_matches(pattern: str, name: str, matches: bool) -> None:
    from hostjob.runtime.launch.libraries import name_matches

    assert name_matches(pattern, name) is matches
