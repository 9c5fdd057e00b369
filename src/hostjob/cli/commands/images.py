"""``hostjob images``: the images in the store (a table, JSON, or IDs)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from hostjob.cli.args import FLAG, VALUE, Command, Option
from hostjob.cli.image_flags import STORE, open_store
from hostjob.cli.render import ago, short_id, summary_json, table, to_json, verified
from hostjob.errors import InvalidArgument
from hostjob.units import human_size

if TYPE_CHECKING:
    from hostjob.cli.args import Args
    from hostjob.cli.main import Context

COMMAND = Command(
    "images",
    "List the images in the store: NAME, ID, SIZE (compressed layers), CREATED, PLATFORM,"
    " VERIFIED (what the signature policy checked when it came in).",
    options=(
        STORE,
        Option("format,f", VALUE, "table or json", default="table"),
        Option("quiet,q", FLAG, "print only the (short) image IDs, each once"),
    ),
)


def run(args: Args, ctx: Context) -> int:
    if args.format not in ("table", "json"):
        raise InvalidArgument(f"invalid format option: {args.format} (table or json)")
    rows = open_store(args).images()
    if args.quiet:
        seen: set[str] = set()
        for row in rows:
            ident = short_id(row.id)
            if ident not in seen:
                seen.add(ident)
                print(ident)
        return 0
    if args.format == "json":
        print(to_json([summary_json(row) for row in rows]))
        return 0
    cells = [("NAME", "ID", "SIZE", "CREATED", "PLATFORM", "VERIFIED")]
    cells += [
        (
            row.name,
            short_id(row.id),
            human_size(row.size),
            ago(row.created),
            row.platform or (f"broken: {row.error}" if row.error is not None else "-"),
            verified(row.verified),
        )
        for row in rows
    ]
    print(table(cells))
    return 0
