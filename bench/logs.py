"""A detached container's log: ``hostjob logs`` vs ``podman logs`` (k8s-file) vs ``cat``.

    sudo python3 bench/logs.py [--megabytes 70] [--runs 5] [--hostjob PATH]

Each client runs the same busybox image (``tests/compat/image.py``, packed by ``hostjob
pack``), detached, printing ``--megabytes`` MB of 92-byte log lines (``yes LINE | head
-c N``) -- about 100 MB of log in the CRI format both write. It reports:

* ingest: how long until the whole output is in the log (``run -d`` to the last line
  on disk): hostjob's watcher vs podman's conmon;
* read: ``logs NAME > /dev/null`` of the finished log (median of ``--runs``), in MB of
  log per second, beside ``cat`` of the same file (the page cache's speed) and
  ``logs --tail 100`` and ``logs --timestamps``.

podman is set up as the compat harness sets it up (``tests/compat/harness.py``
``Podman``: all state in a temp dir, cgroupfs, runc, ``log_driver = "k8s-file"``).
"""

from __future__ import annotations

import os as _os
import sys as _sys

_sys.path.insert(0, _os.path.join(_os.path.dirname(_os.path.abspath(__file__))))
from _venv import ensure_venv

ensure_venv()

import argparse
import contextlib
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

BENCH = Path(__file__).resolve().parent
for _path in (BENCH.parent, BENCH.parent / "src", BENCH):
    sys.path.insert(0, str(_path))

from _common import harness, image, note

IMAGE_NAME = "localhost/hostjob-bench/busybox:latest"
LINE = 'level=info ts=2026-12-01T10:00:00Z caller=collector.go:169 msg="collector done" name=cpu'


def script(megabytes: int) -> str:
    return f"yes '{LINE}' | head -c {megabytes * 1_000_000}; echo END-OF-LOG"


def wait_for_end(path: Path, start: float, timeout: float = 300) -> float:
    """Seconds from ``start`` until ``path`` ends with the END-OF-LOG line."""
    while time.monotonic() - start < timeout:
        try:
            with open(path, "rb") as f:
                f.seek(max(0, path.stat().st_size - 200))
                if b"END-OF-LOG" in f.read():
                    return time.monotonic() - start
        except OSError:
            pass
        time.sleep(0.01)
    raise harness.HarnessError(f"{path} never got its last line")


def read_seconds(argv: list[str], env: dict[str, str] | None, runs: int) -> float:
    times = []
    with open(os.devnull, "wb") as null:
        for _ in range(runs):
            start = time.perf_counter()
            subprocess.run(argv, stdout=null, stderr=null, env=env, check=True, timeout=600)
            times.append(time.perf_counter() - start)
    return statistics.median(times)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--hostjob", help="the hostjob binary (default: the installed one)")
    p.add_argument("--megabytes", type=int, default=70, help="output per container (70)")
    p.add_argument("--runs", type=int, default=5, help="reads of each log (median; 5)")
    p.add_argument("--dir", default="/var/tmp", help="where the temp work dir goes")
    p.add_argument("--no-podman", action="store_true", help="hostjob and cat only")
    args = p.parse_args(argv)
    workdir = Path(tempfile.mkdtemp(prefix="hj-bench-logs-", dir=args.dir))
    try:
        harness.require_root()
        with contextlib.ExitStack() as stack:
            hostjob = harness.find_hostjob(args.hostjob, workdir)
            rootfs = image.build_rootfs(workdir / "rootfs")
            archive = workdir / "busybox.oci.tar"
            harness.run(
                [hostjob, "pack", rootfs, "--to", f"oci-archive:{archive}:{IMAGE_NAME}",
                 "--env", f"PATH={image.DEFAULT_PATH}", "--entrypoint", "sh", "--cmd", "-c"],
                check=True, timeout=120,
            )  # fmt: skip
            store, state = workdir / "store", workdir / "state"
            harness.run([hostjob, "import", "--store", store, "-q", f"oci-archive:{archive}"],
                        check=True, timeout=120)  # fmt: skip
            base = [str(hostjob), "--root", str(state)]
            stack.callback(lambda: subprocess.run([*base, "delete", "--force", "bench-logs"],
                                                  capture_output=True, check=False))  # fmt: skip
            started = time.monotonic()
            harness.run(
                [*base, "run", "-d", "-q", "--store", store, "--name", "bench-logs",
                 "--log-max-size", "1g", IMAGE_NAME, "-c", script(args.megabytes)],
                check=True, timeout=120,
            )  # fmt: skip
            log = store / "logs" / "bench-logs" / "container.log"
            ingest = wait_for_end(log, started)
            size = log.stat().st_size / 1e6
            rows = [
                ("hostjob", "ingest (watcher)", ingest),
                ("hostjob", "logs", read_seconds([*base, "logs", "bench-logs"], None, args.runs)),
                ("hostjob", "logs --timestamps",
                 read_seconds([*base, "logs", "-t", "bench-logs"], None, args.runs)),
                ("hostjob", "logs --tail 100",
                 read_seconds([*base, "logs", "--tail", "100", "bench-logs"], None, args.runs)),
                ("cat", "the same file", read_seconds(["cat", str(log)], None, args.runs)),
            ]  # fmt: skip
            sizes = {"hostjob": size, "cat": size}
            if not args.no_podman:
                runc = harness.make_runtime("runc", workdir)
                pm = harness.Podman(workdir / "podman", [runc])
                stack.callback(pm.teardown)
                pm.setup()
                pm.load_image(archive, IMAGE_NAME)
                started = time.monotonic()
                pm.podman("run", "-d", "--name", "bench-logs", "--entrypoint", "sh",
                          IMAGE_NAME, "-c", script(args.megabytes), runtime=runc, check=True,
                          timeout=120)  # fmt: skip
                path = Path(pm.inspect("bench-logs", "{{.HostConfig.LogConfig.Path}}"))
                rows.append(("podman", "ingest (conmon)", wait_for_end(path, started)))
                sizes["podman"] = path.stat().st_size / 1e6
                rows.append(("podman", "logs", read_seconds(
                    [*pm.base_args(runc), "logs", "bench-logs"], pm.env, args.runs)))  # fmt: skip
                pm.podman("rm", "-f", "bench-logs", timeout=120)
            print(f"{'client':<8} {'what':<20} {'seconds':>8} {'MB of log/s':>12}")
            for client, what, seconds in rows:
                mb = sizes[client]
                print(f"{client:<8} {what:<20} {seconds:8.3f} {mb / seconds:12.0f}")
            print(f"log sizes (MB): {', '.join(f'{k} {v:.1f}' for k, v in sizes.items())}")
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    return 0


if __name__ == "__main__":
    note("bench/logs.py")
    sys.exit(main())
