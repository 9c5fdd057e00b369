"""The image commands' parsing and rendering, without root or a store."""

from __future__ import annotations

import importlib
import os
import subprocess
import sys
from pathlib import Path

import pytest

from hostjob.cli import image_flags, render
from hostjob.cli.args import parse
from hostjob.cli.commands import pack as pack_cmd
from hostjob.cli.main import COMMANDS
from hostjob.errors import InvalidArgument
from hostjob.images.errors import RegistryError
from hostjob.images.gc import Freed
from tests.helpers import REPO

IMAGE_COMMANDS = ("pull", "images", "inspect", "import", "rmi", "prune", "pack")


@pytest.mark.parametrize("name", IMAGE_COMMANDS)
def test_registered(name: str) -> None:
    module_name, help_, needs_root = COMMANDS[name]
    module = importlib.import_module(f"hostjob.cli.commands.{module_name}")
    assert module.COMMAND.name == name and help_
    assert needs_root == (name != "pack")


def test_short_id() -> None:
    assert render.short_id("sha256:" + "ab" * 32) == "ab" * 6
    assert render.short_id(None) == "-"


def test_times() -> None:
    assert render.ago("yesterday") == "-" and render.ago(None) == "-"
    now = 1_000_000_000.0
    assert render.ago("2001-09-09T01:46:30Z", now) == "seconds ago"
    assert render.ago("2001-09-09T01:45:30Z", now) == "1 minute ago"
    assert render.ago("2001-09-07T01:46:40Z", now) == "2 days ago"
    assert render.ago("1970-01-01T00:00:00Z", now) == "31 years ago"
    assert render.ago("2030-01-01T00:00:00Z", now) == "in the future"
    assert render.ago(None, now) == "-"


def test_table() -> None:
    assert render.table([("A", "BB"), ("ccc", "d")]) == "A     BB\nccc   d"
    assert render.table([]) == ""


def test_table_cells_are_escaped() -> None:
    """A cell cannot drive the terminal nor start a row of its own."""
    shown = render.table([("NAME", "PLATFORM"), ("x", "linux/amd64\x1b]0;t\x07\nfake   row\x9b")])
    assert shown.count("\n") == 1
    assert "\\x1b]0;t\\x07\\nfake   row\\x9b" in shown


def test_freed() -> None:
    assert render.freed(Freed()) == "freed 0 B (0 blobs, 0 layers)"
    assert render.freed(Freed(2500, 1, 1)) == "freed 2.5 kB (1 blob, 1 layer)"


def test_image_rows_and_details_as_json() -> None:
    from hostjob.images import imagespec
    from hostjob.images.resolve import ImageDetails, ImageSummary, LayerInfo

    row = ImageSummary("docker.io/library/a:1", "sha256:" + "1" * 64, "2026-01-01T00:00:00Z")
    assert render.summary_json(row) == {
        "name": "docker.io/library/a:1",
        "digest": "sha256:" + "1" * 64,
        "tagged": "2026-01-01T00:00:00Z",
        "verified": None,
        "id": None,
        "created": None,
        "platform": None,
        "size": None,
        "layers": None,
    }
    row.error = "blob gone"
    assert render.summary_json(row)["error"] == "blob gone" and "id" not in render.summary_json(row)
    config = imagespec.ImageConfig.decode({"os": "linux", "architecture": "arm64", "variant": "v8"})
    manifest = imagespec.Manifest.decode(
        {
            "schemaVersion": 2,
            "layers": [
                {"mediaType": imagespec.OCI_LAYER, "digest": "sha256:" + "2" * 64, "size": 7}
            ],
        }
    )
    layer = LayerInfo("sha256:" + "2" * 64, imagespec.OCI_LAYER, 7, "sha256:" + "3" * 64, None)
    details = ImageDetails(
        ["a"], "sha256:" + "1" * 64, manifest, "sha256:" + "4" * 64, config, [layer], None
    )
    out = render.details_json(details)
    assert list(out) == [
        "names", "id", "digest", "index", "platform", "created", "size", "verified", "manifest",
        "config", "layers",
    ]  # fmt: skip
    assert out["platform"] == "linux/arm64/v8" and out["size"] == 7
    assert out["layers"] == [
        {"digest": "sha256:" + "2" * 64, "mediaType": imagespec.OCI_LAYER, "size": 7,
         "diffID": "sha256:" + "3" * 64, "path": None},
    ]  # fmt: skip
    assert out["config"]["architecture"] == "arm64"


def test_the_verified_cell_says_what_vouched_for_an_image() -> None:
    fpr = "37C24E78FB83142080BA98BABC33EF9C7A3630C5"
    signed = {"policy": "/p.json", "section": "default", "by": [
        {"requirement": "signedBy", "key": fpr},
        {"requirement": "sigstoreSigned", "key": "SHA256:" + "a" * 43},
    ]}  # fmt: skip
    assert (
        render.verified(signed) == "signedBy BC33EF9C7A3630C5, sigstoreSigned SHA256:aaaaaaaaaaaa"
    )
    assert render.verified({"policy": "/p.json", "section": "default", "by": []}) == "no"
    assert render.verified({"policy": None, "section": "no policy", "by": []}) == "no policy"
    assert render.verified(None) == "-"  # stored before hostjob asked a policy


def test_pack_words() -> None:
    args = parse(
        pack_cmd.COMMAND,
        ["d", "--to", "oci:o", "--entrypoint", "/bin/app", "--entrypoint", "-v", "--cmd", "[]"],
    )
    assert pack_cmd.argv_words(args.entrypoint, "entrypoint") == ["/bin/app", "-v"]
    assert pack_cmd.argv_words(args.cmd, "cmd") == []
    assert pack_cmd.argv_words([], "cmd") is None
    assert pack_cmd.argv_words(['["/bin/app", "--flag"]'], "cmd") == ["/bin/app", "--flag"]
    # Several values are words, even when one looks like JSON.
    assert pack_cmd.argv_words(["echo", "[x]"], "cmd") == ["echo", "[x]"]
    with pytest.raises(InvalidArgument, match="--cmd: not a JSON array of strings"):
        pack_cmd.argv_words(["[1, 2]"], "cmd")
    with pytest.raises(InvalidArgument, match="--cmd: not a JSON array of strings"):
        pack_cmd.argv_words(["[oops"], "cmd")


def test_pack_labels() -> None:
    assert pack_cmd.labels(["a=1", "b=x=y", "c="]) == {"a": "1", "b": "x=y", "c": ""}
    assert pack_cmd.labels([]) is None
    with pytest.raises(InvalidArgument):
        pack_cmd.labels(["=v"])


def test_pull_flags() -> None:
    from hostjob.cli.commands import pull

    args = parse(pull.COMMAND, ["--tls-verify=false", "--plain-http", "-q", "x/y"])
    assert args.tls_verify is False and args.plain_http and args.quiet and args.image == "x/y"
    assert parse(pull.COMMAND, ["x/y"]).tls_verify is True


SHARED = {
    "store": (image_flags.STORE,),
    "platform": (image_flags.PLATFORM,),
    "quiet": (image_flags.QUIET,),
    "registry": image_flags.REGISTRY,
    "unpack": image_flags.UNPACK,
}
# Which of the shared flags each command takes.
TAKES = {
    "run": ("store", "platform", "quiet", "registry", "unpack"),
    "pull": ("store", "platform", "quiet", "registry", "unpack"),
    "push": ("store", "quiet", "registry"),
    "import_": ("store", "quiet", "unpack"),
    "pack": ("store", "quiet", "registry"),
    "images": ("store",),
    "inspect": ("store",),
    "rmi": ("store",),
    "prune": ("store",),
}


@pytest.mark.parametrize("module_name", sorted(TAKES))
def test_each_shared_flag_is_declared_once(module_name: str) -> None:
    """The commands take the very ``Option`` objects of ``cli/image_flags.py`` (one
    declaration, one help text), never a declaration of their own. (``images -q`` is
    another flag: it prints IDs, as docker's does.)"""
    command = importlib.import_module(f"hostjob.cli.commands.{module_name}").COMMAND
    taken = {o.names[0]: o for group in TAKES[module_name] for o in SHARED[group]}
    names = {o.names[0] for o in command.options}
    assert set(taken) <= names, f"{module_name} lacks {sorted(set(taken) - names)}"
    for option in command.options:
        if option.names[0] in taken:
            assert option is taken[option.names[0]], f"{module_name} redeclares {option.names}"


def test_the_registry_flags_give_the_librarys_defaults() -> None:
    from hostjob.cli.commands import pull
    from hostjob.images.options import STALL_TIMEOUT, RegistryOptions

    given = image_flags.registry_options(parse(pull.COMMAND, ["x/y"]))
    default = RegistryOptions()
    assert [getattr(given, k) for k in RegistryOptions.__slots__] == [
        getattr(default, k) for k in RegistryOptions.__slots__
    ]
    stall = next(o for o in image_flags.REGISTRY if o.dest == "stall_timeout")
    assert f"(default {STALL_TIMEOUT:g}s)" in stall.help


def test_the_registry_flags_as_a_value() -> None:
    from hostjob.cli.commands import push

    argv = ["--creds", "alice:pa:ss", "--authfile", "/a.json", "--tls-verify=false",
            "--plain-http", "--stall-timeout", "1m30s", "img", "h/n:t"]  # fmt: skip
    options = image_flags.registry_options(parse(push.COMMAND, argv))
    assert options.credentials == ("alice", "pa:ss") and options.authfile == "/a.json"
    assert options.tls_verify is False and options.plain_http is True
    assert options.stall_timeout == 90.0


@pytest.mark.parametrize(
    ("argv", "error", "message"),
    [
        (["--creds", "nopassword"], RegistryError, "USER:PASSWORD"),
        (["--creds", ""], RegistryError, "USER:PASSWORD"),
        (["--stall-timeout", "0s"], InvalidArgument, "--stall-timeout 0: must be more than"),
        (["--stall-timeout", "soon"], InvalidArgument, "invalid duration 'soon'"),
    ],
)
def test_bad_registry_flags_fail_in_one_line(
    argv: list[str], error: type[Exception], message: str
) -> None:
    from hostjob.cli.commands import pull

    with pytest.raises(error, match=message):
        image_flags.registry_options(parse(pull.COMMAND, [*argv, "x/y"]))


@pytest.mark.parametrize("command", ["pull", "run", "import_", "push"])
def test_the_trust_flags_are_one_declaration_on_every_command_that_asks(command: str) -> None:
    import importlib

    module = importlib.import_module(f"hostjob.cli.commands.{command}")
    words = ["--signature-policy", "/p.json", "-registries.d", "/r.d", "a", "b"]
    args = parse(module.COMMAND, words[: 6 if command == "push" else 5])
    trust = image_flags.trust_options(args)
    assert (trust.signature_policy, trust.registries_d) == ("/p.json", "/r.d")
    assert all(o in module.COMMAND.options for o in image_flags.TRUST)
    default = image_flags.trust_options(
        parse(module.COMMAND, words[4 : 6 if command == "push" else 5])
    )
    assert (default.signature_policy, default.registries_d) == (None, None)


def test_a_unit_runs_with_the_same_policy(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """generate systemd's command line keeps the trust flags, their paths absolute."""
    from hostjob.cli.commands import run

    monkeypatch.chdir(tmp_path)
    args = parse(run.COMMAND, ["--signature-policy", "p.json", "--registries.d", "r.d", "img"])
    words = run._foreground_command(args, "/store", "img")
    assert words[:4] == ["--signature-policy", str(tmp_path / "p.json"),
                         "--registries.d", str(tmp_path / "r.d")]  # fmt: skip


def test_the_unpack_flags_as_a_value() -> None:
    from hostjob.cli.commands import import_

    limits = image_flags.unpack_limits(parse(import_.COMMAND, ["oci:x"]))
    assert (limits.max_bytes, limits.max_inodes) == (None, None)
    argv = ["--max-image-size", "32m", "--max-image-inodes", "1000", "oci:x"]
    limits = image_flags.unpack_limits(parse(import_.COMMAND, argv))
    assert (limits.max_bytes, limits.max_inodes) == (32 << 20, 1000)
    with pytest.raises(InvalidArgument, match="--max-image-inodes -1"):
        image_flags.unpack_limits(parse(import_.COMMAND, ["--max-image-inodes", "-1", "oci:x"]))


@pytest.mark.parametrize(
    "argv", [["images"], ["inspect", "x"], ["rmi", "x"], ["prune"]], ids=lambda a: a[0]
)
def test_store_commands_import_no_network_or_terminal_libraries(
    argv: list[str], tmp_path: Path
) -> None:
    code = (
        "import sys\n"
        "from hostjob.cli.main import main\n"
        f"main({[argv[0], '--store', str(tmp_path / 'store'), *argv[1:]]!r})\n"
        "sys.stderr.write('\\nMODULES ' + ' '.join(sorted(sys.modules)) + '\\n')\n"
    )
    env = dict(os.environ, PYTHONPATH=str(REPO / "src"))
    done = subprocess.run(
        [sys.executable, "-S", "-c", code], capture_output=True, text=True, env=env, cwd=tmp_path
    )
    line = next(x for x in done.stderr.splitlines() if x.startswith("MODULES "))
    heavy = sorted(
        m for m in line.split()[1:] if m.split(".")[0] in ("httpx", "rich", "zstandard", "isal")
    )
    assert heavy == []
