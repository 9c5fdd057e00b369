"""What the image's loader costs a container's start, per kind of program.

The step measured is the child's, as ``hostjob.runtime.launch.child`` runs it after the
identity switch: the program found (``find_program_named``), then, unless the kernel
runs it as it is, ``hostjob.runtime.launch.loader.prepare`` (the ELF look-up, the
library check) -- in a fresh ``python -S`` that loads hostjob's modules through the
install's code pack, as the real command does. "extra" is that step with the image's
loader (``io.hostjob.loader: image``) less the same step with ``host`` (the program
found, nothing else): what a ``create`` or ``exec`` pays for it.

Two measures: instructions (callgrind, with one hash seed: stable on a loaded machine,
one run each) and
wall time (the step's own time inside each fresh process, medians of interleaved
rounds). ``--baseline VENV`` measures another install beside this one (A/B).

The image is the Debian 13 root that ``scripts/install --peers distro-images`` builds
(``--tar``), extracted into a scratch directory with a few programs added: a static
program (the host's busybox-static), a musl program (``musl-gcc``), a ``#!/bin/sh``
script and a script whose interpreter is static.
"""

from __future__ import annotations

import argparse
import os
import random
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
PEER_DIR = Path(os.environ.get("HOSTJOB_PEER_DIR", "/var/cache/hostjob-peers"))
IMAGE_PATH = "/usr/local/bin:/usr/bin:/bin"
HOST_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

# kind -> the container's args
KINDS = {
    "static program": ["bbstatic", "true"],
    "script, static interpreter": ["static.sh"],
    "musl program": ["muslhi"],
    "#!/bin/sh script (dash)": ["dash.sh"],
    "busybox (dynamic)": ["busybox", "true"],
    "jq (glibc)": ["jq", "--version"],
    "python3.13": ["python3", "-c", "1"],
}

MUSL_C = "int main(void) { return 0; }\n"

# The step, after the install's own start-up lines (copied from its script).
STEP = """
from time import perf_counter
from hostjob.runtime.launch import plan as launch_plan
from hostjob.runtime.launch import spawn  # loaded by the runtime before it forks
from hostjob.runtime.launch.child import ChildSetup
from hostjob.runtime.launch.program import find_program_named, runs_as_it_is

mode, mp, cache = sys.argv[1], sys.argv[2], sys.argv[3]
plan = launch_plan.LaunchPlan()
plan.args = sys.argv[4:]
plan.mount_point = mp
plan.image_path = IMAGE_PATH
plan.env = ["PATH=" + launch_plan.extend_path(HOST_PATH, mp)]
plan.cwd = mp
plan.image_loader = mode != "host"
# An install that keeps no decisions runs "cold" and "warm" as "image".
keeps = mode in ("cold", "warm") and hasattr(spawn, "_kept_decisions")
t0 = perf_counter()
if keeps:
    setup = ChildSetup(plan, None)
    setup.decisions_dir = cache
    spawn._kept_decisions(setup)  # the runtime's part, before the fork
program, named = find_program_named(
    plan.args[0], plan.cwd, plan.path_value(), plan.mount_point, plan.image_path
)
args = plan.args
if not runs_as_it_is(plan, program):
    if keeps:
        from hostjob.runtime.launch import recall

        program, args, learned = recall.decide(plan, program, named, setup.decisions)
        if learned is not None:
            from hostjob.runtime.launch import remember

            remember.keep(cache, learned)  # the runtime's part, once the child is ready
    else:
        from hostjob.runtime.launch import loader

        program, args = loader.prepare(plan, program, named)
t1 = perf_counter()
print(round((t1 - t0) * 1e6, 1), program, *args)
"""


def harness(venv: Path, dest: Path) -> Path:
    """A script that starts as ``venv``'s hostjob command starts, then runs the step."""
    script = (venv / "bin" / "hostjob").read_text()
    head, sep, _ = script.partition("codepack.start(where)")
    if not sep:
        raise SystemExit(f"{venv}/bin/hostjob: not a code-pack script (scripts/install --venv)")
    head = head.replace("sys.path[0].rpartition('/')[0]", repr(str(venv)))
    body = f"IMAGE_PATH = {IMAGE_PATH!r}\nHOST_PATH = {HOST_PATH!r}\n" + STEP
    dest.write_text(head.split("\n", 1)[1] + sep + "\n" + body)
    return dest


def make_root(tar: Path, dest: Path) -> Path:
    """The image, with the programs of ``KINDS`` that it lacks."""
    dest.mkdir(parents=True)
    subprocess.run(["tar", "-xf", str(tar), "-C", str(dest)], check=True)
    local = dest / "usr/local/bin"
    local.mkdir(parents=True, exist_ok=True)
    static = shutil.which("busybox") or "/bin/busybox"
    shutil.copy(static, local / "bbstatic")
    with tempfile.TemporaryDirectory() as tmp:
        source = Path(tmp) / "m.c"
        source.write_text(MUSL_C)
        subprocess.run(["musl-gcc", "-O2", "-o", str(local / "muslhi"), str(source)], check=True)
    (local / "dash.sh").write_text("#!/bin/sh\necho hi\n")
    (local / "static.sh").write_text("#!/usr/local/bin/bbstatic sh\necho hi\n")
    for name in ("dash.sh", "static.sh"):
        (local / name).chmod(0o755)
    return dest


def python_of(venv: Path) -> str:
    return str(venv / "bin" / "python")


MODES = ("host", "image", "cold", "warm")


def cache_for(script: Path, mode: str, args: list[str]) -> Path:
    """The directory of kept decisions a step uses: a first start ("cold") finds it
    empty, a later one ("warm") finds what a first start kept."""
    cache = script.parent / f"cache-{script.stem}-{'-'.join(args).replace('/', '_')}"
    if mode == "cold" and cache.exists():
        shutil.rmtree(cache)
    return cache


def instructions(python: str, script: Path, mode: str, root: Path, args: list[str]) -> int:
    cache = cache_for(script, mode, args)
    # One hash seed: set and dict work varies with it by ~0.1M instructions a run.
    done = subprocess.run(
        ["env", "PYTHONHASHSEED=0", "valgrind", "--tool=callgrind",
         "--callgrind-out-file=/dev/null", python, "-S", str(script), mode, str(root),
         str(cache), *args],
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    found = re.search(r"Collected : (\d+)", done.stderr)
    if found is None:
        raise SystemExit(f"no instruction count from callgrind: {done.stderr[-500:]}")
    return int(found.group(1))


def step_us(python: str, script: Path, mode: str, root: Path, args: list[str]) -> tuple[float, str]:
    cache = cache_for(script, mode, args)
    out = subprocess.run(
        [python, "-S", str(script), mode, str(root), str(cache), *args],
        capture_output=True, text=True, check=True,
    ).stdout.split(" ", 1)  # fmt: skip
    return float(out[0]), out[1].strip()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tar", type=Path, default=PEER_DIR / "distro-images" / "trixie.tar")
    parser.add_argument("--venv", type=Path, default=REPO / ".venv", help="the install measured")
    parser.add_argument("--baseline", type=Path, help="another install's venv, measured beside")
    parser.add_argument("--rounds", type=int, default=60, help="wall-time rounds (0: none)")
    parser.add_argument("--no-callgrind", action="store_true")
    parser.add_argument("--kind", action="append", choices=list(KINDS), help="only these")
    opts = parser.parse_args()
    kinds = opts.kind or list(KINDS)
    installs = {"this": opts.venv.resolve()}
    if opts.baseline:
        installs["base"] = opts.baseline.resolve()
    with tempfile.TemporaryDirectory(prefix="hostjob-bench-loader.") as tmp:
        root = make_root(opts.tar, Path(tmp) / "root")
        scripts = {n: harness(v, Path(tmp) / f"step-{n}.py") for n, v in installs.items()}
        pythons = {n: python_of(v) for n, v in installs.items()}
        for name in installs:  # what each runs, once (a different answer is a bug)
            for kind in kinds:
                shown, *kept = (
                    step_us(pythons[name], scripts[name], m, root, KINDS[kind])[1]
                    for m in ("image", "cold", "warm")
                )
                if any(k != shown for k in kept):
                    raise SystemExit(f"{name} {kind}: a kept decision differs: {kept} {shown}")
                print(f"{name:4} {kind:28} -> {shown.replace(str(root), '<mp>')[:110]}")
        if not opts.no_callgrind:
            print(
                "\ninstructions (callgrind) the step adds with the image's loader:"
                " worked out each time, a first start (kept after), a later start"
            )
            for kind in kinds:
                cells = []
                for name in installs:
                    counts = {
                        m: instructions(pythons[name], scripts[name], m, root, KINDS[kind])
                        for m in MODES
                    }
                    extra = [(counts[m] - counts["host"]) / 1e6 for m in MODES[1:]]
                    cells.append(f"{name}: " + " ".join(f"+{e:.2f}M" for e in extra))
                print(f"  {kind:28} " + "   ".join(cells))
        if opts.rounds:
            wall(opts.rounds, kinds, installs, pythons, scripts, root)
    return 0


def wall(
    rounds: int,
    kinds: list[str],
    installs: dict[str, Path],
    pythons: dict[str, str],
    scripts: dict[str, Path],
    root: Path,
) -> None:
    cases = [(n, k, m) for n in installs for k in kinds for m in ("host", "image", "warm")]
    times: dict[tuple[str, str, str], list[float]] = {c: [] for c in cases}
    for _ in range(rounds):
        random.shuffle(cases)
        for name, kind, mode in cases:
            us, _ = step_us(pythons[name], scripts[name], mode, root, KINDS[kind])
            times[name, kind, mode].append(us)
    print(
        f"\nwall time of the step (µs, medians of {rounds} interleaved rounds), with the"
        " image's loader less without: worked out each time, a later start"
    )
    for kind in kinds:
        cells = []
        for name in installs:
            host = statistics.median(times[name, kind, "host"])
            image = statistics.median(times[name, kind, "image"])
            warm = statistics.median(times[name, kind, "warm"])
            cells.append(f"{name}: +{image - host:.0f} +{warm - host:.0f}")
        print(f"  {kind:28} " + "   ".join(cells))


if __name__ == "__main__":
    sys.exit(main())
