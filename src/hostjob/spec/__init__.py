"""The wire formats: runtime-spec (``runtime``, with its cgroup ``resources`` and its
``windows`` section; ``state``, ``features``, ``template``) and image-spec (``image``),
decoded by ``_decode``."""

# The runtime-spec version hostjob speaks (state documents, features, `spec`).
OCI_VERSION = "1.2.0"
