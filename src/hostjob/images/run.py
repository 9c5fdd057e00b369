"""``hostjob run IMAGE``: a job container of an image in the store, as ``podman run``
runs one.

The image is resolved (and pulled, per ``--pull``) by ``Store.get`` first; here its
config and the command line become a runtime-spec config (``runspec``), converted as
any bundle's is (``hostjob.config``), and the container is created with the image's
overlay as its rootfs (``rootfs.ImageRootfs``, the runtime's ``RootfsProvider``)
and run with the runtime's lifecycle (``hostjob.runtime.run``): the same create,
start, wait and delete as a bundle's, the overlay undone by delete like any mount.
"""

from __future__ import annotations

import os

from hostjob.images.rootfs import ImageRootfs
from hostjob.images.runspec import build_spec
from hostjob.runtime.container import CreateOptions
from hostjob.runtime.run import remove_when_done, run
from hostjob.runtime.state_dir import StateStore, validate_id

TYPE_CHECKING = False
if TYPE_CHECKING:
    from hostjob.images.resolve import ResolvedImage
    from hostjob.images.runspec import RunFlags
    from hostjob.images.store import Store


def run_image(
    store: Store,
    image: ResolvedImage,
    flags: RunFlags,
    *,
    root: str,
    name: str | None = None,
    options: CreateOptions | None = None,
    detach: bool = False,
    remove: bool = False,
    subreaper: bool = True,
) -> tuple[str, int]:
    """Run a job container of ``image``; returns (container ID, exit status).

    Without ``remove`` the stopped container stays, with its writable layer, until
    ``delete``; with ``detach`` and ``remove`` a small remover process deletes it
    once its program exits.
    """
    from hostjob import config
    from hostjob.spec import runtime as wire

    container_id = validate_id(name) if name else os.urandom(6).hex()
    flags.check()
    spec = build_spec(image.config.config, flags)
    bundle = StateStore(root).dir(container_id)
    job = config.to_job_config(wire.Spec.decode(spec), bundle, container_id)
    job.image = image.name
    options = options or CreateOptions()
    options.rootfs = ImageRootfs(store.gc, image)
    options.bundle_config = spec
    code = run(
        container_id, job, root=root, options=options, detach=detach, keep=not remove,
        subreaper=subreaper,
    )  # fmt: skip
    if detach and remove:
        remove_when_done(container_id, root)
    return container_id, code
