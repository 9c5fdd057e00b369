"""What a pull or push is told (``images/options.py``): the values, their defaults and
their checks."""

from __future__ import annotations

import pytest

from hostjob.errors import InvalidArgument
from hostjob.images.options import STALL_TIMEOUT, RegistryOptions, UnpackLimits


def test_registry_options_default_to_a_verified_https_registry() -> None:
    options = RegistryOptions()
    assert options.credentials is None and options.authfile is None
    assert options.tls_verify is True and options.plain_http is False
    assert options.stall_timeout == STALL_TIMEOUT == 60.0


@pytest.mark.parametrize("stall", [0.0, -1.0, float("nan")])
def test_a_stall_timeout_must_be_a_positive_time(stall: float) -> None:
    with pytest.raises(InvalidArgument, match=r"--stall-timeout .*more than 0 seconds"):
        RegistryOptions(stall_timeout=stall)


def test_the_repr_names_the_user_never_the_password() -> None:
    shown = repr(RegistryOptions(credentials=("alice", "s3cret"), plain_http=True))
    assert "alice" in shown and "plain_http=True" in shown
    assert "s3cret" not in shown


def test_unpack_limits_default_to_the_stores_and_refuse_negatives() -> None:
    limits = UnpackLimits()
    assert (limits.max_bytes, limits.max_inodes) == (None, None)
    assert (UnpackLimits(0, 0).max_bytes, UnpackLimits(5, 7).max_inodes) == (0, 7)
    with pytest.raises(InvalidArgument, match="--max-image-size -1: must not be negative"):
        UnpackLimits(max_bytes=-1)
    with pytest.raises(InvalidArgument, match="--max-image-inodes -2: must not be negative"):
        UnpackLimits(max_inodes=-2)
