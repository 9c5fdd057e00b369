"""A registry's distribution API, cut the way containerd cuts its remotes.

Each module has one job, lowest first::

    transport    the HTTP client of one registry and what every part shares: origins,
                 one-line errors, the registry's own error message (bounded), retries
    stall        the stall deadline every connection keeps (a network backend)
    credentials  where credentials come from: ``--creds``, docker/containers auth files
    auth         the authorizer: a 401's challenge answered, tokens fetched and cached,
                 and which token realm may ever see the credentials
    session      one request to the registry: the authorizer's header to the
                 registry's origin only, redirects followed by hand
    resolver     a tag or digest -> the manifest or index (bounded, verified)
    fetcher      a blob -> a verifying writer (resumed with ``Range``)
    pusher       blobs up (checked first, uploaded monolithically), then the manifest

``hostjob.images.registry`` puts them together (``RegistryClient``) and makes a
registry a pull source (``RegistrySource``). httpx is imported by these modules only,
so nothing on the runtime path pays for it.
"""
