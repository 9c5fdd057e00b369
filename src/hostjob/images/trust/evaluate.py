"""The decision: may this image come in? (containers/image's ``IsRunningImageAllowed``.)

A ``Verifier`` reads the policy once per command (a policy that cannot be read fails
the command before anything is fetched) and decides each image from its scope, its
manifest and, if a requirement asks, its signatures. The decision is logged
(``--log``; with ``--debug`` on stderr too) and returned as a ``Verdict``, which the
store keeps with the image's name and ``images`` shows. Without a policy file the
image comes in unverified, and the command says so once, on stderr (or in ``--log``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from hostjob import log
from hostjob.images.errors import SignatureRejected
from hostjob.images.trust import policy as policies
from hostjob.images.trust import registries_d
from hostjob.images.trust.requirements import Candidate

if TYPE_CHECKING:
    from collections.abc import Callable

    from hostjob.images.options import TrustOptions
    from hostjob.images.trust.formats import Signature
    from hostjob.images.trust.scopes import ImageScope

_told = False  # whether this process said that there is no policy


class Verdict:
    """What the policy decided for one image: ``section`` is the part of the policy
    that applied (``default``, ``transports.docker[host/org]``), ``by`` what vouched
    for it (``[{"requirement": "signedBy", "key": FINGERPRINT}]``; empty when
    nothing was verified)."""

    __slots__ = ("accepted", "by", "policy", "reason", "section")

    def __init__(
        self,
        policy: str | None,
        section: str,
        accepted: bool,
        reason: str = "",
        by: list[dict[str, str]] | None = None,
    ) -> None:
        self.policy = policy
        self.section = section
        self.accepted = accepted
        self.reason = reason
        self.by = by or []

    def to_json(self) -> dict[str, Any]:
        """As the store keeps it with the image's name."""
        return {"policy": self.policy, "section": self.section, "by": self.by}

    def __repr__(self) -> str:
        return f"Verdict({self.policy!r}, {self.section!r}, {self.accepted}, by={self.by})"


class Verifier:
    """The policy of one command, and where its signatures are found."""

    __slots__ = ("_registries", "policy", "registries_dir")

    def __init__(self, options: TrustOptions | None = None) -> None:
        path = policies.find(options.signature_policy if options else None)
        self.policy = policies.Policy.load(path) if path is not None else None
        self.registries_dir = registries_d.find(options.registries_d if options else None)
        self._registries: registries_d.RegistriesD | None = None

    @property
    def registries(self) -> registries_d.RegistriesD:
        """``registries.d``, read when a signature is first looked for."""
        if self._registries is None:
            self._registries = registries_d.RegistriesD.load(self.registries_dir)
        return self._registries

    def check(
        self,
        scope: ImageScope,
        manifest: bytes,
        digest: str,
        fetch: Callable[[], list[Signature]],
    ) -> Verdict:
        """The decision for the image at ``scope`` whose manifest (``digest``) is
        ``manifest``; ``fetch`` finds its signatures, if a requirement needs them."""
        if self.policy is None:
            _tell_no_policy()
            return Verdict(None, "no policy", True)
        section, requirements = self.policy.requirements(scope)
        image = Candidate(scope, manifest, digest, fetch)
        by = []
        for requirement in requirements:
            outcome = requirement.evaluate(image)
            if not outcome.accepted:
                return Verdict(self.policy.path, section, False, outcome.reason)
            if outcome.by:
                by.append(outcome.by)
        return Verdict(self.policy.path, section, True, by=by)

    def require(
        self,
        name: str,
        scope: ImageScope,
        manifest: bytes,
        digest: str,
        fetch: Callable[[], list[Signature]],
    ) -> Verdict:
        """``check``, logged; a rejection is ``SignatureRejected`` naming the image
        (``name``), the policy and its section, and the reason."""
        verdict = self.check(scope, manifest, digest, fetch)
        where = f"signature policy {verdict.policy} ({verdict.section})"
        if not verdict.accepted:
            raise SignatureRejected(f"{name}: rejected by the {where}: {verdict.reason}")
        if verdict.policy is not None:
            vouched = describe(verdict.by)
            log.info(f"{name} ({digest}): accepted by the {where}: {vouched}")
        return verdict


def _tell_no_policy() -> None:
    global _told
    if not _told:
        _told = True
        log.warning(
            f"no signature policy ({policies.SYSTEM_POLICY}, ~/{policies.USER_POLICY}):"
            " images come in unverified",
            stderr=True,
        )


def describe(by: list[dict[str, str]]) -> str:
    """``signedBy GPG key FPR, sigstoreSigned key SHA256:…``, or that nothing was."""
    words = {"signedBy": "GPG key", "sigstoreSigned": "key"}
    parts = []
    for item in by:
        kind = item.get("requirement", "")
        parts.append(f"{kind} {words.get(kind, 'key')} {item.get('key')}")
    return ", ".join(parts) or "nothing verified"
