"""bench/cri's per-pod breakdown: what each handler spends on a pod besides the latency.

* The OCI runtime's commands: each handler's ``BinaryName`` is a small C wrapper (built here)
  that forks, execs the real runtime with the same argv (``argv[0]`` the real path), stdio and
  descriptors, waits for it, appends one line to a log (start, wall time, user and system CPU
  of the command and the children it waited for, max RSS, exit status, argv) and exits as the
  runtime did. The wrapper costs both handlers the same: one fork, one small exec, one write.
  The CPU of a process the runtime leaves behind (``runc init`` becomes the container) is not
  the command's: the pod cgroup's CPU counts it.
* The calls: the CRI stub is timed call by call (``RunPodSandbox`` vs ``CreateContainer`` +
  ``StartContainer``), per thread, so a pod's own calls are its.
* While a single pod runs (after ``StartContainer`` answered): the pod's shim (the
  ``containerd-shim-runc-v2`` serving its sandbox ID), its CPU so far (its threads'
  ``schedstat``) and its RSS and PSS (``smaps_rollup``); the pod cgroup's CPU so far
  (v1 ``cpuacct.usage``, v2 ``cpu.stat``); and every other process of the pod (the shim's
  descendants and whatever is in the pod's cgroups) but the containers' programs, with its RSS.
"""

from __future__ import annotations

import os
import statistics
import subprocess
import threading
import time
from pathlib import Path
from typing import Any

from tests.compat import harness

WRAPPER_C = r"""
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static double secs(struct timeval t) { return t.tv_sec + t.tv_usec / 1e6; }

int main(int argc, char **argv) {
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    argv[0] = REAL;
    pid_t pid = fork();
    if (pid < 0) { execv(REAL, argv); return 127; }
    if (pid == 0) {
        prctl(PR_SET_PDEATHSIG, SIGKILL);  /* the shim kills the wrapper: the runtime too */
        execv(REAL, argv);
        _exit(127);
    }
    int status = 0;
    struct rusage ru;
    while (wait4(pid, &status, 0, &ru) < 0)
        if (errno != EINTR) return 127;
    clock_gettime(CLOCK_MONOTONIC, &t1);
    char line[16384];
    size_t n = (size_t)snprintf(line, sizeof line, "%.6f\t%.6f\t%.6f\t%.6f\t%ld\t%d",
        t0.tv_sec + t0.tv_nsec / 1e9,
        (t1.tv_sec - t0.tv_sec) + (t1.tv_nsec - t0.tv_nsec) / 1e9,
        secs(ru.ru_utime), secs(ru.ru_stime), ru.ru_maxrss, status);
    for (int i = 1; i < argc && n < sizeof line - 2; i++)
        n += (size_t)snprintf(line + n, sizeof line - 1 - n, "\t%s", argv[i]);
    if (n > sizeof line - 2) n = sizeof line - 2;
    line[n++] = '\n';
    int fd = open(LOG, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0600);
    if (fd >= 0) { (void)!write(fd, line, n); close(fd); }
    if (WIFSIGNALED(status)) {
        signal(WTERMSIG(status), SIG_DFL);
        kill(getpid(), WTERMSIG(status));
    }
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128;
}
"""

# the runtimes' global options that take a value (runc's; hostjob takes the same)
VALUE_OPTIONS = {"--root", "--log", "--log-format", "--criu", "--rootless"}
PROGRAMS = {b"pause", b"sleep"}  # the containers' own programs (argv[0]): not the runtime's


def build_wrapper(work: Path, handler: str, real: Path) -> tuple[Path, Path]:
    """The wrapper for ``real`` in ``work``: (its path, its log)."""
    log = work / f"{handler}-commands.log"
    src = work / f"wrap-{handler}.c"
    src.write_text(WRAPPER_C)
    exe = work / f"wrap-{handler}"
    argv = ["gcc", "-O2", "-o", str(exe), str(src), f'-DREAL="{real}"', f'-DLOG="{log}"']
    done = subprocess.run(argv, capture_output=True, text=True, timeout=120)
    if done.returncode != 0:
        raise harness.HarnessError(f"cannot build the runtime wrapper: {done.stderr}")
    return exe, log


def with_runc_binary(config: str, runc_root: Path, binary: Path) -> str:
    """``cri_config``'s tables with the runc handler's ``BinaryName`` set to ``binary``."""
    root_line = f'  Root = "{runc_root}"\n'
    assert config.count(root_line) == 1, "runc's options table not found"
    return config.replace(root_line, f'{root_line}  BinaryName = "{binary}"\n')


class TimedRuntime:
    """A CRI runtime stub whose calls are timed: (method, start, duration) in the calling
    thread's list."""

    def __init__(self, stub: Any) -> None:
        self._stub = stub
        self._local = threading.local()

    def calls(self) -> list[tuple[str, float, float]]:
        if not hasattr(self._local, "calls"):
            self._local.calls = []
        out: list[tuple[str, float, float]] = self._local.calls
        return out

    def __getattr__(self, name: str) -> Any:
        method = getattr(self._stub, name)

        def timed(*args: Any, **kw: Any) -> Any:
            start = time.monotonic()
            try:
                return method(*args, **kw)
            finally:
                self.calls().append((name, start, time.monotonic() - start))

        return timed


# ---- /proc and cgroups ----------------------------------------------------------------------


def _read(path: str) -> str:
    try:
        with open(path) as f:
            return f.read()
    except OSError:
        return ""


def _cpu(pid: int) -> float:
    """CPU seconds of ``pid`` itself (not its children): the sum of its threads' time on a
    CPU (``schedstat``, in ns); else user+system from ``stat`` (in clock ticks)."""
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
    except OSError:
        tasks = []
    ns = [_read(f"/proc/{pid}/task/{t}/schedstat").split()[:1] for t in tasks]
    if tasks and all(ns):
        return sum(int(n[0]) for n in ns) / 1e9
    stat = _read(f"/proc/{pid}/stat")
    fields = stat[stat.rfind(")") + 2 :].split()
    if len(fields) < 13:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _memory(pid: int) -> tuple[int, int]:
    """(RSS, PSS) of ``pid`` in KiB."""
    values = {}
    for line in _read(f"/proc/{pid}/smaps_rollup").splitlines():
        parts = line.split()
        if len(parts) >= 2 and parts[0] in ("Rss:", "Pss:"):
            values[parts[0]] = int(parts[1])
    return values.get("Rss:", 0), values.get("Pss:", 0)


def _processes() -> dict[int, tuple[int, str, bytes]]:
    """pid -> (parent pid, comm, cmdline) of every process."""
    out = {}
    for d in os.listdir("/proc"):
        if d.isdigit():
            stat = _read(f"/proc/{d}/stat")
            if not stat:
                continue
            comm = stat[stat.find("(") + 1 : stat.rfind(")")]
            ppid = int(stat[stat.rfind(")") + 2 :].split()[1])
            try:
                with open(f"/proc/{d}/cmdline", "rb") as f:
                    cmdline = f.read(4096)
            except OSError:
                continue
            out[int(d)] = (ppid, comm, cmdline)
    return out


def _cgroup_cpu(path: str) -> float | None:
    """CPU seconds used so far in cgroup ``path`` and below it."""
    for d in harness.cgroup_dirs(path):
        if (d / "cpuacct.usage").exists():
            return int(_read(str(d / "cpuacct.usage")) or 0) / 1e9
        for line in _read(str(d / "cpu.stat")).splitlines():
            if line.startswith("usage_usec "):
                return int(line.split()[1]) / 1e6
    return None


def snapshot(sandbox_id: str, cgroup_parent: str, pod_uid: str) -> dict[str, Any]:
    """What a running pod holds besides its programs: its shim's CPU so far, RSS and PSS;
    the pod cgroup's CPU so far; every other process of the pod (name, RSS KiB)."""
    procs = _processes()
    needle = f"-id\0{sandbox_id}\0".encode()
    shims = [p for p, (_, comm, cmd) in procs.items() if comm.startswith("containerd-shim")
             and needle in cmd]  # fmt: skip
    found: dict[str, Any] = {"pod_cgroup_cpu": _cgroup_cpu(cgroup_parent), "others": []}
    if len(shims) == 1:
        shim = shims[0]
        rss, pss = _memory(shim)
        found.update(shim_cpu=_cpu(shim), shim_rss_kib=rss, shim_pss_kib=pss)
        pod = {shim}
        for _ in range(8):  # the shim's descendants, a few levels down
            pod |= {p for p, (ppid, _, _) in procs.items() if ppid in pod}
        pod |= {p for p in procs if pod_uid in _read(f"/proc/{p}/cgroup")}
        for p in sorted(pod - {shim}):
            _, comm, cmdline = procs[p]
            if cmdline.split(b"\0")[0].rsplit(b"/", 1)[-1] not in PROGRAMS:
                found["others"].append((comm, _memory(p)[0]))
    return found


# ---- the runtime's command log --------------------------------------------------------------


def parse_log(log: Path) -> list[dict[str, Any]]:
    """The wrapper's lines: start, wall, cpu (user+sys), maxrss (KiB), status, verb, args."""
    out = []
    for line in log.read_text(errors="replace").splitlines() if log.exists() else []:
        f = line.split("\t")
        if len(f) < 6:
            continue
        args = f[6:]
        verb, skip = "", False
        for i, a in enumerate(args):
            if skip:
                skip = False
            elif a.startswith("-"):
                skip = a in VALUE_OPTIONS
            else:
                verb = _verb(a, args[i + 1 :])
                break
        out.append({
            "start": float(f[0]), "wall": float(f[1]), "cpu": float(f[2]) + float(f[3]),
            "maxrss_kib": int(f[4]), "status": int(f[5]), "verb": verb or "-", "args": args,
        })  # fmt: skip
    return out


def _verb(verb: str, rest: list[str]) -> str:
    """The verb with what tells its kinds apart: ``kill``'s signal and ``--all``,
    ``delete --force``."""
    flags = [a for a in rest if a in ("--all", "-a", "--force", "-f")]
    if verb == "kill" and rest and not rest[-1].startswith("-"):
        flags.insert(0, rest[-1])
    return " ".join([verb, *flags])


def pod_commands(
    commands: list[dict[str, Any]], roles: dict[str, tuple[int, str]]
) -> tuple[dict[int, list[dict[str, Any]]], list[dict[str, Any]]]:
    """Commands by pod (``roles``: container ID -> (pod index, sandbox|container)), each with
    its ``role``; and the commands of no pod (``features``, ``--version``)."""
    by_pod: dict[int, list[dict[str, Any]]] = {}
    unowned = []
    for c in commands:
        owner = next((roles[a] for a in c["args"] if a in roles), None)
        if owner is None:
            unowned.append(c)
            continue
        by_pod.setdefault(owner[0], []).append({**c, "role": owner[1]})
    return by_pod, unowned


class PodRecord:
    """One single pod's figures: its IDs, its CRI calls, its snapshot, its commands."""

    __slots__ = ("calls", "container_id", "end", "handler", "sandbox_id", "snap", "start")

    def __init__(self, handler: str) -> None:
        self.handler = handler
        self.sandbox_id = self.container_id = ""
        self.calls: list[tuple[str, float, float]] = []
        self.snap: dict[str, Any] = {}
        self.start = self.end = 0.0


def summarize(records: list[PodRecord], log: Path, skipped: set[str]) -> dict[str, Any]:
    """One handler's breakdown over its single pods: medians per pod; the commands on the
    IDs ``skipped`` (the warm-up's and the bursts' pods) are not counted."""
    roles = {i: (-1, "") for i in skipped}
    for i, r in enumerate(records):
        roles[r.sandbox_id] = (i, "sandbox")
        if r.container_id:
            roles[r.container_id] = (i, "container")
    by_pod, unowned = pod_commands(parse_log(log), roles)
    by_pod.pop(-1, None)
    n = len(records)
    verbs: dict[tuple[str, str], dict[str, list[float]]] = {}
    for i in range(n):
        mine: dict[tuple[str, str], list[dict[str, Any]]] = {}
        for c in by_pod.get(i, []):
            mine.setdefault((c["role"], c["verb"]), []).append(c)
        for key, cs in mine.items():
            v = verbs.setdefault(
                key, {"count": [], "failed": [], "wall": [], "cpu": [], "maxrss_kib": []}
            )
            v["count"].append(len(cs))
            v["failed"].append(sum(1 for c in cs if c["status"] != 0))
            v["wall"] += [c["wall"] for c in cs]
            v["cpu"] += [c["cpu"] for c in cs]
            v["maxrss_kib"] += [c["maxrss_kib"] for c in cs]

    def med(values: list[float]) -> float | None:
        return statistics.median(values) if values else None

    def per_pod(pick: Any, window: bool = False) -> list[float]:
        out = []
        for i, r in enumerate(records):
            cs = by_pod.get(i, [])
            if window:
                cs = [c for c in cs if r.start <= c["start"] <= r.end]
            out.append(sum(pick(c) for c in cs))
        return out

    def call_time(r: PodRecord, *names: str) -> float:
        return sum(d for name, _, d in r.calls if name in names)

    snaps = [r.snap for r in records if r.snap]
    others = sorted({name for s in snaps for name, _ in s.get("others", [])})
    return {
        "pods": n,
        "verbs": {
            f"{role}/{verb}": {
                "count_per_pod": sum(v["count"]) / n,
                "failed_per_pod": sum(v["failed"]) / n,
                "wall_p50": med(v["wall"]),
                "cpu_p50": med(v["cpu"]),
                "maxrss_kib_p50": med(v["maxrss_kib"]),
            }
            for (role, verb), v in sorted(verbs.items())
        },
        "unowned": {
            verb: sum(1 for c in unowned if c["verb"] == verb)
            for verb in sorted({c["verb"] for c in unowned})
        },
        "commands_per_pod": med(per_pod(lambda c: 1)),
        "commands_wall_p50": med(per_pod(lambda c: c["wall"])),
        "commands_cpu_p50": med(per_pod(lambda c: c["cpu"])),
        "start_commands_per_pod": med(per_pod(lambda c: 1, window=True)),
        "start_commands_wall_p50": med(per_pod(lambda c: c["wall"], window=True)),
        "start_commands_cpu_p50": med(per_pod(lambda c: c["cpu"], window=True)),
        "run_pod_sandbox_p50": med([call_time(r, "RunPodSandbox") for r in records]),
        "create_start_p50": med(
            [call_time(r, "CreateContainer", "StartContainer") for r in records]
        ),
        "shim_cpu_p50": med([s["shim_cpu"] for s in snaps if "shim_cpu" in s]),
        "pod_cgroup_cpu_p50": med(
            [s["pod_cgroup_cpu"] for s in snaps if s.get("pod_cgroup_cpu") is not None]
        ),
        "shim_rss_kib_p50": med([s["shim_rss_kib"] for s in snaps if "shim_rss_kib" in s]),
        "shim_pss_kib_p50": med([s["shim_pss_kib"] for s in snaps if "shim_pss_kib" in s]),
        "shims_found": sum(1 for s in snaps if "shim_cpu" in s),
        "other_processes": others,
        "other_rss_kib_p50": med([float(sum(k for _, k in s["others"])) for s in snaps]),
    }


def _ms(x: float | None) -> str:
    return "-" if x is None else f"{x * 1000:.1f}"


def report(breakdown: dict[str, dict[str, Any]], handlers: tuple[str, ...]) -> None:
    b = [breakdown[h] for h in handlers]
    counts = ", ".join(f"{h} {x['pods']}" for h, x in zip(handlers, b, strict=True))
    print(f"\nper pod, single pods (medians; pods: {counts})")
    head = "".join(f"{h:>18}" for h in handlers)
    rows: list[tuple[str, list[str]]] = [
        ("RunPodSandbox ms", [_ms(x["run_pod_sandbox_p50"]) for x in b]),
        ("Create+StartContainer ms", [_ms(x["create_start_p50"]) for x in b]),
        ("runtime cmds, to start", [_n(x["start_commands_per_pod"]) for x in b]),
        ("  their wall ms", [_ms(x["start_commands_wall_p50"]) for x in b]),
        ("  their CPU ms", [_ms(x["start_commands_cpu_p50"]) for x in b]),
        ("runtime cmds, whole pod", [_n(x["commands_per_pod"]) for x in b]),
        ("  their wall ms", [_ms(x["commands_wall_p50"]) for x in b]),
        ("  their CPU ms", [_ms(x["commands_cpu_p50"]) for x in b]),
        ("shim CPU ms, at start", [_ms(x["shim_cpu_p50"]) for x in b]),
        ("pod cgroup CPU ms, at start", [_ms(x["pod_cgroup_cpu_p50"]) for x in b]),
        ("shim RSS / PSS MiB", [_mib(x["shim_rss_kib_p50"], x["shim_pss_kib_p50"]) for x in b]),
        ("other resident (RSS MiB)", [_others(x) for x in b]),
    ]
    print(f"{'':28}{head}")
    for label, cells in rows:
        print(f"{label:28}" + "".join(f"{c:>18}" for c in cells))
    print(
        "runtime commands by verb: count per pod x wall p50 ms / CPU p50 ms / max RSS MiB"
        " (how many exited non-zero)"
    )
    keys = sorted({k for x in b for k in x["verbs"]}, key=_verb_order)
    for key in keys:
        cells = []
        for x in b:
            v = x["verbs"].get(key)
            cells.append(_verb_cell(v))
        print(f"  {key:26}" + "".join(f"{c:>28}" for c in cells))
    for h, x in zip(handlers, b, strict=True):
        if x["unowned"]:
            listed = ", ".join(f"{v} {n}" for v, n in x["unowned"].items())
            print(f"  {h}, of no pod (per run): {listed}")


def _verb_cell(v: dict[str, Any] | None) -> str:
    if v is None:
        return "-"
    failed = f" ({v['failed_per_pod']:.2g} failed)" if v["failed_per_pod"] else ""
    return (
        f"{v['count_per_pod']:.3g}x {_ms(v['wall_p50'])}/{_ms(v['cpu_p50'])}"
        f"/{v['maxrss_kib_p50'] / 1024:.0f}{failed}"
    )


def _n(x: float | None) -> str:
    return "-" if x is None else f"{x:g}"


def _mib(rss: float | None, pss: float | None) -> str:
    return "-" if rss is None or pss is None else f"{rss / 1024:.1f} / {pss / 1024:.1f}"


def _others(x: dict[str, Any]) -> str:
    if not x["other_processes"]:
        return "none"
    return f"{','.join(x['other_processes'])} {(x['other_rss_kib_p50'] or 0) / 1024:.1f}"


def _verb_order(key: str) -> tuple[int, int, str]:
    role, verb = key.split("/", 1)
    order = ["create", "start", "state", "kill", "delete"]
    word = verb.split()[0]
    return (0 if role == "sandbox" else 1, order.index(word) if word in order else 9, verb)
