"""``pack``'s warning about dynamically linked programs whose loader or libraries the
directory lacks: one line, the first few named; nothing for a complete image, a
static program, or a directory packed on a base (whose layers may hold them). On
directories of ``tests.elfmaker`` files, without root."""

from __future__ import annotations

from pathlib import Path

import pytest

from hostjob.images import pack, packcheck
from tests.elfmaker import write_elf

INTERP = "/lib64/ld-linux-x86-64.so.2"


def complete_image(root: Path) -> Path:
    """A merged-/usr image with its loader, libc and ld.so.conf."""
    (root / "usr/lib/x86_64-linux-gnu").mkdir(parents=True)
    (root / "usr/lib64").mkdir(parents=True)
    (root / "etc/ld.so.conf.d").mkdir(parents=True)
    for name in ("bin", "lib", "lib64"):
        (root / name).symlink_to(f"usr/{name}")
    write_elf(
        root / "usr/lib/x86_64-linux-gnu/ld-linux-x86-64.so.2",
        soname="ld-linux-x86-64.so.2",
        strings=("GLIBC_2.41",),
    )
    (root / "usr/lib64/ld-linux-x86-64.so.2").symlink_to(
        "/usr/lib/x86_64-linux-gnu/ld-linux-x86-64.so.2"
    )
    write_elf(
        root / "usr/lib/x86_64-linux-gnu/libc.so.6",
        mode=0o644,
        soname="libc.so.6",
        needed=("ld-linux-x86-64.so.2",),
    )
    (root / "etc/ld.so.conf").write_text("include /etc/ld.so.conf.d/*.conf\n")
    (root / "etc/ld.so.conf.d/libc.conf").write_text("/usr/local/lib\n")
    return root


def packed(src: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], **kw: object) -> str:
    """Pack ``src`` and return what it said on stderr."""
    pack.pack(str(src), f"oci:{tmp_path / 'out'}:t", **kw)  # type: ignore[arg-type]
    return capsys.readouterr().err


def test_a_complete_image_says_nothing(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    src = complete_image(tmp_path / "src")
    write_elf(src / "usr/lib/x86_64-linux-gnu/libjq.so.1", mode=0o644, needed=("libc.so.6",))
    write_elf(src / "usr/bin/jq", interpreter=INTERP, needed=("libjq.so.1", "libc.so.6"))
    write_elf(src / "usr/bin/static")  # no interpreter
    assert packed(src, tmp_path, capsys) == ""


def test_a_lone_program_is_named(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    src = tmp_path / "src"
    write_elf(src / "app", interpreter=INTERP, needed=("libc.so.6",))
    err = packed(src, tmp_path, capsys)
    assert err.count("\n") == 1
    assert "1 dynamically linked program lacks its loader or libraries" in err
    assert f"/app (its loader {INTERP})" in err


def test_a_missing_library_is_named(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    src = complete_image(tmp_path / "src")
    write_elf(src / "usr/bin/jq", interpreter=INTERP, needed=("libonig.so.5", "libc.so.6"))
    assert "/usr/bin/jq (libonig.so.5)" in packed(src, tmp_path, capsys)


def test_the_first_few_are_named(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    src = tmp_path / "src"
    for name in "abcde":
        write_elf(src / "bin" / name, interpreter=INTERP, needed=("libc.so.6",))
    err = packed(src, tmp_path, capsys)
    assert "5 dynamically linked programs lack" in err
    assert "/bin/a (" in err and "/bin/c (" in err and "/bin/d (" not in err
    assert "and 2 more" in err


def test_a_base_image_is_not_second_guessed(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    base = complete_image(tmp_path / "base")
    pack.pack(str(base), f"oci:{tmp_path / 'base-layout'}:b")
    src = tmp_path / "src"
    write_elf(src / "usr/bin/app", interpreter=INTERP, needed=("libc.so.6",))
    capsys.readouterr()
    assert packed(src, tmp_path, capsys, base=f"oci:{tmp_path / 'base-layout'}:b") == ""


def test_the_tree_resolves_links_inside_itself() -> None:
    index = packcheck.TreeIndex()
    index.links.update({"/lib": "usr/lib", "/usr/lib/x": "/etc/../../y", "/loop": "/loop"})
    index.kinds.update({"/usr": "d", "/usr/lib": "d", "/y": "f"})
    assert index.key("/lib/libc.so.6") == "/usr/lib/libc.so.6"
    assert index.key("/lib/x") == "/y"  # an absolute target starts at the tree's root
    assert index.key("/../../etc") == "/etc"
    assert index.key("/loop") == "/loop"  # followed 40 times, then given up
    assert index.directory("/lib") == "/usr/lib"
