"""bench/clients: ``ctr run --rm IMAGE true``, ``podman run --rm IMAGE true`` and ``docker run
--rm IMAGE true`` with each runtime (``--runc-binary`` / ``--runtime``), interleaved in one
run; ratios against runc.

containerd, podman and docker are set up exactly as the compat tests set them up
(``tests/compat/harness.py``, ``tests/compat/docker.py``: all state in a temp dir, cgroupfs,
ulimits that fit this host, no network setup; docker's containers with ``--network host``,
hostjob in host mode), with the test image (busybox) built locally and imported into each.
"""

from __future__ import annotations

import contextlib
import shutil
import sys
import tempfile
from pathlib import Path

from _common import (
    call,
    common_args,
    export,
    harness,
    image,
    machine_meta,
    measure,
    note,
    print_table,
    report_problems,
    resolve_runtimes,
    timed,
)

OPS = ("ctr run --rm IMAGE true", "podman run --rm IMAGE true", "docker run --rm IMAGE true")


def main(argv: list[str] | None = None) -> int:
    from tests.compat import docker as dockerd  # on the path _common puts the repository on

    p = common_args(__doc__ or "")
    p.add_argument("--runs", type=int, default=15, help="measured rounds (default 15)")
    p.add_argument("--warmup", type=int, default=2, help="dropped rounds (default 2)")
    p.add_argument(
        "--clients",
        default="ctr,podman,docker",
        help="which clients to time (default: ctr,podman,docker)",
    )
    args = p.parse_args(argv)
    clients = {c.strip() for c in args.clients.split(",") if c.strip()}
    ops = tuple(op for op in OPS if op.split()[0] in clients)
    if not ops:
        p.error("--clients names none of ctr, podman, docker")
    workdir = Path(tempfile.mkdtemp(prefix="hostjob-bench-clients-"))
    rc = 0
    try:
        harness.require_root()
        with contextlib.ExitStack() as stack:
            traces = harness.HostTraces()
            stack.callback(traces.cleanup)
            runtimes = resolve_runtimes(args, workdir, stack)
            img = image.build_oci_image(workdir / "image")

            ctd = harness.Containerd(workdir / "containerd")
            stack.callback(report_problems, "containerd", ctd.stop)
            pm = harness.Podman(workdir / "podman", runtimes)
            stack.callback(report_problems, "podman", pm.teardown)
            dk = dockerd.Docker(workdir / "docker", runtimes)
            stack.callback(report_problems, "docker", dk.stop)
            if "ctr" in clients:
                ctd.start()
                ctd.import_image(img.archive, img.ref)
            if "podman" in clients:
                pm.setup()
                pm.load_image(img.archive, img.ref)
            if "docker" in clients:
                dk.start()
                dk.import_image(img.ref)

            def ctr_argv(r: harness.Runtime, i: int) -> list[str]:
                return [
                    "ctr", "--address", str(ctd.address), "--namespace", ctd.namespace,
                    "run", "--rm", "--runc-binary", str(r.client_path), img.ref,
                    f"bench-{r.name}-{i}", "true",
                ]  # fmt: skip

            def podman_argv(r: harness.Runtime) -> list[str]:
                return [*pm.base_args(r), "run", "--rm", img.ref, "true"]

            def docker_argv(r: harness.Runtime) -> list[str]:
                # hostjob by its own name: host mode, as the other clients run it
                words = ["run", "--rm", "--runtime", r.name, "--network", "host", img.ref, "true"]
                return dk.argv(*words)

            # one verbose round first, so that a broken runtime says why
            for r in runtimes:
                if "ctr" in clients:
                    ctd.ctr(*ctr_argv(r, 0)[5:], timeout=120, check=True)
                if "podman" in clients:
                    harness.run(podman_argv(r), env=pm.env, timeout=120, check=True)
                if "docker" in clients:
                    harness.run(docker_argv(r), env=dk.env, timeout=120, check=True)

            def one(op: str, r: harness.Runtime, i: int) -> float:
                def go() -> None:
                    if op.startswith("ctr"):
                        st = call(ctr_argv(r, i + 1))
                    elif op.startswith("docker"):
                        st = call(docker_argv(r), env=dk.env)
                    else:
                        st = call(podman_argv(r), env=pm.env)
                    if st != 0:
                        raise harness.HarnessError(f"{op} with {r.name} exited {st}")

                return timed(go)

            note(f"{args.warmup} warm-up + {args.runs} measured rounds, runtimes interleaved")
            results = measure(ops, runtimes, one, args.runs, args.warmup)
            print_table(results)
            export(args.export_json, results, {"bench": "clients", **machine_meta(runtimes)})
    except harness.HarnessError as e:
        print(f"bench/clients: error: {e}", file=sys.stderr)
        rc = 1
    finally:
        harness.unmount_all_under(workdir)
        shutil.rmtree(workdir, ignore_errors=True)
    return rc


__all__ = ["main"]
