"""Run the fuzz targets: ``python -m tests.fuzz TARGET|all [--runs N] [--seconds S]``.

The engine is atheris (coverage-guided libFuzzer) when it can be imported, else
hypothesis (``--engine`` forces one). Each target runs in its own process; the last
line per target says how many inputs it executed, and a finding (a crash, a hang of
more than ``--timeout`` seconds, a write outside the sandbox, a non-HostjobError)
fails the run with the input that caused it (atheris writes it to ``crash-*``).
Run from the repository root (``tests`` must be importable). ``all`` is every target
that needs no root; the ones that drive the CLI (``tests.fuzz.cli``: root, the real
kernel) run when named.
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable


def _atheris_available() -> bool:
    try:
        import atheris  # noqa: F401
    except ImportError:
        return False
    return True


def _targets() -> dict[str, Callable[[bytes], None]]:
    from tests.fuzz.cli import CLI_TARGETS
    from tests.fuzz.targets import TARGETS

    return {**TARGETS, **CLI_TARGETS}


def _run_one_atheris(name: str, runs: int, seconds: int, timeout: int, corpus: str | None) -> int:
    import atheris

    with atheris.instrument_imports(include=["hostjob"]):
        pass
    from tests.fuzz.targets import seeds

    target = _targets()[name]
    corpus_dir = corpus or tempfile.mkdtemp(prefix=f"hostjob-fuzz-corpus-{name}-")
    os.makedirs(corpus_dir, exist_ok=True)
    for i, seed in enumerate(seeds(name)):
        with open(os.path.join(corpus_dir, f"seed-{i}"), "wb") as f:
            f.write(seed)
    argv = [sys.argv[0], corpus_dir, f"-timeout={timeout}", "-rss_limit_mb=4096"]
    argv.append(f"-max_len={65536 if name.startswith('tar') else 8192}")
    if runs:
        argv.append(f"-runs={runs}")
    if seconds:
        argv.append(f"-max_total_time={seconds}")
    atheris.Setup(argv, target)
    atheris.Fuzz()
    return 0


def _run_one_hypothesis(name: str, runs: int, seconds: int, timeout: int) -> int:
    import signal

    from hypothesis import HealthCheck, given, settings
    from hypothesis import strategies as st

    from tests.fuzz.targets import seeds

    target = _targets()[name]
    count = 0
    deadline = time.monotonic() + seconds if seconds else None

    def on_alarm(signum: int, frame: object) -> None:
        raise TimeoutError(f"{name}: one input ran for more than {timeout} s (a hang)")

    signal.signal(signal.SIGALRM, on_alarm)
    inputs = st.sampled_from(seeds(name)) | st.binary(max_size=4096)

    @settings(
        max_examples=runs or 10**9,
        deadline=None,
        database=None,
        suppress_health_check=list(HealthCheck),
    )
    @given(inputs)
    def fuzz(data: bytes) -> None:
        nonlocal count
        if deadline is not None and time.monotonic() > deadline:
            return
        count += 1
        signal.alarm(timeout)
        try:
            target(data)
        finally:
            signal.alarm(0)

    fuzz()
    print(f"Done {count} runs (hypothesis) for {name}", flush=True)
    return 0


def main(argv: list[str] | None = None) -> int:
    from tests.fuzz.targets import SANDBOX_DIR_VARIABLE, TARGETS

    p = argparse.ArgumentParser(prog="python -m tests.fuzz", description=__doc__)
    p.add_argument("target", help=f"one of {', '.join(_targets())}, or all (those of no root)")
    p.add_argument("--runs", type=int, default=0, help="inputs per target (0: no limit)")
    p.add_argument("--seconds", type=int, default=0, help="time per target (0: no limit)")
    p.add_argument("--timeout", type=int, default=10, help="seconds one input may take")
    p.add_argument("--engine", choices=("auto", "atheris", "hypothesis"), default="auto")
    p.add_argument("--corpus", help="corpus directory (one target only; atheris)")
    p.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if not args.runs and not args.seconds:
        p.error("give --runs or --seconds")
    engine = args.engine
    if engine == "auto":
        engine = "atheris" if _atheris_available() else "hypothesis"
    if args.child:
        if engine == "atheris":
            return _run_one_atheris(args.target, args.runs, args.seconds, args.timeout, args.corpus)
        return _run_one_hypothesis(args.target, args.runs, args.seconds, args.timeout)

    names = list(TARGETS) if args.target == "all" else [args.target]
    unknown = [n for n in names if n not in _targets()]
    if unknown:
        p.error(f"unknown target(s) {unknown}: {', '.join(_targets())}")
    failed = []
    print(f"{'target':<18} {'engine':<10} {'executions':>10} {'seconds':>8}  result")
    for name in names:
        cmd = [sys.executable, "-m", "tests.fuzz", name, "--child", "--engine", engine]
        cmd += ["--runs", str(args.runs), "--seconds", str(args.seconds)]
        cmd += ["--timeout", str(args.timeout)]
        if args.corpus:
            cmd += ["--corpus", args.corpus]
        # The child's sandboxes and corpus live in a temp dir of the parent's, removed
        # here: libFuzzer ends the child with exit(), which skips Python's clean-up.
        with tempfile.TemporaryDirectory(prefix=f"hostjob-fuzz-{name}-") as tmp:
            env = {**os.environ, "TMPDIR": tmp, SANDBOX_DIR_VARIABLE: tmp}
            t0 = time.monotonic()
            done = subprocess.run(cmd, capture_output=True, text=True, check=False, env=env)
            took = time.monotonic() - t0
        output = done.stdout + done.stderr
        found = re.findall(r"Done (\d+) runs", output)
        executions = found[-1] if found else "?"
        result = "ok" if done.returncode == 0 else f"FAILED (exit {done.returncode})"
        print(f"{name:<18} {engine:<10} {executions:>10} {took:8.1f}  {result}", flush=True)
        if done.returncode != 0:
            failed.append(name)
            sys.stderr.write(output[-6000:] + "\n")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
