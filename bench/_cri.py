"""bench/cri: pod start through containerd's CRI, the runc and hostjob handlers in one
containerd, rounds interleaved (the order rotates every round).

A pod is HostProcess-style (the node's network, PID and IPC namespaces, kubelet's hosts,
termination-log and token mounts: ``tests/cri/kubelet.py``'s), its container busybox
``sleep``. Measured per pod, wall clock: from ``RunPodSandbox`` to ``StartContainer``'s
answer (the container started). One pod at a time (``--rounds``), then bursts of
``--burst`` pods started at once (``--bursts``), each pod's own latency. Printed: p50 and
p99 per handler, and hostjob's ratio to runc at each. The containerd, images, kubelet
directories and cgroups are the CRI suite's (``tests/cri``), in a temp dir. Root only; run
with the venv's Python (the CRI client): ``.venv/bin/python bench/cri``.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import statistics
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

import _cri_breakdown as breakdown
from tests.compat import harness
from tests.compat.image import build_rootfs
from tests.cri import kubelet
from tests.cri.conftest import _pack, build_pause, cri_config

HANDLERS = ("runc", "hostjob")
COMMAND = ["sleep", "3600"]


def images(work: Path) -> list[tuple[Path, str]]:
    pause_dir = work / "pause"
    pause_dir.mkdir(parents=True)
    build_pause(pause_dir / "pause")
    pause = work / "pause.oci.tar"
    _pack(pause_dir, pause, kubelet.PAUSE_IMAGE, "--entrypoint", "/pause")
    tools = work / "tools.oci.tar"
    _pack(build_rootfs(work / "tools"), tools, kubelet.TOOLS_IMAGE,
          "--env", "PATH=/usr/sbin:/usr/bin:/sbin:/bin")  # fmt: skip
    return [(pause, kubelet.PAUSE_IMAGE), (tools, kubelet.TOOLS_IMAGE)]


def one_pod(
    node: kubelet.Node,
    name: str,
    out: list[float],
    problems: list[str],
    record: breakdown.PodRecord | None = None,
    ids: set[str] | None = None,
) -> None:
    """One pod started, timed and deleted; with ``record``, its breakdown's figures (taken
    while it runs); its sandbox and container IDs into ``ids``."""
    pod = node.pod(name)
    timed = node.runtime if isinstance(node.runtime, breakdown.TimedRuntime) else None
    if timed:
        timed.calls().clear()
    try:
        start = time.perf_counter()
        began = time.monotonic()
        pod.run()
        c = pod.run_container("c", COMMAND)
        out.append(time.perf_counter() - start)
        if record is not None and timed:
            # while the pod runs (outside the measured latency): its shim and processes
            record.start, record.end = began, time.monotonic()
            record.sandbox_id, record.container_id = pod.sandbox_id, c.id
            record.calls = list(timed.calls())
            record.snap = breakdown.snapshot(pod.sandbox_id, pod.cgroup_parent, pod.uid)
    except Exception as err:  # reported: the round goes on
        problems.append(f"{node.handler} {name}: {err}")
    finally:
        if ids is not None:
            ids.update([pod.sandbox_id, *(c.id for c in pod.containers)])
        problems.extend(pod.delete(grace=0))
        if pod in node.pods:
            node.pods.remove(pod)


def burst(
    node: kubelet.Node, size: int, tag: str, out: list[float], problems: list[str], ids: set[str]
) -> None:
    threads = [
        threading.Thread(target=one_pod, args=(node, f"b{tag}-{i}", out, problems, None, ids))
        for i in range(size)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()


def quantile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def main() -> int:
    parser = argparse.ArgumentParser(prog="bench/cri", description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=20, help="single pods per handler")
    parser.add_argument("--burst", type=int, default=30, help="pods in a burst")
    parser.add_argument("--bursts", type=int, default=3, help="bursts per handler")
    parser.add_argument("--warmup", type=int, default=2, help="rounds dropped first")
    parser.add_argument("--hostjob", help="the hostjob to measure (default: the venv's)")
    parser.add_argument("--json", help="write the samples (and the breakdown) here")
    parser.add_argument(
        "--no-breakdown",
        action="store_true",
        help="no runtime wrapper and no per-pod breakdown: the latency alone",
    )
    args = parser.parse_args()
    if os.geteuid() != 0:
        print("bench/cri: needs root", file=sys.stderr)
        return 2
    work = Path(tempfile.mkdtemp(prefix="hj-bench-cri-"))
    traces = harness.HostTraces()
    hostjob = harness.find_hostjob(args.hostjob, workdir=work)
    logs: dict[str, Path] = {}
    if not args.no_breakdown:
        runc = Path(shutil.which("runc") or "runc").resolve()
        hostjob, logs["hostjob"] = breakdown.build_wrapper(work, "hostjob", hostjob)
        runc_wrapper, logs["runc"] = breakdown.build_wrapper(work, "runc", runc)
    config = cri_config(work, hostjob, work / "runtime-root", work / "runc-root")
    if logs:
        config = breakdown.with_runc_binary(config, work / "runc-root", runc_wrapper)
    ctd = harness.Containerd(work / "containerd", namespace="k8s.io", cri=config)
    nodes: dict[str, kubelet.Node] = {}
    problems: list[str] = []
    samples: dict[str, dict[str, list[float]]] = {h: {"single": [], "burst": []} for h in HANDLERS}
    records: dict[str, list[breakdown.PodRecord]] = {h: [] for h in HANDLERS}
    ids: dict[str, set[str]] = {h: set() for h in HANDLERS}  # every pod's, for the breakdown
    summary: dict[str, dict[str, object]] = {}
    try:
        ctd.start()
        for archive, ref in images(work / "images"):
            ctd.import_image(archive, ref)
        tag = uuid.uuid4().hex[:8]
        nodes["hostjob"] = kubelet.Node(ctd, work, work / "runtime-root", f"hj-bench-{tag}")
        nodes["runc"] = kubelet.Node(
            ctd, work / "runc-node", work / "runc-root", f"hj-bench-runc-{tag}", handler="runc"
        )
        for node in nodes.values():
            node.start()
            if logs:
                node.runtime = breakdown.TimedRuntime(node.runtime)  # type: ignore[assignment]
        for n in range(args.warmup + args.rounds):
            order = HANDLERS if n % 2 else HANDLERS[::-1]
            for handler in order:
                out: list[float] = []
                record = breakdown.PodRecord(handler) if logs else None
                one_pod(nodes[handler], f"s{n}", out, problems, record, ids[handler])
                if n >= args.warmup:
                    samples[handler]["single"] += out
                    if record and record.sandbox_id:
                        records[handler].append(record)
        for n in range(args.bursts):
            order = HANDLERS if n % 2 else HANDLERS[::-1]
            for handler in order:
                burst(
                    nodes[handler], args.burst, str(n), samples[handler]["burst"], problems,
                    ids[handler],
                )  # fmt: skip
    finally:
        for node in nodes.values():
            problems += node.stop()
        problems += ctd.stop()
        traces.cleanup()
        if logs and all(records.values()):
            summary = {h: breakdown.summarize(records[h], logs[h], ids[h]) for h in HANDLERS}
        shutil.rmtree(work, ignore_errors=True)
    report(samples, args)
    if summary:
        breakdown.report(summary, HANDLERS)
    if args.json:
        Path(args.json).write_text(json.dumps({**samples, "breakdown": summary}))
    for line in problems:
        print(f"problem: {line}", file=sys.stderr)
    return 1 if problems else 0


def report(samples: dict[str, dict[str, list[float]]], args: argparse.Namespace) -> None:
    print(f"pod start, RunPodSandbox to StartContainer's answer (ms); bursts of {args.burst}")
    print(f"{'':10}{'single p50':>12}{'p99':>8}{'burst p50':>12}{'p99':>8}{'n':>6}")
    for handler in HANDLERS:
        s, b = samples[handler]["single"], samples[handler]["burst"]
        if not s or not b:
            continue
        cells = [quantile(s, 0.5), quantile(s, 0.99), quantile(b, 0.5), quantile(b, 0.99)]
        print(
            f"{handler:10}"
            + "".join(f"{c * 1000:>{w}.0f}" for c, w in zip(cells, (12, 8, 12, 8), strict=True))
            + f"{len(s):>6}"
        )
    h, r = samples["hostjob"], samples["runc"]
    if all((h["single"], h["burst"], r["single"], r["burst"])):
        ratios = [
            quantile(h[k], q) / quantile(r[k], q) for k in ("single", "burst") for q in (0.5, 0.99)
        ]
        print(
            "hostjob/runc"
            + "".join(f"{x:>{w}.2f}" for x, w in zip(ratios, (10, 8, 12, 8), strict=True))
        )
        logs = [math.log(a / b) for a, b in zip(h["single"], r["single"], strict=False)]
        if len(logs) > 2:
            mean, half = statistics.mean(logs), 1.96 * statistics.stdev(logs) / len(logs) ** 0.5
            print(
                f"single pods, paired round by round: hostjob/runc {math.exp(mean):.2f}"
                f" (95% interval {math.exp(mean - half):.2f}-{math.exp(mean + half):.2f})"
            )
        print(f"single-pod medians: {statistics.median(h['single']) * 1000:.0f} ms hostjob,"
              f" {statistics.median(r['single']) * 1000:.0f} ms runc")  # fmt: skip


if __name__ == "__main__":
    sys.exit(main())
