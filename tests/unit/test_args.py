"""The runc-style argument parser."""

from __future__ import annotations

import pytest

from hostjob.cli.args import FLAG, INT, LIST, VALUE, Command, HelpRequested, Option, parse
from hostjob.errors import InvalidArgument

CREATE = Command(
    "create",
    "",
    options=(
        Option("bundle,b", VALUE, default="."),
        Option("pid-file", VALUE),
        Option("preserve-fds", INT, default=0),
        Option("detach,d", FLAG),
        Option("env,e", LIST),
    ),
    positionals=("container_id",),
)
EXEC = Command(
    "exec", "", options=(Option("tty,t", FLAG),), positionals=("container_id",), rest="command"
)


@pytest.mark.parametrize(
    "argv",
    [
        ["--bundle", "/b", "id"],
        ["-bundle", "/b", "id"],
        ["--bundle=/b", "id"],
        ["-b", "/b", "id"],
        ["id", "--bundle", "/b"],
    ],
)
def test_go_flag_spellings(argv: list[str]) -> None:
    args = parse(CREATE, argv)
    assert args.bundle == "/b" and args.container_id == "id"


def test_bool_int_list() -> None:
    args = parse(CREATE, ["-d=false", "--preserve-fds", "3", "-e", "A=1", "--env=B=2", "x"])
    assert args.detach is False and args.preserve_fds == 3 and args.env == ["A=1", "B=2"]
    assert parse(CREATE, ["--detach", "x"]).detach is True


def test_rest_stops_option_parsing() -> None:
    args = parse(EXEC, ["-t", "id", "ls", "-l", "--tty"])
    assert args.tty is True and args.command == ["ls", "-l", "--tty"]


def test_errors() -> None:
    with pytest.raises(InvalidArgument, match="not defined: -nope"):
        parse(CREATE, ["--nope", "x"])
    with pytest.raises(InvalidArgument, match="needs an argument"):
        parse(CREATE, ["x", "--bundle"])
    with pytest.raises(InvalidArgument, match="requires <container_id>"):
        parse(CREATE, [])
    with pytest.raises(InvalidArgument, match="unexpected"):
        parse(CREATE, ["a", "b"])
    with pytest.raises(InvalidArgument, match="invalid value"):
        parse(CREATE, ["--preserve-fds", "many", "x"])
    with pytest.raises(InvalidArgument, match="invalid boolean"):
        parse(CREATE, ["--detach=maybe", "x"])
    with pytest.raises(HelpRequested):
        parse(CREATE, ["--help"])


def test_double_dash_and_negative_numbers() -> None:
    kill = Command("kill", "", positionals=("container_id",), optional=("signal",))
    assert parse(kill, ["id", "-9"]).signal == "-9"
    assert parse(EXEC, ["--", "id", "-x"]).command == ["-x"]
