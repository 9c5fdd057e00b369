"""``hostjob spec``: write a job-container config.json template."""

from __future__ import annotations

from hostjob.cli.args import FLAG, VALUE, Command, Option
from hostjob.spec.template import write_template

TYPE_CHECKING = False
if TYPE_CHECKING:
    from hostjob.cli.args import Args
    from hostjob.cli.main import Context

COMMAND = Command(
    "spec",
    "Write a job-container config.json template into the bundle directory.",
    options=(
        Option("bundle,b", VALUE, "bundle directory", default="."),
        Option("rootless", FLAG, "accepted for runc compatibility; the template is the same"),
    ),
)


def run(args: Args, ctx: Context) -> int:
    write_template(args.bundle)
    return 0
