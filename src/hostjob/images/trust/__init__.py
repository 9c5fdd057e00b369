"""Signed images: the signature policy (containers-policy.json(5)), where signatures
are found (containers-registries.d(5)), and their verification -- the rules
containers/image gives podman, skopeo and CRI-O, so one policy file serves them all.

A pull decides after the image's manifest is fetched and before any of its blobs is
stored (``hostjob.images.pull``): a refused image leaves nothing in the store. Each
module has one job, lowest first::

    jsonfields    strict JSON: duplicate, unknown, missing or mistyped fields are errors
    identity      registry names as signatures carry them; ``signedIdentity`` rules
    scopes        an image's transport, identity and namespaces (``ImageScope``)
    payload       what a signature signs: the manifest digest and a name
    formats       the signatures found: simple signing (GPG), sigstore
    gpg           simple signing verified with ``gpgv``
    sigstore      sigstore signatures verified with ``cryptography``
    requirements  insecureAcceptAnything, reject, signedBy, sigstoreSigned, ...
    policy        the policy file: found, read, the requirements for a scope
    registries_d  lookaside URLs and sigstore attachments, per registry namespace
    stores        signatures from a lookaside, a registry's attachments, a layout
    evaluate      ``Verifier``: the decision (``Verdict``), logged

Nothing here is on a runtime command's path: ``cryptography``, ``yaml`` and the
``gpgv`` process are loaded or started only when a requirement needs them.
"""
