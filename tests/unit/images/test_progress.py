"""Progress events and their renderers."""

from __future__ import annotations

import io

from hostjob.images import progress
from hostjob.images.progress import Event

D = "sha256:" + "ab" * 32


def test_plain_renderer_one_line_per_step():
    out = io.StringIO()
    render = progress.renderer(stream=out)
    assert isinstance(render, progress.PlainRenderer)
    render(Event(progress.RESOLVING, "docker.io/library/busybox:latest"))
    for n in (0, 100, 2000):
        render(Event(progress.DOWNLOADING, D, n, 2000, 1000.0))
    render(Event(progress.VERIFYING, D, 2000, 2000))
    render(Event(progress.UNPACKING, D, 10, 2000))
    render(Event(progress.UNPACKING, D, 2000, 2000))
    render(Event(progress.DONE, D, 2000, 2000))
    progress.close(render)
    assert out.getvalue().splitlines() == [
        "resolving docker.io/library/busybox:latest",
        "downloading abababababab (2.0 kB)",
        "verifying abababababab",
        "unpacking abababababab (2.0 kB)",
        "done abababababab",
    ]


def test_quiet():
    out = io.StringIO()
    render = progress.renderer(quiet=True, stream=out)
    render(Event(progress.RESOLVING, "x"))
    assert out.getvalue() == ""


def test_rich_renderer_draws_bars():
    out = io.StringIO()
    render = progress.RichRenderer(out)
    render(Event(progress.RESOLVING, "busybox"))
    render(Event(progress.DOWNLOADING, D, 1000, 2000, 500.0))
    render(Event(progress.DONE, D, 2000, 2000))
    render(Event(progress.DONE, "docker.io/library/busybox:latest"))
    render.close()
    text = out.getvalue()
    assert "resolving busybox" in text and "abababababab" in text


def test_meter_throttles_and_reports_speed():
    seen = []
    meter = progress.Meter(seen.append, progress.DOWNLOADING, D, 100)
    for n in range(1, 101):
        meter(n)
    assert 1 <= len(seen) <= 3 and seen[-1].current == 100
    assert seen[-1].speed is None or seen[-1].speed > 0
    assert seen[0].to_json()["kind"] == "downloading"
