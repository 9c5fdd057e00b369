"""Images: a client of the runtime, cut the way containerd cuts its image side.

Nothing outside it but the CLI and the public API imports this package, not even
the runtime (``tests/unit/test_architecture.py`` pins it), and a bundle's runtime
command never loads it (``tests/unit/test_imports.py``); ``hostjob run IMAGE`` and
the image commands import what they use. Heavy libraries (httpx, rich, isal,
zstandard) are imported inside the functions that need them. Modules, one concern
each, lowest first::

    reference   parse ``oci:``/``oci-archive:``/``docker-archive:``/registry references
    platforms   the host's platform, ``os/arch[/variant]``, choosing from an index
    options     what a pull or push is told: ``RegistryOptions``, ``UnpackLimits``,
                ``TrustOptions``
    progress    typed progress events, and their renderers (rich on a tty)
    root        the store's directory: its 0700 check, its layout, locks, JSON files
    content     blobs by digest: verified ingest, read; ``Digester`` (hash and count)
    limits      what one image may unpack to: bytes and inodes (``Budget``)
    decompress  gzip (isal or zlib), zstd or plain tar streams, by magic bytes
    extractor   the fd-relative, whiteout-aware writer of tar entries
    unpack      a layer blob into a directory: verified, temp dir + rename
    layers      the unpacked-layer cache by diffID (``LayerRecord``)
    names       the name index (``NameRecord``), lookups by name, digest or ID
    gc          container references (``ContainerRef``), the lease, rmi, prune
    resolve     names -> ``ResolvedImage``, ``ImageSummary``, ``ImageDetails``
    sources     OCI layouts (dir or tar) and ``docker save`` tars as pull sources
    remotes     the distribution API, one part per job: transport, stall (the
                deadline of every connection), credentials, auth (the authorizer),
                session, resolver, fetcher, pusher
    registry    ``RegistryClient`` (those parts together), ``RegistrySource``
    trust       the signature policy (containers-policy.json), where signatures are
                found (registries.d, attachments, layouts), their verification
    pull        sources -> content + layers, then a name (``PullResult``)
    push        an image -> a registry (``PushResult``)
    store       ``Store``: the facade over content, layers, names, gc, resolver
    overlay     overlayfs mounts of layer dirs (three methods, any number of layers)
    rootfs      an image container's overlay + writable layer, as the runtime's
                ``RootfsProvider`` (``ImageRootfs``)
    runspec     image config + ``run`` flags -> a runtime-spec config
    run_image   ``hostjob run IMAGE``: the container, through ``hostjob.runtime`` (or,
                detached, ``hostjob.supervisor``)
    archive     a directory walked fd-relative and written as a tar layer
    layout      an OCI image layout written (blobs, index.json) and its tar
    pack        a reproducible one-layer image from a directory

Library verbs (each returns a typed record; the CLI renders it)::

    from hostjob.images.store import Store
    store = Store(root=None)                  # default $HOSTJOB_STORE, else /var/lib/hostjob
    store.pull(ref, *, name=None, platform=None, registry=None, limits=None,
               trust=None, progress=None) -> PullResult
    # registry: options.RegistryOptions(credentials=None, authfile=None,
    #           tls_verify=True, plain_http=False, stall_timeout=60.0)
    # limits:   options.UnpackLimits(max_bytes=None, max_inodes=None)
    # trust:    options.TrustOptions(signature_policy=None, registries_d=None): the
    #           policy decides before anything is stored (SignatureRejected)
    store.import_archive(ref, *, name=None, limits=None, trust=None,
                         progress=None) -> PullResult
                                              # oci:, oci-archive:, docker-archive:
    store.get(ref, *, pull="missing", platform=None, registry=None, limits=None,
              trust=None, progress=None) -> ResolvedImage
    store.resolve(name) -> ResolvedImage      # .config (imagespec.ImageConfig),
                                              # .layer_dirs (bottom first), .id, ...
    store.images() -> list[ImageSummary]
    store.inspect(name) -> ImageDetails
    store.remove(name, force=False) -> Removed  # rmi: .untagged, .deleted, .freed
    store.prune() -> Freed                      # .bytes, .blobs, .layers
    hostjob.images.push.push(src, dest, *, store_root=None, registry=None,
               trust=None, progress=None) -> PushResult
    hostjob.images.pack.pack(src_dir, to, *, entrypoint=None, ...) -> PackResult
    hostjob.images.run_image.run_image(store, image, flags, *, root, name=None, ...)
                                              # -> (container ID, exit status)
    progress: hostjob.images.progress.renderer(quiet=False, stream=sys.stderr)
               gives the callback; progress.close(render) when done.
"""
