"""Images: references, the store, pulling, safe unpacking, overlay mounts, pack.

Nothing here is imported by the runtime path of a bundle; ``hostjob run IMAGE`` and
the image commands import what they use. Heavy libraries (httpx, rich, isal,
zstandard) are imported inside the functions that need them.

Modules, one concern each::

    reference   parse ``oci:``/``oci-archive:``/``docker-archive:``/registry references
    platforms   the host's platform, ``os/arch[/variant]``, choosing from an index
    sources     OCI layouts (dir or tar) and ``docker save`` tars as pull sources
    registry    the distribution API client (auth, redirects, resume) and ``push``
    store       the content-addressed store and every library verb
    unpack      the fd-relative, whiteout-aware layer extractor
    overlay     overlayfs mounts of layer dirs + a per-container upper dir
    pack        a reproducible one-layer image from a directory
    progress    typed progress events and their renderers (rich on a tty)

Library verbs for the CLI (each returns plain JSON-able data)::

    from hostjob.images.store import Store
    store = Store(root=None)                     # default $HOSTJOB_STORE, else /var/lib/hostjob
    store.pull(ref, *, name=None, platform=None, creds=None, tls_verify=True,
               plain_http=False, docker_config=None, progress=None) -> dict
    store.import_archive(ref, **same) -> dict    # oci:, oci-archive:, docker-archive:
    store.images() -> list[dict]                 # name, id, digest, created, size, platform
    store.inspect(name) -> dict                  # names, digests, manifest, config, layers
    store.remove(name, force=False) -> dict      # rmi: {untagged, deleted, bytes, blobs, layers}
    store.prune() -> dict                        # {bytes, blobs, layers}
    hostjob.images.pack.pack(src_dir, to, *, entrypoint=None, cmd=None, env=None,
               workdir=None, labels=None, user=None, base=None, keep_owner=False,
               mtime=None, store_root=None) -> dict
    hostjob.images.registry.push(src, dest, *, store_root=None, creds=None,
               tls_verify=True, plain_http=False) -> manifest digest
    progress: hostjob.images.progress.renderer(quiet=False, stream=sys.stderr)
               gives the callback; progress.close(render) when done.

For the runtime (``hostjob run IMAGE``)::

    image = store.get(ref, pull="missing", platform=None, creds=None, ...)
                                                 # --pull always|missing|never; any name,
                                                 # ID, registry or oci:/archive reference
    image = store.resolve(name)                  # ResolvedImage: .config (spec.image.
                                                 # ImageConfig: .config.env/entrypoint/cmd/
                                                 # working_dir/user/labels), .layer_dirs
                                                 # (bottom first), .manifest_digest, .id
    info = store.mount_container(container_id, image, target, rw_dir=None)
                                                 # registers the container (prune keeps
                                                 # its layers), makes rw/<id>/{upper,work},
                                                 # mounts the overlay at target
    store.unmount_container(container_id, target, rw_dir=None)
                                                 # at delete: unmount, remove the upper
                                                 # dir, unregister; idempotent
"""
