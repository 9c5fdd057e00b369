"""``hostjob pack``: a reproducible one-layer image from a directory ("FROM scratch").

Needs no root: it reads the directory and writes the layout or archive, so any user who
can read every file in DIR can pack it (``--base`` with a store name needs root: the
store is root's).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from hostjob.cli.args import FLAG, LIST, VALUE, Command, Option
from hostjob.cli.image_flags import QUIET, REGISTRY, STORE, registry_options
from hostjob.errors import InvalidArgument

if TYPE_CHECKING:
    from hostjob.cli.args import Args
    from hostjob.cli.main import Context
    from hostjob.images import progress
    from hostjob.images.options import RegistryOptions
    from hostjob.images.pack import PackResult

COMMAND = Command(
    "pack",
    "Make a one-layer image of DIR at oci:OUT[:TAG] or oci-archive:FILE[:TAG] (sorted entries,"
    " fixed mtimes and owners: the same input gives the same digest), or push it to"
    " docker://HOST/NAME[:TAG]; print its digest.",
    options=(
        Option(
            "to",
            VALUE,
            "oci:OUT[:TAG], oci-archive:FILE[:TAG] or docker://HOST/NAME[:TAG] (required)",
            metavar="ref",
        ),
        Option(
            "entrypoint",
            LIST,
            "one entrypoint word (repeat for more), or a JSON array of words",
            metavar="arg",
        ),
        Option(
            "cmd", LIST, "one cmd word (repeat for more), or a JSON array of words", metavar="arg"
        ),
        Option("env,e", LIST, "an environment variable K=V (repeatable)", metavar="K=V"),
        Option("workdir", VALUE, "the image's working directory", metavar="dir"),
        Option("label", LIST, "a label K=V (repeatable)", metavar="K=V"),
        Option("user", VALUE, "the image's user (uid[:gid] or name)", metavar="user"),
        Option("stop-signal", VALUE, "the signal that stops its program (StopSignal)", metavar="s"),
        Option(
            "base",
            VALUE,
            "stack the layer on this image (store name or oci:/archive ref)",
            metavar="image",
        ),
        Option(
            "keep-owner",
            FLAG,
            "keep files' owners, and with them setuid/setgid bits and file capabilities"
            " (default: everything 0:0, those bits and capabilities cleared)",
        ),
        STORE,
        *REGISTRY,
        QUIET,
    ),
    positionals=("dir",),
)


def argv_words(values: list[str], flag: str) -> list[str] | None:
    """Repeated one-word values, or one JSON array (``'["/bin/app","-v"]'``); None if unset."""
    if not values:
        return None
    if len(values) == 1 and values[0].lstrip().startswith("["):
        from hostjob.boot import jsonio

        try:
            words = jsonio.loads(values[0])
        except ValueError as err:
            raise InvalidArgument(f"--{flag}: not a JSON array of strings: {err}") from err
        if type(words) is not list or not all(type(w) is str for w in words):
            raise InvalidArgument(f"--{flag}: not a JSON array of strings: {values[0]}")
        return words
    return list(values)


def labels(values: list[str]) -> dict[str, str] | None:
    out: dict[str, str] = {}
    for item in values:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise InvalidArgument(f"--label {item!r}: expected KEY=VALUE")
        out[key] = value
    return out or None


def run(args: Args, ctx: Context) -> int:
    from hostjob.images import progress

    if not args.to:
        raise InvalidArgument(
            '"pack" requires --to oci:OUT[:TAG], oci-archive:FILE[:TAG] or docker://HOST/NAME[:TAG]'
        )
    pushing = args.to.startswith("docker://")
    registry = registry_options(args)  # --creds hidden from argv, pushing or not
    render = progress.renderer(quiet=args.quiet or not pushing)
    try:
        result = _pack(args, registry, render)
    finally:
        progress.close(render)
    print(result.digest)
    return 0


def _pack(args: Args, registry: RegistryOptions, render: progress.Progress) -> PackResult:
    from hostjob.images.pack import pack

    return pack(
        args.dir,
        args.to,
        entrypoint=argv_words(args.entrypoint, "entrypoint"),
        cmd=argv_words(args.cmd, "cmd"),
        env=args.env or None,
        workdir=args.workdir,
        labels=labels(args.label),
        user=args.user,
        stop_signal=_stop_signal(args.stop_signal),
        base=args.base,
        keep_owner=args.keep_owner,
        store_root=args.store or None,
        registry=registry,
        progress=render,
    )


def _stop_signal(text: str | None) -> str | None:
    """``--stop-signal``: checked, written as its name (``SIGQUIT``), as docker does."""
    if text is None:
        return None
    from hostjob.linux.signals import parse_signal, signal_name

    return signal_name(parse_signal(text))
