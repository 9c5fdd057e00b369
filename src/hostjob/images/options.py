"""What a pull or a push is told, each as one value passed whole: how to reach a
registry (``RegistryOptions``), what one image may unpack to (``UnpackLimits``) and
which signature policy decides whether it may come in at all (``TrustOptions``).
Their defaults are here and nowhere else.

``hostjob run IMAGE`` builds both before it knows whether anything is to be pulled,
and a cached ``run IMAGE`` is a runtime command: this module imports nothing but the
exception tree.
"""

from __future__ import annotations

from hostjob.errors import InvalidArgument

STALL_TIMEOUT = 60.0  # seconds a registry connection may go without progress


class RegistryOptions:
    """How to reach a registry.

    ``credentials``: ``(user, password)``; None looks them up in ``authfile``, else in
    the usual auth files (``hostjob.images.remotes.credentials``). ``tls_verify``:
    verify the registry's certificate. ``plain_http``: talk HTTP to it.
    ``stall_timeout``: seconds a connection may move less than 64 KiB before the
    transfer fails (``hostjob.images.remotes.stall``)."""

    __slots__ = ("authfile", "credentials", "plain_http", "stall_timeout", "tls_verify")

    def __init__(
        self,
        *,
        credentials: tuple[str, str] | None = None,
        authfile: str | None = None,
        tls_verify: bool = True,
        plain_http: bool = False,
        stall_timeout: float = STALL_TIMEOUT,
    ) -> None:
        if not stall_timeout > 0:
            raise InvalidArgument(f"--stall-timeout {stall_timeout:g}: must be more than 0 seconds")
        self.credentials = credentials
        self.authfile = authfile
        self.tls_verify = tls_verify
        self.plain_http = plain_http
        self.stall_timeout = stall_timeout

    def __repr__(self) -> str:
        # Never the password: a repr ends up in logs and tracebacks.
        user = None if self.credentials is None else self.credentials[0]
        return (
            f"RegistryOptions(user={user!r}, authfile={self.authfile!r},"
            f" tls_verify={self.tls_verify}, plain_http={self.plain_http},"
            f" stall_timeout={self.stall_timeout:g})"
        )


class UnpackLimits:
    """What one image may unpack to, across its layers: ``max_bytes`` of file data and
    ``max_inodes`` inodes. None: the store filesystem's free space or free inodes,
    less a reserve (``hostjob.images.limits.budget``)."""

    __slots__ = ("max_bytes", "max_inodes")

    def __init__(self, max_bytes: int | None = None, max_inodes: int | None = None) -> None:
        if max_bytes is not None and max_bytes < 0:
            raise InvalidArgument(f"--max-image-size {max_bytes}: must not be negative")
        if max_inodes is not None and max_inodes < 0:
            raise InvalidArgument(f"--max-image-inodes {max_inodes}: must not be negative")
        self.max_bytes = max_bytes
        self.max_inodes = max_inodes

    def __repr__(self) -> str:
        return f"UnpackLimits(max_bytes={self.max_bytes}, max_inodes={self.max_inodes})"


class TrustOptions:
    """Where the signature policy and the signature stores' configuration are read.

    ``signature_policy``: a ``containers-policy.json(5)`` file; None: the user's
    ``~/.config/containers/policy.json`` if it exists, else
    ``/etc/containers/policy.json``, else no policy (images come in unverified, and
    the command says so once). ``registries_d``: a ``containers-registries.d(5)``
    directory; None: ``~/.config/containers/registries.d`` if it exists, else
    ``/etc/containers/registries.d``. The rules are containers/image's, so podman,
    skopeo and hostjob read the same files (``hostjob.images.trust``)."""

    __slots__ = ("registries_d", "signature_policy")

    def __init__(
        self, *, signature_policy: str | None = None, registries_d: str | None = None
    ) -> None:
        if signature_policy == "":
            raise InvalidArgument("--signature-policy: empty file name")
        if registries_d == "":
            raise InvalidArgument("--registries.d: empty directory name")
        self.signature_policy = signature_policy
        self.registries_d = registries_d

    def __repr__(self) -> str:
        return (
            f"TrustOptions(signature_policy={self.signature_policy!r},"
            f" registries_d={self.registries_d!r})"
        )
