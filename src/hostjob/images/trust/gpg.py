"""Simple signing: a GPG-signed JSON payload (``skopeo copy --sign-by``), verified with
GnuPG's ``gpgv``.

``gpgv`` checks a signature against a keyring file and trusts every key in it, which
is what a ``signedBy`` requirement means: the keyring holds exactly the requirement's
keys (``keyPath``, ``keyPaths`` or ``keyData``; armored keys are dearmored here), in a
private temporary directory with its own GnuPG home, so no key of the host's own
keyrings takes part. A signature is accepted only with exactly one signature in it,
``GOODSIG`` and ``VALIDSIG`` and none of ``BADSIG``, ``ERRSIG``, ``EXPSIG``,
``EXPKEYSIG``, ``REVKEYSIG``; ``gpgv`` ends with status 0.

The signature comes from a registry or a lookaside server, so it is hostile: it is at
most ``stores.SIGNATURE_LIMIT`` bytes, what ``gpgv`` writes (the payload, perhaps
decompressed from a small signature) is read up to ``PAYLOAD_LIMIT`` and its status
lines up to ``STATUS_LIMIT``, and ``gpgv`` is killed past either or after ``TIMEOUT``
seconds.
"""

from __future__ import annotations

import base64
import os
import subprocess
import tempfile
import time
from typing import TYPE_CHECKING

from hostjob.images.errors import InvalidSignature, PolicyError

if TYPE_CHECKING:
    from collections.abc import Iterable

GPGV = "gpgv"
PAYLOAD_LIMIT = 1 << 20
STATUS_LIMIT = 64 << 10
TIMEOUT = 30.0
_BEGIN = b"-----BEGIN PGP PUBLIC KEY BLOCK-----"
_END = b"-----END PGP PUBLIC KEY BLOCK-----"
_FAILURES = ("BADSIG", "ERRSIG", "EXPSIG", "EXPKEYSIG", "REVKEYSIG", "NO_PUBKEY")


def keyring(keys: Iterable[bytes], what: str) -> bytes:
    """The binary keyring of ``keys`` (each binary or ASCII-armored OpenPGP keys)."""
    out = bytearray()
    for data in keys:
        out += dearmor(data, what) if _BEGIN in data else data
    return bytes(out)


def dearmor(data: bytes, what: str) -> bytes:
    """Every ``PGP PUBLIC KEY BLOCK`` of ``data``, decoded (RFC 4880, section 6)."""
    out = bytearray()
    rest = data
    while _BEGIN in rest:
        block, found, rest = rest.partition(_BEGIN)[2].partition(_END)
        if not found:
            raise PolicyError(f"{what}: an armored key block without its END line")
        lines = block.replace(b"\r", b"").split(b"\n")
        body = lines[1:]
        if b"" in body:  # armor headers (Version: ...) end at the first empty line
            body = body[body.index(b"") + 1 :]
        encoded = b"".join(line.strip() for line in body if not line.startswith(b"="))
        try:
            out += base64.b64decode(encoded, validate=True)
        except ValueError as err:
            raise PolicyError(f"{what}: an armored key block is not base64") from err
    return bytes(out)


def verify(ring: bytes, signature: bytes) -> tuple[bytes, str]:
    """``(payload, fingerprint of the signing primary key)`` of a simple-signing
    signature made by a key of ``ring``; ``InvalidSignature`` otherwise."""
    if not ring:
        raise InvalidSignature("no public keys imported")
    with tempfile.TemporaryDirectory(prefix="hostjob-gpgv-") as tmp:
        ring_path = os.path.join(tmp, "trusted.gpg")
        sig_path = os.path.join(tmp, "signature")
        home = os.path.join(tmp, "home")
        os.mkdir(home, 0o700)
        for path, data in ((ring_path, ring), (sig_path, signature)):
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
            with os.fdopen(fd, "wb") as f:
                f.write(data)
        argv = [GPGV, "--homedir", home, "--keyring", ring_path, "--output", "-"]
        code, payload, status = _run(argv, sig_path)
    return payload, _check_status(code, status)


def _check_status(code: int, status: bytes) -> str:
    words = [line.split()[1:] for line in status.splitlines() if line.startswith(b"[GNUPG:] ")]
    keywords = [w[0].decode("ascii", "replace") for w in words if w]
    for bad in _FAILURES:
        if bad in keywords:
            raise InvalidSignature(f"invalid GPG signature ({bad})")
    if keywords.count("NEWSIG") != 1:
        raise InvalidSignature(f"{keywords.count('NEWSIG')} GPG signatures where one is expected")
    valid = [w for w in words if w and w[0] == b"VALIDSIG"]
    if code != 0 or "GOODSIG" not in keywords or len(valid) != 1 or len(valid[0]) < 2:
        raise InvalidSignature("invalid GPG signature")
    # VALIDSIG <signing key> ... <primary key>: the primary key names the signer.
    return valid[0][-1].decode("ascii", "replace").upper()


def _run(argv: list[str], sig_path: str) -> tuple[int, bytes, bytes]:
    """Run ``gpgv`` on ``sig_path``: its exit status, what it wrote and its status
    lines, each bounded; ``InvalidSignature`` past a bound or the time limit."""
    import selectors

    read_status, write_status = os.pipe()
    try:
        proc = subprocess.Popen(
            [*argv[:1], "--status-fd", str(write_status), *argv[1:], sig_path],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            pass_fds=(write_status,),
            env={"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "LC_ALL": "C"},
        )
    except FileNotFoundError as err:
        os.close(read_status)
        raise PolicyError(f"signedBy needs GnuPG's {GPGV}, which is not installed") from err
    finally:
        os.close(write_status)
    assert proc.stdout is not None
    out_fd = proc.stdout.fileno()
    outputs = {out_fd: bytearray(), read_status: bytearray()}
    limits = {out_fd: PAYLOAD_LIMIT, read_status: STATUS_LIMIT}
    deadline = time.monotonic() + TIMEOUT
    try:
        with selectors.DefaultSelector() as selector:
            for fd in outputs:
                selector.register(fd, selectors.EVENT_READ)
            while selector.get_map():
                left = deadline - time.monotonic()
                if left <= 0:
                    raise InvalidSignature(f"{GPGV} took more than {TIMEOUT:g}s")
                for key, _ in selector.select(left):
                    chunk = os.read(key.fd, 65536)
                    if not chunk:
                        selector.unregister(key.fd)
                        continue
                    outputs[key.fd] += chunk
                    if len(outputs[key.fd]) > limits[key.fd]:
                        raise InvalidSignature("the GPG signature's payload is too large")
        try:
            code = proc.wait(max(deadline - time.monotonic(), 0.1))
        except subprocess.TimeoutExpired as err:
            raise InvalidSignature(f"{GPGV} took more than {TIMEOUT:g}s") from err
    except BaseException:
        proc.kill()
        proc.wait()
        raise
    finally:
        proc.stdout.close()
        os.close(read_status)
    return code, bytes(outputs[out_fd]), bytes(outputs[read_status])
