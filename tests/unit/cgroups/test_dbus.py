"""hostjob.cgroups.dbus, without root: its messages read back by a maintained client (jeepney) and
the other way round, and a conversation with a real bus -- Debian's dbus-daemon on a
socket of the test's own (``--session`` rules), never the host's system bus."""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from hostjob.cgroups import dbus

jeepney = pytest.importorskip("jeepney", reason="the test extra installs jeepney")
from jeepney.low_level import Parser  # noqa: E402

SAMPLES = [
    ("s", ["hostjob-t1.scope"]),
    ("ssa(sv)a(sa(sv))", [
        "hostjob-t1.scope", "fail",
        [("Description", ("s", "hostjob container t1")), ("Delegate", ("b", True)),
         ("PIDs", ("au", [4242])), ("MemoryMax", ("t", 1 << 30)),
         ("AllowedCPUs", ("ay", b"\x05")), ("IOReadBandwidthMax", ("a(st)", [("/dev/block/8:0", 10)]))],
        [],
    ]),
    ("sba(sv)", ["u.scope", True, [("TasksMax", ("t", 64))]]),
    ("a{sv}", [{"a": ("u", 1), "b": ("as", ["x", "y"])}]),
    ("yqiuxtdb", [7, 65535, -3, 4000000000, -(1 << 40), 1 << 63, 0.5, False]),
]  # fmt: skip


def as_jeepney(signature: str, value: object) -> object:
    """Our Python shape of a value, as jeepney writes it (it takes tuples for structs
    and variants alike, and bytes for ay)."""
    if signature == "v":
        inner, inner_value = value  # type: ignore[misc]
        return (inner, as_jeepney(inner, inner_value))
    if signature.startswith("a{"):
        _key, val = dbus.split_signature(signature[2:-1])
        return {k: as_jeepney(val, v) for k, v in value.items()}  # type: ignore[attr-defined]
    if signature == "ay":
        return bytes(value)  # type: ignore[arg-type]
    if signature.startswith("a"):
        return [as_jeepney(signature[1:], v) for v in value]  # type: ignore[attr-defined]
    if signature.startswith("("):
        parts = dbus.split_signature(signature[1:-1])
        return tuple(as_jeepney(p, v) for p, v in zip(parts, value, strict=True))  # type: ignore[call-overload]
    return value


@pytest.mark.parametrize(("signature", "args"), SAMPLES, ids=[s for s, _ in SAMPLES])
def test_our_calls_read_as_jeepney_reads_them(signature: str, args: list[object]) -> None:
    raw = dbus.encode_call(9, "org.freedesktop.systemd1", "/org/freedesktop/systemd1",
                           "org.freedesktop.systemd1.Manager", "StartTransientUnit",
                           signature, args)  # fmt: skip
    parser = Parser()
    parser.add_data(raw)
    message = parser.get_next_message()
    assert message is not None and parser.get_next_message() is None
    assert message.header.fields[jeepney.HeaderFields.member] == "StartTransientUnit"
    assert message.header.fields[jeepney.HeaderFields.signature] == signature
    expected = tuple(
        as_jeepney(k, v) for k, v in zip(dbus.split_signature(signature), args, strict=True)
    )
    assert message.body == expected
    assert dbus.message_size(raw[:16]) == len(raw)
    ours = dbus.decode(raw)
    assert ours.member == "StartTransientUnit" and len(ours.body) == len(args)


@pytest.mark.parametrize(("signature", "args"), SAMPLES, ids=[s for s, _ in SAMPLES])
def test_jeepneys_messages_read_as_ours(signature: str, args: list[object]) -> None:
    from jeepney import new_method_call
    from jeepney.wrappers import DBusAddress

    address = DBusAddress("/org/freedesktop/systemd1", "org.freedesktop.systemd1",
                          "org.freedesktop.systemd1.Manager")  # fmt: skip
    body = tuple(
        as_jeepney(k, v) for k, v in zip(dbus.split_signature(signature), args, strict=True)
    )
    raw = new_method_call(address, "SetUnitProperties", signature, body).serialise(serial=3)
    message = dbus.decode(raw)
    assert message.member == "SetUnitProperties" and message.serial == 3
    again = dbus.marshal_body(signature, message.body)
    assert again == dbus.marshal_body(signature, args)  # the same bytes both ways


@given(st.lists(st.tuples(st.text(max_size=8), st.integers(0, 2**64 - 1)), max_size=6))
def test_arrays_of_structs_round_trip(items: list[tuple[str, int]]) -> None:
    body = dbus.marshal_body("a(st)u", [items, 7])
    assert dbus.unmarshal_body("a(st)u", body) == [[tuple(i) for i in items], 7]


def test_bad_signatures_and_truncated_messages_are_errors() -> None:
    with pytest.raises(dbus.DBusError):
        dbus.split_signature("a(s")
    with pytest.raises(dbus.DBusError):
        dbus.split_signature("z")
    raw = dbus.encode_call(1, None, "/", "i.f", "M", "s", ["abc"])
    with pytest.raises(dbus.DBusError):
        dbus.decode(raw[:-3])
    with pytest.raises(dbus.DBusError):
        dbus.decode(b"B" + raw[1:])


@pytest.fixture
def bus(tmp_path: Path) -> Iterator[str]:
    daemon = shutil.which("dbus-daemon")
    if daemon is None:
        pytest.fail("dbus-daemon is missing: scripts/install --peers vm installs dbus")
    socket = tmp_path / "bus"
    proc = subprocess.Popen(
        [daemon, "--session", "--nofork", "--nopidfile", f"--address=unix:path={socket}"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 10
        while not socket.exists():
            assert time.monotonic() < deadline, "dbus-daemon did not start"
            time.sleep(0.01)
        yield str(socket)
    finally:
        proc.terminate()
        proc.wait(10)


def test_a_conversation_with_a_real_bus(bus: str) -> None:
    with dbus.Connection(bus, peer_to_peer=False) as conn:
        (names,) = conn.call("org.freedesktop.DBus", "/org/freedesktop/DBus",
                             "org.freedesktop.DBus", "ListNames")  # fmt: skip
        assert "org.freedesktop.DBus" in names
        # the bus told us our name after Hello: a signal that came before a reply
        acquired = conn.wait_signal("org.freedesktop.DBus", "NameAcquired", 5)
        assert acquired.body[0].startswith(":") and acquired.body[0] in names
        with pytest.raises(dbus.DBusError) as caught:
            conn.call("org.freedesktop.DBus", "/org/freedesktop/DBus",
                      "org.freedesktop.DBus", "GetNameOwner", "s", ["org.example.None"])  # fmt: skip
        assert caught.value.name == "org.freedesktop.DBus.Error.NameHasNoOwner"
        with pytest.raises(dbus.DBusError, match="no Nothing from D-Bus"):
            conn.wait_signal("org.example", "Nothing", 0.2)


def test_a_bus_that_is_not_there(tmp_path: Path) -> None:
    with pytest.raises(dbus.DBusError, match="cannot talk to D-Bus"):
        dbus.Connection(str(tmp_path / "none"), peer_to_peer=False)
    assert os.geteuid() >= 0
