"""Nothing of a container reaches the operator's terminal raw through the runtime's own
tables, ``list`` and ``stats``.

A mount point comes from an annotation, which a client passes on from a pod (or a
bundle's author writes): one holding OSC 0 (the terminal's title), OSC 52 (its
clipboard: the operator's next paste) and a newline with a fake row after it. First
shown: the value as the record keeps it holds those controls, and printed as a cell it
is two rows. Then harmless: ``list`` prints it escaped, one row, no control character;
``stats`` likewise.
"""

from __future__ import annotations

import json
from pathlib import Path

from tests.fixtures.terminal import assert_no_controls, controls
from tests.helpers import Hostjob, base_config, make_bundle, new_id

HOSTILE = "\x1b]0;owned-title\x07\x1b]52;c;b3duZWQ=\x07\nfake-row   4242   running"


def test_a_hostile_mount_point_in_list_and_stats(hj_open: Hostjob, open_tmp: Path) -> None:
    mount_point = f"{open_tmp}/mp{HOSTILE}"
    annotations = {"io.hostjob.rootfs-mount-point": mount_point}
    bundle = make_bundle(open_tmp / "bundle", base_config("sleep", "600", annotations=annotations))
    container = new_id("m")
    hj_open.ok("create", "--bundle", str(bundle), container)
    hj_open.ok("start", container)

    # What the record holds, as a cell printed raw would show it.
    listed = json.loads(hj_open.ok("list", "--format", "json"))
    raw = next(s for s in listed if s["id"] == container)["annotations"][
        "io.hostjob.rootfs-mount-point"
    ]
    assert raw == mount_point and controls(raw)
    assert len(f"{container}   {raw}".splitlines()) == 2  # a forged second row

    table = hj_open.ok("list")
    assert_no_controls(table, what="hostjob list")
    lines = table.splitlines()
    assert len(lines) == 2 and lines[1].startswith(container)
    assert "\\x1b]0;owned-title\\x07" in lines[1] and "\\nfake-row" in lines[1]
    stats = hj_open.ok("stats", "--no-stream")
    assert_no_controls(stats, what="hostjob stats")
    assert [line.split()[0] for line in stats.splitlines()[1:]] == [container]
    hj_open.ok("delete", "--force", container)
    assert not Path(mount_point).exists()
