"""Cached ``hostjob run --rm IMAGE true`` vs ``podman run --rm IMAGE true``, same image.

    sudo python3 bench/images/run.py [--runs 20] [--warmup 3] [--hostjob PATH]

The image is the compat suite's busybox rootfs (``tests/compat/image.py``) made into an
image by ``hostjob pack`` and written as an oci-archive. hostjob imports it into a temp
store (``hostjob import``); podman loads it (``podman load``), set up exactly as the compat
harness sets it up (``tests/compat/harness.py`` ``Podman``: all state in a temp dir,
cgroupfs, no systemd, ulimits that fit this host, ``netns = "none"``) with its default
runtime, runc (``--podman-runtime crun`` for crun). Both clients then start a fresh
container that runs ``true`` and removes it, the image already local: rounds interleaved
(the order alternates every round), warm-up rounds dropped. Prints the mean, median and
minimum of each, and hostjob/podman (target: at most 0.3).

hostjob is ``--hostjob``, else ``$HOSTJOB_BIN``, else the ``hostjob`` beside this
interpreter, else a wrapper running ``python -m hostjob`` on this tree's ``src/``. Its
bytecode is cached in the work dir (``PYTHONPYCACHEPREFIX``), as an installed hostjob's is,
even when the environment sets ``PYTHONDONTWRITEBYTECODE``.
"""

from __future__ import annotations

import os as _os
import sys as _sys

_sys.path.insert(0, _os.path.join(_os.path.dirname(_os.path.abspath(__file__)), ".."))
from _venv import ensure_venv

ensure_venv()

import argparse
import contextlib
import os
import shutil
import sys
import tempfile
from pathlib import Path

BENCH = Path(__file__).resolve().parents[1]
for _path in (BENCH.parent, BENCH.parent / "src", BENCH):  # the repo, its src/, bench/
    sys.path.insert(0, str(_path))

from _common import (
    Result,
    call,
    export,
    harness,
    image,
    machine_meta,
    measure,
    note,
    timed,
)

IMAGE_NAME = "localhost/hostjob-bench/busybox:latest"
OP = "run --rm IMAGE true"
TARGET = 0.3


class Client:
    """One side of the comparison (``measure`` needs a ``name``)."""

    __slots__ = ("argv", "env", "name")

    def __init__(self, name: str, argv: list[str], env: dict[str, str] | None = None) -> None:
        self.name = name
        self.argv = argv
        self.env = env


def build_image(hostjob: Path, work: Path) -> Path:
    """``hostjob pack`` of the busybox rootfs, as an oci-archive named IMAGE_NAME."""
    rootfs = image.build_rootfs(work / "rootfs")
    archive = work / "busybox.oci.tar"
    harness.run(
        [
            hostjob,
            "pack",
            rootfs,
            "--to",
            f"oci-archive:{archive}:{IMAGE_NAME}",
            "--env",
            f"PATH={image.DEFAULT_PATH}",
            "--cmd",
            "sh",
        ],
        check=True,
        timeout=120,
    )
    return archive


def print_results(results: list[Result], baseline: str = "podman") -> None:
    base = next(r for r in results if r.runtime == baseline)
    head = (
        f"{'operation':<24} {'client':<8} {'mean ms':>9} {'± ms':>7} {'median':>8} {'min':>7}"
        f" {'n':>4} {'vs podman':>9} {'(median)':>9}"
    )
    print(head)
    print("-" * len(head))
    for r in results:
        print(
            f"{r.op:<24} {r.runtime:<8} {r.mean * 1e3:9.1f} {r.stddev * 1e3:7.1f}"
            f" {r.median * 1e3:8.1f} {min(r.times) * 1e3:7.1f} {len(r.times):4d}"
            f" {r.mean / base.mean:9.2f} {r.median / base.median:9.2f}"
        )
    ours = next(r for r in results if r.runtime == "hostjob")
    ratio = ours.mean / base.mean
    verdict = "met" if ratio <= TARGET else "NOT met"
    print(f"hostjob/podman = {ratio:.2f} (target <= {TARGET}: {verdict})")


def leftovers(hostjob: Path, state: Path, store: Path, work: Path) -> list[str]:
    """What ``hostjob run --rm`` should not have left behind."""
    bad = []
    listed = harness.run([hostjob, "--root", state, "list", "-q"], timeout=60)
    bad += [f"hostjob container {i} still listed" for i in listed.stdout.split()]
    containers = store / "containers"
    if containers.is_dir():
        bad += [f"store registration {p.name}" for p in containers.iterdir()]
    rw = store / "rw"
    if rw.is_dir():
        bad += [f"writable layer {p}" for p in rw.iterdir()]
    with open("/proc/self/mountinfo") as f:
        points = [line.split(" ")[4] for line in f]
    bad += [f"mount {p}" for p in points if p.startswith((f"{state}/", f"{store}/"))]
    return bad


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--hostjob", help="the hostjob binary (default: see above)")
    p.add_argument("--export-json", type=Path, help="write every sample here (JSON)")
    p.add_argument("--runs", type=int, default=20, help="measured rounds (default 20)")
    p.add_argument("--warmup", type=int, default=3, help="dropped rounds (default 3)")
    p.add_argument(
        "--podman-runtime",
        choices=("runc", "crun"),
        default="runc",
        help="the OCI runtime podman uses (default runc, as the compat harness configures it)",
    )
    p.add_argument("--dir", default="/var/tmp", help="where the temp work dir goes")
    args = p.parse_args(argv)
    workdir = Path(tempfile.mkdtemp(prefix="hostjob-bench-run-", dir=args.dir))
    rc = 0
    try:
        harness.require_root()
        with contextlib.ExitStack() as stack:
            hostjob = harness.find_hostjob(args.hostjob, workdir)
            note(f"hostjob: {hostjob}")
            podman_rt = harness.make_runtime(args.podman_runtime, workdir)
            note(f"podman runtime: {podman_rt.name} ({podman_rt.client_path})")
            archive = build_image(hostjob, workdir)

            store, state = workdir / "store", workdir / "state"
            imported = harness.run(
                [hostjob, "import", "--store", store, "-q", f"oci-archive:{archive}"],
                check=True,
                timeout=120,
            )
            note(f"image {IMAGE_NAME} {imported.stdout.strip()} (hostjob pack, busybox)")

            pm = harness.Podman(workdir / "podman", [podman_rt])
            stack.callback(_report, "podman", pm.teardown)
            pm.setup()
            pm.load_image(archive, IMAGE_NAME)

            hostjob_run = [
                str(hostjob), "--root", str(state), "run", "--rm", "--store", str(store),
                "--pull", "never", "--quiet", IMAGE_NAME, "true",
            ]  # fmt: skip
            # Bytecode cached as an installed hostjob has it, even when this environment
            # says PYTHONDONTWRITEBYTECODE (compiling every module would dominate a run).
            hostjob_env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
            hostjob_env["PYTHONPYCACHEPREFIX"] = str(workdir / "pycache")
            clients = [
                Client("hostjob", hostjob_run, hostjob_env),
                Client(
                    "podman", [*pm.base_args(podman_rt), "run", "--rm", IMAGE_NAME, "true"], pm.env
                ),
            ]
            for c in clients:  # one verbose round first, so that a broken client says why
                harness.run(c.argv, env=c.env, timeout=120, check=True)

            def one(op: str, c: Client, i: int) -> float:
                def go() -> None:
                    status = call(c.argv, c.env)
                    if status != 0:
                        raise harness.HarnessError(f"{c.name} {op} exited {status}")

                return timed(go)

            note(f"{args.warmup} warm-up + {args.runs} measured rounds, clients interleaved")
            results = measure((OP,), clients, one, args.runs, args.warmup)
            print_results(results)
            for problem in leftovers(hostjob, state, store, workdir):
                note(f"WARNING (hostjob): {problem}")
            meta = {
                "bench": "images/run",
                "image": IMAGE_NAME,
                "hostjob": str(hostjob),
                "podman_runtime": str(podman_rt.path),
                **machine_meta([podman_rt]),
            }
            export(args.export_json, results, meta)
    except harness.HarnessError as e:
        print(f"bench/images/run.py: error: {e}", file=sys.stderr)
        rc = 1
    finally:
        harness.unmount_all_under(workdir)
        shutil.rmtree(workdir, ignore_errors=True)
    return rc


def _report(what: str, stop: object) -> None:
    assert callable(stop)
    for problem in stop():
        note(f"WARNING ({what}): {problem}")


if __name__ == "__main__":
    sys.exit(main())
