"""A registry cannot make root's hostjob hold what it sends, nor hold it for ever.

Stub registries on 127.0.0.1 answer a pull with 160 MiB of error body (a 404, a 503
that is retried, a token realm's answer, a manifest over its cap) or drip their
answer one byte a second. The pull runs as the real command; its peak RSS is read
from the kernel (``wait4``). Each attack is first shown to work against a client
that reads what it is sent (httpx as such: it holds the whole body; its per-read
timeouts never fire on a drip), then against hostjob: a one-line error, under
64 MiB, within the stall timeout.
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

import pytest

from tests.fixtures.hostile_registry import MIB, Drip, Flood, peak_rss
from tests.fixtures.images import OCI_MANIFEST, write_layout
from tests.helpers import hostjob_cmd, hostjob_env

FLOOD = 160 * MIB
RSS_LIMIT = 64 * MIB
REPO = "test/img:v1"


def hostjob_pull(store: Path, host: str, *extra: str, timeout: float = 120) -> tuple[int, str, int]:
    argv = [*hostjob_cmd(), "pull", "-q", "--store", str(store), "--plain-http", *extra]
    code, err, rss = peak_rss([*argv, f"{host}/{REPO}"], env=hostjob_env(), timeout=timeout)
    lines = err.strip().splitlines()
    assert code == 1 and len(lines) == 1, err  # one line, whatever came
    return code, lines[0], rss


def plain_client(url: str, timeout: float = 60) -> tuple[int, str, int]:
    """What a client that reads the answer whole does: httpx's ``get``."""
    script = f"import httpx; httpx.get({url!r}, timeout=2).content"
    return peak_rss([sys.executable, "-c", script], timeout=timeout)


def test_the_flood_takes_a_reading_client_over_the_limit() -> None:
    """The attack works where nothing bounds the read: httpx holds the 160 MiB."""
    with Flood(404, FLOOD) as stub:
        code, _err, rss = plain_client(f"{stub.url}/v2/{REPO.replace(':', '/manifests/')}")
    assert code == 0 and rss > FLOOD


@pytest.mark.parametrize(
    ("status", "expect"),
    [
        (404, "HTTP 404"),
        (500, "HTTP 500"),
        (503, "HTTP 503"),
        (200, "manifest is too large"),
    ],
)
def test_a_huge_answer_is_never_held(tmp_path: Path, status: int, expect: str) -> None:
    """An error's body is read up to 64 KiB, a transient one (5xx, retried) not at all,
    a manifest up to its 4 MiB cap: the stub never gets to send most of its flood."""
    with Flood(status, FLOOD, content_type=OCI_MANIFEST) as stub:
        _code, line, rss = hostjob_pull(tmp_path / "store", stub.host)
        assert expect in line and stub.host in line
        manifest_gets = [r for r in stub.requests if "/manifests/" in r]
        assert len(manifest_gets) == (6 if status >= 500 else 1)  # 5xx: retried 5 times
        assert stub.sent < 32 * MIB * len(manifest_gets), "the client read the flood"
    assert rss < RSS_LIMIT, f"peak RSS {rss / MIB:.0f} MiB"


def test_a_token_realms_flood_is_never_held(tmp_path: Path) -> None:
    with Flood(200, FLOOD, only="/token") as realm:
        challenge = f'Bearer realm="{realm.url}/token",service="x",scope="repository:test/img:pull"'
        with Flood(401, 10, challenge=challenge, only="/v2/test") as registry:
            _code, line, rss = hostjob_pull(
                tmp_path / "store", registry.host, "--creds", "alice:pw"
            )
        assert f"token server {realm.url}/token sent more than 1 MiB" in line
        assert realm.requests and realm.sent < 32 * MIB
    assert rss < RSS_LIMIT, f"peak RSS {rss / MIB:.0f} MiB"


def test_a_drip_holds_a_client_with_per_read_timeouts() -> None:
    """The attack works where only each read is timed: a byte a second never trips a
    2 s read timeout, and the client is still waiting when it is killed."""
    with Drip(interval=0.5) as stub:
        started = time.monotonic()
        code, _err, _rss = plain_client(f"http://{stub.host}/v2/x/manifests/v1", timeout=6)
        assert code == -9 and time.monotonic() - started >= 6


@pytest.mark.parametrize("headers", [False, True], ids=["body", "headers"])
def test_a_drip_feed_registry_fails_within_the_stall_timeout(tmp_path: Path, headers: bool) -> None:
    with Drip(interval=1.0, headers=headers) as stub:
        started = time.monotonic()
        _code, line, _rss = hostjob_pull(tmp_path / "store", stub.host, "--stall-timeout", "3s")
        took = time.monotonic() - started
    assert line.startswith(f"{stub.host}: no progress for 3s")
    assert "--stall-timeout" in line
    assert 3 <= took < 15, took


def test_run_images_pull_keeps_the_stall_timeout(tmp_path: Path) -> None:
    with Drip(interval=1.0) as stub:
        argv = [*hostjob_cmd(), "--root", str(tmp_path / "state"), "run", "--rm", "-q",
                "--store", str(tmp_path / "store"), "--plain-http", "--stall-timeout", "2s",
                f"{stub.host}/{REPO}", "true"]  # fmt: skip
        started = time.monotonic()
        code, err, _rss = peak_rss(argv, env=hostjob_env(), timeout=60)
        took = time.monotonic() - started
    assert code == 1 and f"{stub.host}: no progress for 2s" in err, err
    assert took < 15
    assert not (tmp_path / "state").exists() or os.listdir(tmp_path / "state") == []


def test_a_registry_that_reads_an_upload_a_byte_at_a_time_fails_a_push(tmp_path: Path) -> None:
    """The same deadline for what we send: a push to a registry that takes its blob a
    byte a second fails within the stall timeout (the blob is bigger than the socket
    buffers on both sides)."""
    from tests.fixtures.hostile_registry import SlowUpload
    from tests.fixtures.tars import entry, make_tar

    layout = tmp_path / "layout"
    write_layout(
        str(layout), [make_tar([entry("big", data=os.urandom(24 * MIB))])], compress="none"
    )
    with SlowUpload() as stub:
        argv = [*hostjob_cmd(), "push", "-q", "--plain-http", "--stall-timeout", "3s",
                f"oci:{layout}:latest", f"{stub.host}/{REPO}"]  # fmt: skip
        started = time.monotonic()
        code, err, _rss = peak_rss(argv, env=hostjob_env(), timeout=120)
        took = time.monotonic() - started
        assert stub.uploads, "the upload started"
    assert code == 1 and f"{stub.host}: no progress for 3s" in err, err
    assert took < 30
