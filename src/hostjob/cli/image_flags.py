"""The flags the image commands share, each declared once with its one help text, and
the functions that turn them into the library's values.

``run``, ``pull``, ``push``, ``import`` and ``pack`` take what they need of these
(the store commands, ``--store``); ``registry_options`` makes the
``RegistryOptions``, ``unpack_limits`` the ``UnpackLimits`` and ``trust_options`` the
``TrustOptions`` from what was parsed.

``run`` is a runtime command (a bundle, and a cached ``run IMAGE``), so this module
imports nothing but ``hostjob.cli.args`` at its top: the values' classes, the
credentials' code and the store load inside the functions, which only the image
form calls.
"""

from __future__ import annotations

from hostjob.cli.args import FLAG, INT, VALUE, Option

TYPE_CHECKING = False
if TYPE_CHECKING:
    from hostjob.cli.args import Args
    from hostjob.images.options import RegistryOptions, TrustOptions, UnpackLimits
    from hostjob.images.store import Store

STORE = Option(
    "store",
    VALUE,
    "image store directory (default $HOSTJOB_STORE, else /var/lib/hostjob)",
    metavar="dir",
)
PLATFORM = Option(
    "platform",
    VALUE,
    "the image to pick from a multi-platform index (default: the host's)",
    metavar="os/arch[/variant]",
)
QUIET = Option("quiet,q", FLAG, "no progress output (pull, import: print only the image ID)")

# How to reach a registry: ``RegistryOptions``.
REGISTRY = (
    Option(
        "creds",
        VALUE,
        "registry credentials; - reads the line from stdin (argv is readable by all)",
        metavar="user:pass|-",
    ),
    Option(
        "authfile",
        VALUE,
        "the auth file (containers auth.json, docker config.json) with the registry's"
        " credentials (default: $REGISTRY_AUTH_FILE, else the first of"
        " $XDG_RUNTIME_DIR/containers/auth.json, ~/.config/containers/auth.json,"
        " ~/.docker/config.json that has them)",
        metavar="file",
    ),
    Option(
        "tls-verify",
        FLAG,
        "verify the registry's certificate (default; =false to skip)",
        default=True,
    ),
    Option("plain-http", FLAG, "talk to the registry over http://"),
    Option(
        "stall-timeout",
        VALUE,
        "fail when a registry connection moves less than 64 KiB in this long (default 60s)",
        metavar="duration",
    ),
)

# Which images may come in: ``TrustOptions`` (containers-policy.json, registries.d).
TRUST = (
    Option(
        "signature-policy",
        VALUE,
        "the signature policy (containers-policy.json) that decides which images may come"
        " in (default: ~/.config/containers/policy.json if it exists, else"
        " /etc/containers/policy.json)",
        metavar="file",
    ),
    Option(
        "registries.d",
        VALUE,
        "where registries' signature stores are configured (default:"
        " ~/.config/containers/registries.d if it exists, else /etc/containers/registries.d)",
        dest="registries_d",
        metavar="dir",
    ),
)

# What one image may unpack to: ``UnpackLimits``.
UNPACK = (
    Option(
        "max-image-size",
        VALUE,
        "fail when the image's layers unpack to more (default: the store's free space less"
        " a reserve)",
        metavar="size",
    ),
    Option(
        "max-image-inodes",
        INT,
        "fail when the image's layers unpack to more files, directories and links"
        " (default: the store's free inodes less a reserve)",
        metavar="n",
    ),
)


def registry_options(args: Args) -> RegistryOptions:
    """The ``REGISTRY`` flags as the library's value: ``--creds -`` read from stdin,
    given credentials hidden from this process's command line first."""
    from hostjob.images.options import STALL_TIMEOUT, RegistryOptions
    from hostjob.units import parse_duration

    credentials = None
    if args.creds is not None:
        from hostjob.images.remotes.credentials import take_creds

        credentials = take_creds(args.creds)
    stall = args.stall_timeout
    return RegistryOptions(
        credentials=credentials,
        authfile=args.authfile,
        tls_verify=args.tls_verify,
        plain_http=args.plain_http,
        stall_timeout=STALL_TIMEOUT if stall is None else parse_duration(stall),
    )


def unpack_limits(args: Args) -> UnpackLimits:
    """The ``UNPACK`` flags as the library's value."""
    from hostjob.images.options import UnpackLimits
    from hostjob.units import parse_size

    size = args.max_image_size
    return UnpackLimits(
        None if size is None else parse_size(size, "--max-image-size"), args.max_image_inodes
    )


def trust_options(args: Args) -> TrustOptions:
    """The ``TRUST`` flags as the library's value."""
    from hostjob.images.options import TrustOptions

    return TrustOptions(signature_policy=args.signature_policy, registries_d=args.registries_d)


def open_store(args: Args) -> Store:
    """The store ``--store`` names (else ``$HOSTJOB_STORE``, else ``/var/lib/hostjob``)."""
    from hostjob.images.store import Store

    return Store(args.store or None)
