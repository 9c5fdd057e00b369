"""The image loader's decisions kept between starts (``launch.recall``, ``launch.remember``,
``spawn``'s read): on images the tests lay out, a decision made once is taken again while
every path it read is what it was, and made again the moment one is not."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from hostjob.errors import StartError
from hostjob.runtime.launch import plan as launch_plan
from hostjob.runtime.launch import program as launch_program
from hostjob.runtime.launch import recall, remember
from hostjob.runtime.launch.child import ChildSetup
from hostjob.runtime.launch.spawn import _kept_decisions
from tests.unit.runtime.launch.test_loader import Image, execute, library_path


class Starts:
    """Starts of programs of ``image`` as the runtime and its child make them, with the
    decisions kept in ``directory``; ``learned`` says whether the last one missed."""

    def __init__(self, image: Image, directory: Path) -> None:
        self.image = image
        self.directory = str(directory)
        self.learned = False

    def start(
        self, *args: str, plan: launch_plan.LaunchPlan | None = None
    ) -> tuple[str, list[str]]:
        plan = plan or self.image.plan(*args)
        setup = ChildSetup(plan, None)  # type: ignore[arg-type]
        setup.decisions_dir = self.directory
        _kept_decisions(setup)  # the runtime, before the fork
        program, named = launch_program.find_program_named(
            plan.args[0], plan.cwd, plan.path_value(), plan.mount_point, plan.image_path
        )
        assert not launch_program.runs_as_it_is(plan, program)
        path, argv, learned = recall.decide(plan, program, named, setup.decisions)
        self.learned = learned is not None
        if learned is not None:
            remember.keep(self.directory, learned)  # the runtime, once the child is ready
        return path, argv

    def files(self) -> list[Path]:
        return sorted(Path(self.directory).glob("*.run"))


@pytest.fixture
def image(tmp_path: Path) -> Image:
    found = Image(tmp_path / "mp")
    found.lib("libjq.so.1", needed=("libc.so.6",))
    found.program("/usr/bin/jq", needed=("libjq.so.1", "libc.so.6"))
    return found


@pytest.fixture
def starts(image: Image, tmp_path: Path) -> Starts:
    (tmp_path / "state").mkdir()  # the state root, which create makes
    return Starts(image, tmp_path / "state" / ".loader")


def test_a_decision_is_kept_and_taken_again(image: Image, starts: Starts) -> None:
    first = starts.start("jq", "--version")
    assert starts.learned and first == execute(image.plan("jq", "--version"))
    (kept,) = starts.files()
    assert kept.stat().st_mode & 0o777 == 0o600
    assert oct(Path(starts.directory).stat().st_mode & 0o777) == oct(0o700)
    again = starts.start("jq", "-n", "1")
    assert not starts.learned  # taken from the file, nothing read of the ELF files
    assert again == (first[0], [*first[1][:-1], "-n", "1"])  # the program's own arguments
    assert kept.stat().st_ino == starts.files()[0].stat().st_ino  # not written again


def test_a_library_removed_is_a_miss(image: Image, starts: Starts) -> None:
    starts.start("jq")
    (image.root / "usr/lib/x86_64-linux-gnu/libjq.so.1").unlink()
    with pytest.raises(StartError, match=r"libjq\.so\.1, which /usr/bin/jq needs"):
        starts.start("jq")


def test_a_library_added_earlier_in_the_search_is_a_miss(image: Image, starts: Starts) -> None:
    _, before = starts.start("jq")
    early = image.root / "usr/local/lib/x86_64-linux-gnu"
    image.lib("libjq.so.1", where="usr/local/lib/x86_64-linux-gnu", needed=("libc.so.6",))
    _, after = starts.start("jq")
    assert starts.learned
    assert f"{image.mp}/{early.relative_to(image.root)}" in library_path(after)
    assert library_path(after) != library_path(before)


def test_a_file_rewritten_in_place_is_a_miss(image: Image, starts: Starts) -> None:
    """The same inode and size, the same mtime set back: the change time still moved."""
    starts.start("jq")
    jq = image.root / "usr/bin/jq"
    st = jq.stat()
    image.program("/usr/bin/jq", needed=("libjq.so.1", "libc.so.6"))
    os.utime(jq, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert jq.stat().st_ino == st.st_ino
    time.sleep(0.01)
    starts.start("jq")
    assert starts.learned


def test_the_configuration_changed_is_a_miss(image: Image, starts: Starts) -> None:
    starts.start("jq")
    extra = image.root / "opt/lib"
    extra.mkdir(parents=True)
    (image.root / "etc/ld.so.conf.d/zz-opt.conf").write_text("/opt/lib\n")
    _, argv = starts.start("jq")
    assert starts.learned and f"{image.mp}/opt/lib" in library_path(argv)


def test_a_symlink_changed_is_a_miss(image: Image, starts: Starts) -> None:
    """/lib64/ld-linux-x86-64.so.2 led to the image's loader, now nowhere in the image:
    the kernel runs the program (with the host's loader of that name)."""
    first, _ = starts.start("jq")
    link = image.root / "usr/lib64/ld-linux-x86-64.so.2"
    link.unlink()
    link.symlink_to("/nowhere/ld.so")
    path, _ = starts.start("jq")
    assert starts.learned and first == image.ld and path == str(image.root / "usr/bin/jq")


def test_another_request_is_worked_out(image: Image, starts: Starts) -> None:
    starts.start("jq")
    plan = image.plan("jq", env=("LD_LIBRARY_PATH=/usr/lib64",))
    _, argv = starts.start(plan=plan)
    assert starts.learned
    assert library_path(argv)[0] == f"{image.mp}/usr/lib64"
    other_user = image.plan("jq")
    other_user.user = launch_plan.Credentials(1000, 1000, [], "/", None, None)
    starts.start(plan=other_user)
    assert starts.learned


def test_the_same_tree_at_another_mount_point_shares_a_decision(
    image: Image, starts: Starts, tmp_path: Path
) -> None:
    """Another container of the image sees the same files (an overlay's lower layer)
    under another mount point: a link to the image stands for that mount point here."""
    first = starts.start("jq")
    other = tmp_path / "other-mp"
    other.symlink_to(image.root)
    moved = Image.__new__(Image)
    moved.root, moved.mp = other, str(other)
    again = Starts(moved, Path(starts.directory)).start("jq")
    assert again == (
        first[0].replace(image.mp, str(other)),
        [word.replace(image.mp, str(other)) for word in first[1]],
    )


def test_a_decision_that_read_the_hosts_files_is_not_kept(image: Image, starts: Starts) -> None:
    """``#!/usr/bin/env sh`` where the image has no sh: the host's is found, and the
    host may change without the entry knowing."""
    image.program("/usr/bin/env")
    script = image.root / "usr/bin/tool"
    script.write_text("#!/usr/bin/env sh\necho hi\n")
    script.chmod(0o755)
    path, _ = starts.start("tool")
    assert not path.startswith(image.mp + "/")
    assert not starts.learned and starts.files() == []


def test_a_damaged_or_foreign_file_is_a_miss(image: Image, starts: Starts) -> None:
    first = starts.start("jq")
    (kept,) = starts.files()
    kept.write_bytes(b"\x00garbage")
    assert starts.start("jq") == first and starts.learned
    kept.chmod(0o620)  # another may write it: never read
    assert starts.start("jq") == first and starts.learned


@pytest.mark.parametrize(
    "payload",
    [
        b"",
        b"not marshal",
        __import__("marshal").dumps(("x",) * 6),
        __import__("marshal").dumps(((1,), "a", "b", "c", ("d",), (("/p", 1.5),))),
        __import__("marshal").dumps(((1,), "a", "b", "c", ["d"], ())),
    ],
)
def test_keep_takes_only_an_entry(payload: bytes, tmp_path: Path) -> None:
    remember.keep(str(tmp_path / "d"), payload)
    assert not list((tmp_path / "d").glob("*.run"))


def test_at_most_so_many_files_are_kept(
    image: Image, starts: Starts, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(remember, "MAX_FILES", 3)
    for n in range(5):
        image.program(f"/usr/bin/p{n}")
        starts.start(f"p{n}")
    assert len(starts.files()) == 3


def test_signature_of_each_kind(tmp_path: Path) -> None:
    (tmp_path / "f").write_text("x")
    (tmp_path / "d").mkdir()
    (tmp_path / "l").symlink_to("f")
    (tmp_path / "dangling").symlink_to("nowhere")
    st = (tmp_path / "f").stat()
    assert launch_program.signature(str(tmp_path / "f")) == (st.st_ino, st.st_ctime_ns, 1)
    assert len(launch_program.signature(str(tmp_path / "d"))) == 3  # what it is, not its entries
    assert len(launch_program.signature(str(tmp_path / "d") + "/")) == 5  # its entries too
    assert launch_program.signature(str(tmp_path / "l")) == ("f", st.st_ino, st.st_ctime_ns, 1)
    assert launch_program.signature(str(tmp_path / "dangling")) == ("nowhere", 2)
    assert launch_program.signature(str(tmp_path / "missing")) == 2  # ENOENT


def test_the_request_marks_the_mount_point(image: Image) -> None:
    request = launch_program.decision_request(image.plan("jq"))
    assert request is not None and image.mp not in repr(request)
    name = launch_program.decision_file(request)
    assert name == launch_program.decision_file(request) and name.endswith(".run")
    assert launch_program.decision_request(image.plan("a\0b")) is None


def test_no_container_may_take_the_directorys_name() -> None:
    from hostjob.errors import InvalidArgument
    from hostjob.runtime.state_root import validate_id

    with pytest.raises(InvalidArgument, match="invalid container ID"):
        validate_id(".loader")


def test_an_entry_of_another_shape_is_a_miss(image: Image, starts: Starts) -> None:
    """The request's file holds entries for this request in a shape this version never
    writes (another version's, a file put there by hand): each is passed over."""
    import marshal

    plan = image.plan("jq")
    first = starts.start(plan=plan)
    request = launch_program.decision_request(plan)
    assert request is not None
    jq = str(image.root / "usr/bin/jq").replace(image.mp, "\0")
    odd = [
        (request, jq, jq, 5, (), ()),  # the path is no string
        (request, jq, jq, "\0/x", ("a",), ((1, 2, 3),)),  # a dependency of three parts
        (request, jq, jq, "\0/x", (1,), ()),  # a word that is no string
    ]
    (kept,) = starts.files()
    kept.write_bytes(marshal.dumps(odd))
    kept.chmod(0o600)
    assert starts.start(plan=plan) == first and starts.learned
