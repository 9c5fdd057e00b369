"""``exec``'s process from the container's and the flags (``process_for_exec``), without
root: the ``--user`` forms runc and hostjob take, and what is no ID at all."""

from __future__ import annotations

import pytest

from hostjob.errors import InvalidArgument
from hostjob.runtime.verbs.execute import process_for_exec
from hostjob.specconv.jobconfig import ProcessConfig
from hostjob.units import parse_id


def base() -> ProcessConfig:
    process: ProcessConfig = ProcessConfig.decode(
        {"args": ["sh"], "env": [], "cwd": "/", "uid": 5, "gid": 5, "additionalGids": [9]},
        "process",
    )
    return process


@pytest.mark.parametrize(
    ("user", "ids"),
    [("7", (7, 0, None)), ("7:8", (7, 8, None)), ("0:0", (0, 0, None)),
     ("4294967294:1", (4294967294, 1, None)),
     ("alice", (None, None, "alice")), ("alice:staff", (None, None, "alice:staff")),
     ("7:staff", (None, None, "7:staff")), ("²", (None, None, "²"))],
)  # fmt: skip
def test_the_user_forms(user: str, ids: tuple[int | None, int | None, str | None]) -> None:
    process = process_for_exec(base(), ["id"], user=user)
    assert (process.uid, process.gid, process.username) == ids
    assert process.additional_gids == []  # the container's groups are not the new user's


@pytest.mark.parametrize("user", ["4294967295", "99999999999", "7:4294967296", "1:00000000009"])
def test_a_number_that_is_no_id_is_refused(user: str) -> None:
    with pytest.raises(InvalidArgument, match="out of range"):
        process_for_exec(base(), ["id"], user=user)


def test_without_a_user_the_containers_is_kept() -> None:
    process = process_for_exec(base(), ["id"])
    assert (process.uid, process.gid, process.additional_gids) == (5, 5, [9])


@pytest.mark.parametrize(
    ("text", "value"),
    [("0", 0), ("1000", 1000), ("4294967294", 4294967294), ("4294967295", None),
     ("99999999999", None), ("", None), ("-1", None), ("²", None), ("١٢", None), ("1e3", None)],
)  # fmt: skip
def test_parse_id(text: str, value: int | None) -> None:
    assert parse_id(text) == value
