"""``hostjob node install|uninstall|serve``: put hostjob on the node the installer pod
runs on, with the host's root mounted (``hostjob.node``)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from hostjob.cli.args import VALUE, Command, Option
from hostjob.errors import InvalidArgument

if TYPE_CHECKING:
    from hostjob.cli.args import Args
    from hostjob.cli.main import Context

COMMAND = Command(
    "node",
    "From the installer image, with the host's root mounted: `install` hostjob and its"
    " containerd handlers on the host, `uninstall` them, or `serve` (install, wait for"
    " SIGTERM, uninstall: the DaemonSet pod's life).",
    options=(
        Option("host-root", VALUE, "where the host's root is mounted", default="/host"),
        Option(
            "socket",
            VALUE,
            "containerd's socket on the host",
            default="/run/containerd/containerd.sock",
        ),
        Option("unit", VALUE, "containerd's systemd unit", default="containerd.service"),
        Option(
            "timeout",
            VALUE,
            "seconds to wait for containerd's restart (default 120)",
            default="120",
        ),
        Option(
            "wait-for-jobs",
            VALUE,
            "at uninstall, seconds to wait for running job containers before leaving"
            " /opt/hostjob to them (default 0)",
            default="0",
        ),
    ),
    positionals=("action",),
)


def _seconds(text: str, flag: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not value >= 0:
        raise InvalidArgument(f"--{flag}: {text!r} is not a number of seconds")
    return value


def run(args: Args, ctx: Context) -> int:
    from hostjob.node import install

    if args.action not in ("install", "uninstall", "serve"):
        raise InvalidArgument(f"node {args.action}: install, uninstall or serve")
    node = install.Node(
        args.host_root, args.socket, args.unit, timeout=_seconds(args.timeout, "timeout")
    )
    wait = _seconds(args.wait_for_jobs, "wait-for-jobs")
    if args.action == "install":
        install.install(node)
        return 0
    if args.action == "uninstall":
        return 0 if install.uninstall(node, wait) else 3
    return install.serve(node, wait)
